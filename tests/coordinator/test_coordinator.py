"""GroupCoordinator: classic and KIP-848 groups in one namespace (conversion, upgrade, classic members)."""

from __future__ import annotations

import itertools
from typing import Any

from coordinator_helpers import MemoryOffsetStore, asg, sub
from kio.schema.errors import ErrorCode

from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.consumer_group import ConsumerGroups
from walgate.coordinator.consumer_protocol import assigned_partitions, subscribed_topics
from walgate.coordinator.coordinator import GroupCoordinator
from walgate.coordinator.offsets import PartitionCommit, commit_offsets

TOPICS = {"t": 4}


class Node:
    """A GroupCoordinator on a fake clock; parked classic answers collected by request id."""

    def __init__(self) -> None:
        ids = itertools.count(1)
        classic = ClassicGroups(member_id_suffix=lambda: str(next(ids)), initial_rebalance_delay_ms=0)
        self.c = GroupCoordinator(
            classic,
            ConsumerGroups(new_member_id=lambda: f"m{next(ids)}", session_timeout_ms=45_000,
                           is_classic_group_in_use=classic.has_members),
        )
        self.now = 0
        self.answers: dict[int, dict[str, Any]] = {}
        self.rids = itertools.count(1)
        self.offset_groups: set[str] = set()  # groups with committed offsets, as the offset store would say

    def _collect(self, completions: list[Any]) -> None:
        for c in completions:
            self.answers[c.request_id] = c.response

    def sleep(self, ms: int) -> None:
        target = self.now + ms
        while (d := self.c.next_deadline()) is not None and d <= target:
            self.now = max(self.now, d)
            self._collect(self.c.tick(self.now, offset_groups=lambda: self.offset_groups))
        self.now = target

    def join(
        self, member_id: str = "", *, owned: dict[str, list[int]] | None = None, session: int = 10_000, group: str = "g"
    ) -> int:
        rid = next(self.rids)
        self._collect(self.c.join(
            rid, topic_partitions=TOPICS.get, group_id=group, member_id=member_id, group_instance_id=None,
            client_id="classic", client_host="/10.0.0.2", protocol_type="consumer",
            protocols=[("range", sub("t", owned=owned))], session_timeout_ms=session, rebalance_timeout_ms=30_000,
            require_known_member_id=True, supports_skip_assignment=False, now_ms=self.now,
        ))
        return rid

    def join_classic(self, **kwargs: Any) -> dict[str, Any]:
        """The v4+ dance; returns the join answer (the test must make sure it is answered)."""
        first = self.answers.pop(self.join(**kwargs))
        assert first["error_code"] == ErrorCode.member_id_required
        rid = self.join(first["member_id"], **kwargs)
        self.sleep(0)
        return self.answers.pop(rid)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> dict[str, Any]:
        rid = next(self.rids)
        self._collect(self.c.sync(
            rid, group_id="g", generation_id=generation, member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocol_name="range", assignments=assignments or {}, now_ms=self.now,
        ))
        return self.answers.pop(rid)

    def heartbeat(self, member_id: str, generation: int) -> ErrorCode:
        return self.c.heartbeat(group_id="g", generation_id=generation, member_id=member_id,
                                group_instance_id=None, now_ms=self.now)

    def hb(self, member_id: str = "", epoch: int = 0, owned: list[int] | None = None, group: str = "g") -> dict[str, Any]:
        response, completions = self.c.consumer_heartbeat(
            group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=60_000 if epoch == 0 else -1,
            subscribed_topic_names=["t"] if epoch == 0 else None, server_assignor=None,
            topic_partitions=TOPICS.get, owned=[] if epoch == 0 else [("t", owned or [])],
            client_id="kip848", client_host="/10.0.0.1", now_ms=self.now,
        )
        self._collect(completions)
        return response


def partitions(response: dict[str, Any]) -> list[int] | None:
    a = response["assignment"]
    if a is None:
        return None
    return next((tp["partitions"] for tp in a["topic_partitions"] if tp["topic_name"] == "t"), [])


def test_consumer_heartbeat_takes_over_an_empty_classic_group():
    n = Node()
    joined = n.join_classic()
    assert joined["error_code"] == ErrorCode.none
    left, _ = n.c.leave(group_id="g", members=[(joined["member_id"], None)], now_ms=n.now)
    assert left["members"][0]["error_code"] == ErrorCode.none
    r = n.hb()
    assert r["error_code"] == ErrorCode.none and partitions(r) == [0, 1, 2, 3]
    assert n.c.classic.group("g") is None
    assert [(g["group_id"], g["group_type"], g["group_state"]) for g in n.c.list_groups()] == [("g", "consumer", "Stable")]


def test_classic_join_takes_over_an_empty_consumer_group():
    n = Node()
    r = n.hb()
    n.hb(r["member_id"], -1)
    assert n.c.consumer.has_group("g") and not n.c.consumer.has_members("g")
    joined = n.join_classic()
    assert joined["error_code"] == ErrorCode.none and joined["leader"] == joined["member_id"]  # a classic leader
    assert not n.c.consumer.has_group("g")
    assert [g["group_type"] for g in n.c.list_groups()] == ["classic"]


def test_consumer_member_upgrades_a_live_classic_group_and_classic_member_rejoins():
    n = Node()
    joined = n.join_classic()
    cid, gen = joined["member_id"], joined["generation_id"]
    assert n.sync(cid, gen, {cid: asg({"t": [0, 1, 2, 3]})})["error_code"] == ErrorCode.none

    # a KIP-848 member joins: the group becomes a consumer group holding the classic member's assignment
    r = n.hb()
    kid = r["member_id"]
    assert r["error_code"] == ErrorCode.none and partitions(r) == []  # all 4 still held by the classic member
    assert n.c.classic.group("g") is None and n.c.consumer.has_members("g")
    assert n.heartbeat(cid, gen) == ErrorCode.rebalance_in_progress  # the target changed: rejoin

    # the (eager) classic member rejoins owning nothing: it is answered at once, no leader, with the epoch
    rejoined = n.answers.pop(n.join(cid))
    assert rejoined["error_code"] == ErrorCode.none and rejoined["leader"] == "" and rejoined["members"] == []
    epoch = rejoined["generation_id"]
    synced = n.sync(cid, epoch)
    mine = set(assigned_partitions(synced["assignment"])["t"])
    assert len(mine) == 2 and n.heartbeat(cid, epoch) == ErrorCode.none

    # the released partitions go to the KIP-848 member
    r = n.hb(kid, r["member_epoch"], owned=[])
    assert set(partitions(r) or []) == {0, 1, 2, 3} - mine and r["member_epoch"] == epoch


def test_classic_member_joins_a_consumer_group_and_gets_the_servers_assignment():
    n = Node()
    r = n.hb()
    kid, kepoch = r["member_id"], r["member_epoch"]
    assert partitions(r) == [0, 1, 2, 3]

    joined = n.join_classic()
    cid, gen = joined["member_id"], joined["generation_id"]
    assert joined["protocol_name"] == "range" and joined["leader"] == ""
    assert assigned_partitions(n.sync(cid, gen)["assignment"]) == {}  # its partitions are still owned
    assert n.heartbeat(cid, gen) == ErrorCode.rebalance_in_progress

    # the KIP-848 member is asked to revoke two, then releases them
    r = n.hb(kid, kepoch, owned=[0, 1, 2, 3])
    keep = partitions(r)
    assert keep is not None and len(keep) == 2
    r = n.hb(kid, r["member_epoch"], owned=keep)

    rejoined = n.answers.pop(n.join(cid))
    synced = n.sync(cid, rejoined["generation_id"])
    assert sorted(assigned_partitions(synced["assignment"])["t"]) == sorted({0, 1, 2, 3} - set(keep))
    assert n.heartbeat(cid, rejoined["generation_id"]) == ErrorCode.none

    # DescribeGroups shows the consumer group in the classic format
    (described,) = n.c.describe(["g"], has_offsets=lambda g: False, report_not_found=True)
    assert described["protocol_type"] == "consumer" and described["group_state"] == "Stable"
    by_member = {m["member_id"]: m for m in described["members"]}
    assert set(by_member) == {kid, cid}
    assert subscribed_topics(by_member[cid]["member_metadata"]) == {"t"}
    assert sorted(assigned_partitions(by_member[kid]["member_assignment"])["t"]) == sorted(keep)

    # a classic member leaves with LeaveGroup: the KIP-848 member gets everything back
    left, _ = n.c.leave(group_id="g", members=[(cid, None)], now_ms=n.now)
    assert left["members"][0]["error_code"] == ErrorCode.none
    r = n.hb(kid, r["member_epoch"], owned=keep)
    assert partitions(r) == [0, 1, 2, 3]


def test_classic_member_of_a_consumer_group_expires_after_its_own_session_timeout():
    n = Node()
    r = n.hb()
    joined = n.join_classic(session=6_000)
    n.sleep(5_000)
    n.hb(r["member_id"], r["member_epoch"], owned=[0, 1, 2, 3])  # the KIP-848 member keeps heartbeating
    assert len(n.c.consumer.group("g").members) == 2
    n.sleep(1_500)
    assert joined["member_id"] not in n.c.consumer.group("g").members


def test_classic_join_with_an_out_of_range_session_timeout_is_refused():
    n = Node()
    n.hb()
    rid = n.join("x", session=1_000)
    assert n.answers.pop(rid)["error_code"] == ErrorCode.invalid_session_timeout


def test_offset_commits_to_a_consumer_group_are_checked_against_member_epochs():
    n = Node()
    store = MemoryOffsetStore()
    r = n.hb()
    kid, epoch = r["member_id"], r["member_epoch"]
    cid = n.join_classic()["member_id"]
    cgen = n.c.consumer.group("g").members[cid].member_epoch

    def commit(member_id: str, generation: int, v9: bool = True, transactional: bool = False) -> ErrorCode:
        plan = commit_offsets(
            n.c.classic, store, group_id="g", generation_id=generation, member_id=member_id, group_instance_id=None,
            topics=[("t", [PartitionCommit(0, 5, -1, None)])], partition_exists=lambda t, p: True,
            report_group_not_found=v9, now_ms=n.now, consumer=n.c.consumer, transactional=transactional,
        )
        return plan.response["topics"][0]["partitions"][0]["error_code"]

    assert commit(kid, epoch) == ErrorCode.none
    assert commit(kid, epoch - 1) == ErrorCode.stale_member_epoch
    assert commit(kid, epoch + 1) == ErrorCode.fenced_member_epoch
    assert commit(kid, epoch, v9=False) == ErrorCode.unsupported_version
    assert commit("nobody", epoch) == ErrorCode.unknown_member_id
    assert commit(cid, cgen, v9=False) == ErrorCode.none
    assert commit(cid, cgen + 7, v9=False) == ErrorCode.illegal_generation
    assert commit("", -1) == ErrorCode.unknown_member_id  # an admin commit needs an empty group
    assert commit("", -1, v9=False, transactional=True) == ErrorCode.none  # a memberless TxnOffsetCommit (kafkajs)
    assert commit("nobody", -1, v9=False, transactional=True) == ErrorCode.unknown_member_id
    assert n.c.consumer.offset_fetch_error("g", None, -1) is None
    assert n.c.consumer.offset_fetch_error("g", kid, epoch - 1) == ErrorCode.stale_member_epoch


def test_a_commit_at_the_epoch_before_a_new_assignment_is_accepted_for_the_partitions_held_then():
    """KIP-1251: the heartbeat answer with a new epoch can cross a commit sent at the old one (what librdkafka
    does while a leaving member's partitions are handed out); partitions the member already had then commit."""
    n = Node()
    store = MemoryOffsetStore()
    a = n.hb()
    b = n.hb()
    a = n.hb(a["member_id"], a["member_epoch"], owned=partitions(a))  # revokes half
    b = n.hb(b["member_id"], b["member_epoch"])  # receives it
    a_parts, old_epoch = partitions(a), a["member_epoch"]
    assert a_parts is not None and len(a_parts) == 2
    n.hb(b["member_id"], -1)  # b leaves: its half goes to a at a new epoch
    a = n.hb(a["member_id"], old_epoch, owned=a_parts)
    new_epoch = a["member_epoch"]
    assert new_epoch > old_epoch and partitions(a) == [0, 1, 2, 3]

    def commit(epoch: int, parts: list[int]) -> dict[int, ErrorCode]:
        plan = commit_offsets(
            n.c.classic, store, group_id="g", generation_id=epoch, member_id=a["member_id"], group_instance_id=None,
            topics=[("t", [PartitionCommit(p, 5, -1, None) for p in parts])], partition_exists=lambda t, p: True,
            report_group_not_found=True, now_ms=n.now, consumer=n.c.consumer,
        )
        return {p["partition_index"]: p["error_code"] for p in plan.response["topics"][0]["partitions"]}

    newly = sorted(set(range(4)) - set(a_parts))
    assert commit(old_epoch, a_parts) == dict.fromkeys(a_parts, ErrorCode.none)
    assert commit(old_epoch, newly) == dict.fromkeys(newly, ErrorCode.stale_member_epoch)
    assert commit(new_epoch, [0, 1, 2, 3]) == dict.fromkeys(range(4), ErrorCode.none)
    assert commit(old_epoch - 1, a_parts) == dict.fromkeys(a_parts, ErrorCode.stale_member_epoch)
    assert commit(new_epoch + 1, a_parts) == dict.fromkeys(a_parts, ErrorCode.fenced_member_epoch)


def test_delete_refuses_a_consumer_group_with_members_and_drops_an_empty_one():
    n = Node()
    r = n.hb()
    assert n.c.delete(["g"], has_offsets=lambda g: False, now_ms=0) == [
        {"group_id": "g", "error_code": ErrorCode.non_empty_group}]
    n.hb(r["member_id"], -1)
    assert n.c.delete(["g"], has_offsets=lambda g: False, now_ms=0) == [{"group_id": "g", "error_code": ErrorCode.none}]
    assert not n.c.consumer.has_group("g")


def test_has_group_knows_classic_and_consumer_groups_with_or_without_members_until_deleted():
    n = Node()
    assert not n.c.has_group("c") and not n.c.has_group("g")
    n.answers.pop(n.join(group="c"))  # a classic group, its member not joined yet
    r = n.hb()  # a consumer group "g" with a member
    assert n.c.has_group("c") and n.c.has_group("g")
    n.hb(r["member_id"], -1)
    assert n.c.has_group("g"), "empty, still a consumer group"
    n.c.delete(["g"], has_offsets=lambda g: False, now_ms=0)
    assert not n.c.has_group("g")


def test_consumer_heartbeat_cannot_take_over_a_classic_group_of_another_protocol_type():
    n = Node()
    first = n.answers.pop(n.join())
    rid = next(n.rids)
    n._collect(n.c.join(
        rid, topic_partitions=TOPICS.get, group_id="g", member_id=first["member_id"], group_instance_id=None,
        client_id="connect", client_host="/h", protocol_type="connect", protocols=[("default", b"x")],
        session_timeout_ms=10_000, rebalance_timeout_ms=30_000, require_known_member_id=True,
        supports_skip_assignment=False, now_ms=0,
    ))
    n.sleep(0)
    assert n.answers.pop(rid)["error_code"] == ErrorCode.none
    assert n.hb()["error_code"] == ErrorCode.group_id_not_found


def test_empty_groups_without_committed_offsets_are_removed_by_the_periodic_cleanup():
    n = Node()  # cleanup every 600 s from 0 (Kafka's offsets.retention.check.interval.ms)
    n.offset_groups = {"kept"}
    for group in ("gone", "kept"):  # short-lived classic consumers
        first = n.answers.pop(n.join(group=group))
        rid = n.join(first["member_id"], group=group)
        n.sleep(0)
        member_id = n.answers.pop(rid)["member_id"]
        n.c.leave(group_id=group, members=[(member_id, None)], now_ms=n.now)
    r = n.hb(group="kip848")  # a short-lived KIP-848 consumer
    n.hb(r["member_id"], -1, group="kip848")
    live = n.hb(group="live")

    def listed() -> list[tuple[str, str]]:
        return sorted((g["group_id"], g["group_state"]) for g in n.c.list_groups())

    assert listed() == [("gone", "Empty"), ("kept", "Empty"), ("kip848", "Empty"), ("live", "Stable")]
    while n.now < 570_000:  # the live member heartbeats within its 45 s session
        n.sleep(30_000)
        live = n.hb(live["member_id"], live["member_epoch"], owned=[0, 1, 2, 3], group="live")
    n.sleep(29_999)
    assert len(listed()) == 4  # not before the interval
    n.sleep(1)
    assert listed() == [("kept", "Empty"), ("live", "Stable")]
    assert n.c.next_deadline() <= 1_200_000  # and again every interval
