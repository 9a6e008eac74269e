"""Share-group membership and assignment (share_group.py), share sessions and durable records
(share_coordinator.py), and the share.* group configs (group_configs.py), on a clock moved by hand."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from walgate.coordinator.group_configs import GroupTimeouts
from walgate.coordinator.share_coordinator import AckBatch, ReadWant, ShareCoordinator, ShareSettings
from walgate.coordinator.share_group import ShareGroups, ShareMember, assign
from walgate.coordinator.share_partition import Acquired

PARTITIONS = {"t": 2, "u": 1}


def beat(groups: ShareGroups, member: str, epoch: int, topics: list[str] | None = None, now: int = 0,
         group: str = "g") -> dict[str, Any]:
    response, _ = groups.heartbeat(group_id=group, member_id=member, member_epoch=epoch,
                                   subscribed_topic_names=topics, partitions=PARTITIONS.get, client_id="c",
                                   client_host="/h", now_ms=now)
    return response


def owned(response: dict[str, Any]) -> dict[str, list[int]]:
    return {t["topic_name"]: t["partitions"] for t in response["assignment"]["topic_partitions"]}


def test_more_members_than_partitions_share_them_and_fewer_split_them():
    members = [ShareMember(m, 0, ["t"], "", "", 0) for m in ("a", "b", "c")]
    assert assign(members, PARTITIONS.get) == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {"t": [0]}}
    assert assign(members[:1], PARTITIONS.get) == {"a": {"t": [0, 1]}}
    assert assign([ShareMember("a", 0, ["nope"], "", "", 0)], PARTITIONS.get) == {"a": {}}


def test_a_held_group_without_members_takes_no_member_until_every_hold_ends():
    """The check-then-act window of an administrative change on other nodes: the groups without members are held
    in the call that checks them, and a join meanwhile answers COORDINATOR_LOAD_IN_PROGRESS (retriable)."""
    groups = ShareGroups()
    assert beat(groups, "a", 0, ["t"], group="busy")["error_code"] == ErrorCode.none
    held = groups.hold(["g", "busy", "g"])
    assert held == ["g", "g"], "a group with members is not held: its change is refused NON_EMPTY_GROUP"
    refused = beat(groups, "b", 0, ["t"])
    assert (refused["error_code"], refused["member_id"]) == (ErrorCode.coordinator_load_in_progress, None)
    assert "g" not in groups.groups, "the refused join left no member"
    assert beat(groups, "b", 0, ["t"], group="busy")["error_code"] == ErrorCode.none
    groups.release(held[:1])
    assert beat(groups, "b", 0, ["t"])["error_code"] == ErrorCode.coordinator_load_in_progress, "one hold is left"
    groups.release(held[1:])
    assert beat(groups, "b", 0, ["t"])["error_code"] == ErrorCode.none
    assert not groups.held


def test_join_heartbeat_fence_and_leave():
    groups = ShareGroups(heartbeat_interval_ms=100, session_timeout_ms=1000)
    first = beat(groups, "a", 0, ["t"])
    assert first["error_code"] == ErrorCode.none and owned(first) == {"t": [0, 1]} and first["member_epoch"] == 1
    assert beat(groups, "a", 1)["assignment"] is None  # nothing changed: no assignment
    second = beat(groups, "b", 0, ["t"])
    assert owned(second) == {"t": [1]} and second["member_epoch"] == 2
    moved = beat(groups, "a", 1)
    assert owned(moved) == {"t": [0]} and moved["member_epoch"] == 2
    assert beat(groups, "a", 1)["error_code"] == ErrorCode.fenced_member_epoch
    assert beat(groups, "x", 3)["error_code"] == ErrorCode.unknown_member_id
    assert beat(groups, "", 0, ["t"])["error_code"] == ErrorCode.invalid_request
    assert beat(groups, "c", 0)["error_code"] == ErrorCode.invalid_request  # no subscription on joining
    left, gone = groups.heartbeat(group_id="g", member_id="b", member_epoch=-1, subscribed_topic_names=None,
                                  partitions=PARTITIONS.get, client_id="", client_host="", now_ms=0)
    assert gone and left["member_epoch"] == -1 and not groups.is_member("g", "b")
    assert groups.expire(999, PARTITIONS.get) == [] and groups.expire(1000, PARTITIONS.get) == [("g", "a")]
    assert groups.groups == {}


class Logs:
    def __init__(self) -> None:
        self.ends = {("t", 0): (0, 10)}
        self.reset = "earliest"

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self.ends[(topic, partition)]

    def stable(self, topic: str, partition: int) -> int:
        return self.ends[(topic, partition)][1]

    def settings(self, group_id: str) -> ShareSettings:
        return ShareSettings(1000, 2, self.reset)


def coordinator() -> ShareCoordinator:
    c = ShareCoordinator(ShareGroups(session_timeout_ms=5000), Logs())
    for member in ("a", "b"):
        beat(c.groups, member, 0, ["t"])
    return c


def test_share_session_epochs():
    c = coordinator()
    assert c.session("g", "a", 1, fetch=True)[0] == ErrorCode.share_session_not_found
    assert c.session("g", "z", 0, fetch=True)[0] == ErrorCode.unknown_member_id
    assert c.session("g", "a", 0, fetch=False)[0] == ErrorCode.invalid_share_session_epoch
    assert c.session("g", "a", 0, fetch=True)[0] == ErrorCode.none
    assert c.session("g", "a", 2, fetch=True)[0] == ErrorCode.invalid_share_session_epoch
    assert c.session("g", "a", 1, fetch=True)[0] == ErrorCode.none
    assert c.session("g", "a", 2, fetch=False)[0] == ErrorCode.none
    assert c.update_session("g", "a", [("t", 0), ("t", 1)], [("t", 1)]) == [("t", 0)]


def test_acknowledge_and_close_release_and_records_are_durable_values():
    c = coordinator()
    c.session("g", "a", 0, fetch=True)
    c.update_session("g", "a", [("t", 0)], [])
    got = c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: ErrorCode.unknown_server_error)
    assert got[("t", 0)].acquired == [Acquired(0, 3, 1)]
    [(key, value)] = c.take_records()  # a new partition is recorded (its start offset holds)
    assert key == ("g", "t", 0) and value["s"] == 0
    c.written()
    assert c.take_records() == []  # an acquisition alone writes nothing
    result = c.acknowledge("g", "a", [AckBatch("t", 0, 0, 1, [1]), AckBatch("t", 0, 5, 5, [1]),
                                      AckBatch("t", 9, 0, 0, [1])], 0, lambda exc: 3)
    assert result[("t", 0)].ack_error == ErrorCode.invalid_record_state  # 5 was never acquired
    assert result[("t", 9)].ack_error == 3  # no such partition: the caller's code
    assert c.take_records()[0][1]["s"] == 2
    c.written()
    c.close("g", "a")  # 2, 3 are released
    assert c.take_records() == [(("g", "t", 0), {"s": 2, "e": 4, "r": [[2, 3, 0, 1]]})]
    c.written()
    again = ShareCoordinator(ShareGroups(), Logs())
    again.load({("g", "t", 0): {"s": 2, "e": 4, "r": [[2, 3, 0, 1]]}})
    beat(again.groups, "b", 0, ["t"])
    out = again.acquire("g", "b", [("t", 0)], 10, 0, lambda exc: ErrorCode.unknown_server_error)
    assert out[("t", 0)].acquired == [Acquired(2, 3, 2), Acquired(4, 9, 1)]


def test_a_refused_write_is_rolled_back():
    c = coordinator()
    c.session("g", "a", 0, fetch=True)
    c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: ErrorCode.unknown_server_error)
    c.written()
    c.acknowledge("g", "a", [AckBatch("t", 0, 0, 3, [1])], 0, lambda exc: 1)
    assert c.partitions[("g", "t", 0)].start == 4
    c.rollback()  # the disk refused the record: the acknowledgement never happened
    assert c.partitions[("g", "t", 0)].start == 0 and c.partitions[("g", "t", 0)].holder(0) == "a"


def test_a_member_that_times_out_or_leaves_without_a_session_releases_its_records():
    c = coordinator()
    c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: ErrorCode.unknown_server_error)
    c.member_left("g", "a", 0)  # no open session: released now
    assert c.partitions[("g", "t", 0)].holder(0) is None
    c.session("g", "b", 0, fetch=True)
    c.acquire("g", "b", [("t", 0)], 4, 0, lambda exc: ErrorCode.unknown_server_error)
    c.member_left("g", "b", 0)  # its session is open: held until it closes (its last acknowledgements ride on it)
    assert c.partitions[("g", "t", 0)].holder(0) == "b"
    beat(c.groups, "b", 0, ["t"], now=0)
    c.expire(999, PARTITIONS.get)  # ... for one lock duration (1000 ms here) at most
    assert ("g", "b") in c.sessions
    c.expire(1000, PARTITIONS.get)
    assert ("g", "b") not in c.sessions and c.partitions[("g", "t", 0)].holder(0) is None
    c.session("g", "b", 0, fetch=True)
    c.acquire("g", "b", [("t", 0)], 4, 1000, lambda exc: ErrorCode.unknown_server_error)
    beat(c.groups, "b", 0, ["t"], now=0)
    c.expire(5001, PARTITIONS.get)  # b's heartbeat session ended (its locks have not)
    assert c.partitions[("g", "t", 0)].holder(0) is None and ("g", "b") not in c.sessions


def test_latest_starts_at_the_log_end_and_a_log_start_past_the_start_moves_it():
    c = coordinator()
    logs = c.logs
    assert isinstance(logs, Logs)
    logs.reset = "latest"
    assert c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: 1)[("t", 0)].acquired == []
    logs.ends[("t", 0)] = (12, 14)
    assert c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: 1)[("t", 0)].acquired == [Acquired(12, 13, 1)]
    assert c.acquire("g", "a", [("t", 9)], 4, 0, lambda exc: 7)[("t", 9)].error == 7


def test_share_group_configs():
    configs = GroupTimeouts(45_000, 5_000, lambda g: {"share.record.lock.duration.ms": "20000"}, 2_000, 3)
    assert configs.share("g") == (20_000, 3, "latest", False)
    configs.validate({"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed",
                      "share.record.lock.duration.ms": "2000",
                      "share.delivery.count.limit": "10"})
    for bad in ({"share.auto.offset.reset": "by_duration:PT1H"}, {"share.record.lock.duration.ms": "1000"},
                {"share.delivery.count.limit": "11"}, {"share.isolation.level": "committed"},
                {"share.heartbeat.interval.ms": "1000"}):
        with pytest.raises(ValueError):
            configs.validate(bad)
    lowered = GroupTimeouts(45_000, 5_000, share_lock_bounds=(1_000, 60_000), share_delivery_bounds=(1, 3))
    lowered.validate({"share.record.lock.duration.ms": "1000", "share.delivery.count.limit": "1"})
    with pytest.raises(ValueError):
        lowered.validate({"share.delivery.count.limit": "6"})  # 5, the broker's own, widens the bound to 5


def test_a_new_session_starts_with_the_partitions_its_request_names_only():
    c = coordinator()
    c.session("g", "a", 0, fetch=True)
    c.update_session("g", "a", [("t", 0), ("t", 1)], [])
    c.session("g", "a", 0, fetch=True)  # the client opens a new one (e.g. after SHARE_SESSION_NOT_FOUND)
    assert c.update_session("g", "a", [("t", 1)], []) == [("t", 1)]


def test_archived_ranges_leave_the_acquired_records_and_are_done():
    c = coordinator()
    got = c.acquire("g", "a", [("t", 0)], 10, 0, lambda exc: 1)[("t", 0)].acquired
    left = c.archive("g", "a", "t", 0, got, [(2, 3), (12, 14)], 0)
    assert left == [Acquired(0, 1, 1), Acquired(4, 9, 1)]
    sp = c.partitions[("g", "t", 0)]
    assert [sp.state(o)[0].name for o in (1, 2, 3, 4)] == ["ACQUIRED", "ARCHIVED", "ARCHIVED", "ACQUIRED"]


def test_next_expiry_names_each_deadline_in_turn_and_expiry_names_what_it_released():
    c = coordinator()  # a and b joined at 0 (sessions end at 5000); locks last 1000
    c.session("g", "a", 0, fetch=True)
    c.update_session("g", "a", [("t", 0)], [])
    assert c.acquire("g", "a", [("t", 0)], 4, 100, lambda exc: 0)[("t", 0)].acquired == [Acquired(0, 3, 1)]
    assert c.next_expiry() == 1100  # the lock, before any session
    c.expire(1099, PARTITIONS.get)
    assert c.take_released() == set()
    c.expire(1100, PARTITIONS.get)
    assert c.take_released() == {("g", "t", 0)} and c.take_released() == set()
    assert c.next_expiry() == 5000  # no lock left: the first session to time out
    assert c.acquire("g", "a", [("t", 0)], 2, 2000, lambda exc: 0)[("t", 0)].acquired == [Acquired(0, 1, 2)]
    beat(c.groups, "b", 2, now=2500)
    c.member_left("g", "a", 2600)  # its session waits for its close, one lock duration at most
    assert c.next_expiry() == 3000  # the lock of 0..1 (acquired at 2000) comes first
    c.expire(3000, PARTITIONS.get)
    assert c.take_released() == {("g", "t", 0)} and c.next_expiry() == 3600
    c.expire(3600, PARTITIONS.get)  # the left member's session is closed
    assert ("g", "a") not in c.sessions and c.next_expiry() == 5000
    c.expire(5000, PARTITIONS.get)  # a's member session ends; b's (heartbeat at 2500) at 7500
    assert not c.groups.is_member("g", "a") and c.next_expiry() == 7500


def test_a_release_names_its_partition_and_an_accept_does_not():
    c = coordinator()
    c.session("g", "a", 0, fetch=True)
    c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: 0)
    c.take_released()
    c.acknowledge("g", "a", [AckBatch("t", 0, 0, 1, [1])], 0, lambda exc: 0)
    assert c.take_released() == set()
    c.acknowledge("g", "a", [AckBatch("t", 0, 2, 2, [2])], 0, lambda exc: 0)
    assert c.take_released() == {("g", "t", 0)}


def test_writes_refused_after_the_call_are_undone_back_to_the_last_durable_one():
    c = coordinator()
    c.session("g", "a", 0, fetch=True)
    c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: 0)
    c.take_records()
    c.written(1)
    c.durable(1)
    for write, offset in ((2, 0), (3, 1)):  # two acknowledgements, queued, not yet durable
        c.acknowledge("g", "a", [AckBatch("t", 0, offset, offset, [1])], 0, lambda exc: 0)
        c.take_records()
        c.written(write)
    c.durable(2)  # the first became durable; the second's sync failed
    c.refused()
    sp = c.partitions[("g", "t", 0)]
    assert (sp.start, sp.holder(1), sp.holder(2)) == (1, "a", "a")  # 1 is the member's again, 0 stays accepted
    c.refused()  # nothing left to undo
    assert c.partitions[("g", "t", 0)] is sp


class UnreadLogs(Logs):
    """Logs whose watermarks are not known now (the coordinator lane between a ShareFetch's reads)."""

    def watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        super().watermarks(topic, partition)  # raises for a partition the log does not have
        return None


def test_an_acknowledgement_where_nothing_was_acquired_is_refused_and_makes_no_state():
    c = ShareCoordinator(ShareGroups(session_timeout_ms=5000), UnreadLogs())
    beat(c.groups, "a", 0, ["t"])
    c.session("g", "a", 0, fetch=True)
    result = c.acknowledge("g", "a", [AckBatch("t", 0, 0, 1, [1]), AckBatch("t", 9, 0, 0, [1])], 0,
                           lambda exc: 3)
    assert (result[("t", 0)].ack_error, result[("t", 0)].ack_message) == (
        ErrorCode.invalid_record_state, "offset 0 is not acquired by this member")
    assert result[("t", 9)].ack_error == 3  # no such partition: the caller's code
    bad = c.acknowledge("g", "a", [AckBatch("t", 0, 1, 0, [1])], 0, lambda exc: 3)
    assert bad[("t", 0)].ack_error == ErrorCode.invalid_request  # a malformed batch, as where there is state
    assert c.take_records() == [] and c.partitions == {}  # nothing made, nothing to write
    # without watermarks nothing is acquired (nor made) either: the caller reads the log first
    c.update_session("g", "a", [("t", 0)], [])
    assert c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: 3)[("t", 0)].acquired == []
    assert c.partitions == {}


def test_reads_name_what_acquiring_needs_from_each_log():
    logs = Logs()
    logs.ends[("t", 1)] = (0, 10)
    c = ShareCoordinator(ShareGroups(session_timeout_ms=5000), logs)
    beat(c.groups, "a", 0, ["t"])
    c.session("g", "a", 0, fetch=True)
    c.update_session("g", "a", [("t", 0)], [])
    assert c.reads("g", [("t", 0)]) == [ReadWant("t", 0, None, 2000, True, "earliest")]  # no state: from the reset
    c.acquire("g", "a", [("t", 0)], 4, 0, lambda exc: 3)
    c.written()
    assert c.reads("g", [("t", 0), ("t", 1)]) == [
        ReadWant("t", 0, 4, 2000),  # the first record it could acquire, and the in-flight window's end
        ReadWant("t", 1, None, 2000, True, "earliest")]
    c.acknowledge("g", "a", [AckBatch("t", 0, 0, 1, [2])], 0, lambda exc: 3)  # 0 and 1 released
    assert c.reads("g", [("t", 0)]) == [ReadWant("t", 0, 0, 2000)]


class LongLocks(Logs):
    def settings(self, group_id: str) -> ShareSettings:
        return ShareSettings(60_000, 2, "earliest")


def test_a_session_of_a_member_another_node_coordinates_opens_and_closes_when_idle():
    c = ShareCoordinator(ShareGroups(session_timeout_ms=5000), LongLocks())  # no member of "g" is known here
    assert c.session("g", "r", 0, fetch=True)[0] == ErrorCode.unknown_member_id  # its coordinator: refused
    assert c.session("g", "", 0, fetch=True, members_known=False)[0] == ErrorCode.unknown_member_id
    assert c.session("g", "r", 0, fetch=True, members_known=False, now_ms=0)[0] == ErrorCode.none
    c.update_session("g", "r", [("t", 0)], [])
    got = c.acquire("g", "r", [("t", 0)], 4, 0, lambda exc: ErrorCode.unknown_server_error)
    assert got[("t", 0)].acquired == [Acquired(0, 3, 1)]
    c.written()
    assert c.session("g", "r", 1, fetch=True, members_known=False, now_ms=3000)[0] == ErrorCode.none
    # idle for the member session timeout (5 s) since its last request, but never less than the lock duration (60 s):
    # a member working 50 s on what it holds keeps it
    assert c.next_expiry() == 60_000  # the records' locks end first
    c.expire(50_000, PARTITIONS.get)
    assert ("g", "r") in c.sessions and c.partitions[("g", "t", 0)].holder(0) == "r"
    assert c.session("g", "r", 2, fetch=True, members_known=False, now_ms=50_000)[0] == ErrorCode.none
    c.acknowledge("g", "r", [AckBatch("t", 0, 0, 3, [1])], 50_000, lambda exc: ErrorCode.unknown_server_error)
    assert c.partitions[("g", "t", 0)].start == 4, "its acknowledgement after 50 s is taken"
    assert c.next_expiry() == 110_000
    c.expire(109_999, PARTITIONS.get)
    assert ("g", "r") in c.sessions
    c.expire(110_000, PARTITIONS.get)
    assert ("g", "r") not in c.sessions
    assert c.session("g", "r", 3, fetch=True, members_known=False, now_ms=110_000)[0] == \
        ErrorCode.share_session_not_found


def test_while_the_placement_of_coordinators_is_unread_the_membership_held_here_decides():
    """members_known None (etcd unreachable before this node read which node coordinates the group): the node
    holding the group's membership, its coordinator, still refuses a member it does not know (a fenced one); a node
    holding none of it opens a session for any member id, as a partition leader does."""
    c = coordinator()
    assert c.session("g", "fenced", 0, fetch=True, members_known=None)[0] == ErrorCode.unknown_member_id
    assert c.session("g", "a", 0, fetch=True, members_known=None, now_ms=0)[0] == ErrorCode.none
    assert c.sessions[("g", "a")].remote_ms is None, "a member of its coordinator's"
    assert c.session("other", "r", 0, fetch=True, members_known=None, now_ms=0)[0] == ErrorCode.none
    assert c.sessions[("other", "r")].remote_ms == 0, "a member another node coordinates"
