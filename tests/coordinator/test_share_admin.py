"""Share groups' administration (share_admin.py) on the coordinator alone: group states, describe / alter / delete
of offsets with Kafka's error codes, the records each change writes (a tombstone for a deletion), and rollback of
a change the disk refused, including of state only durable (not yet rebuilt in memory); in a cluster, the coordinator
leaving the partitions another node keeps to it (``here``), and a partition leader's answers to the state RPCs
(initialize, delete, summary)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from test_share_membership import Logs, beat

from walgate.coordinator.share_admin import (
    alter_offsets,
    delete_group,
    delete_offsets,
    delete_states,
    describe_offsets,
    group_state,
    initialize_states,
    list_groups,
    state_summaries,
)
from walgate.coordinator.share_coordinator import AckBatch, ShareCoordinator
from walgate.coordinator.share_group import ShareGroups


class Topics:
    """Topic "t" (key "t", 2 partitions) and "u" (key "u", 1 partition)."""

    counts = {"t": 2, "u": 1}

    def key(self, name: str) -> str | None:
        return name if name in self.counts else None

    def name(self, key: str) -> str | None:
        return key if key in self.counts else None

    def partitions(self, name: str) -> int:
        return self.counts[name]


def consumed(c: ShareCoordinator, group: str = "g") -> None:
    """``group``'s member "a" acquires 0..3 of t-0, accepts 0..1 and leaves: state s=2 with 2..3 available."""
    beat(c.groups, "a", 0, ["t"], group=group)
    c.session(group, "a", 0, fetch=True)
    c.update_session(group, "a", [("t", 0)], [])
    c.acquire(group, "a", [("t", 0)], 4, 0, lambda exc: ErrorCode.unknown_server_error)
    c.acknowledge(group, "a", [AckBatch("t", 0, 0, 1, [1])], 0, lambda exc: 1)
    beat(c.groups, "a", -1, group=group)
    c.member_left(group, "a", 0)
    c.close(group, "a")
    c.take_records()
    c.written()


def offsets(c: ShareCoordinator, wanted: list[tuple[str, list[int]]] | None = None) -> list[tuple[str, int, int, int]]:
    return [(t["topic_name"], p["partition_index"], p["start_offset"], p["lag"])
            for t in describe_offsets(c, Topics(), "g", wanted) for p in t["partitions"]]


def test_group_states_and_listing():
    c = ShareCoordinator(ShareGroups(), Logs())
    assert group_state(c, "g") is None
    beat(c.groups, "b", 0, ["t"], group="busy")
    consumed(c)
    assert (group_state(c, "g"), group_state(c, "busy")) == ("Empty", "Stable")
    assert [(g["group_id"], g["group_state"]) for g in list_groups(c)] == [("busy", "Stable"), ("g", "Empty")]
    assert [g["group_id"] for g in list_groups(c, ["STABLE"], ["share"])] == ["busy"]
    assert list_groups(c, [], ["consumer", "classic"]) == []


def test_describe_answers_start_offsets_lag_and_minus_one_without_state():
    c = ShareCoordinator(ShareGroups(), Logs())
    assert offsets(c) == [] and offsets(c, [("t", [0])]) == [("t", 0, -1, -1)]
    consumed(c)
    assert offsets(c) == [("t", 0, 2, 8)]  # high watermark 10, start 2, nothing past it done
    assert offsets(c, [("t", [0, 1]), ("x", [0])]) == [("t", 0, 2, 8), ("t", 1, -1, -1), ("x", 0, -1, -1)]


def test_alter_and_delete_refuse_a_group_with_members_or_none_and_change_nothing():
    c = ShareCoordinator(ShareGroups(), Logs())
    assert alter_offsets(c, Topics(), "g", [("t", [(0, 0)])])[0] == ErrorCode.group_id_not_found
    assert delete_offsets(c, Topics(), "g", ["t"])[0] == ErrorCode.group_id_not_found
    assert delete_group(c, "g") == ErrorCode.group_id_not_found
    consumed(c)
    beat(c.groups, "b", 0, ["t"])
    assert alter_offsets(c, Topics(), "g", [("t", [(0, 0)])])[:2] == (ErrorCode.non_empty_group,
                                                                      "The share group g is not empty.")
    assert delete_offsets(c, Topics(), "g", ["t"])[0] == ErrorCode.non_empty_group
    assert delete_group(c, "g") == ErrorCode.non_empty_group
    assert c.take_records() == [] and offsets(c) == [("t", 0, 2, 8)]


def test_alter_resets_partitions_and_answers_unknown_ones():
    c = ShareCoordinator(ShareGroups(), Logs())
    consumed(c)
    code, _, results = alter_offsets(c, Topics(), "g", [("t", [(0, 5), (1, 3), (7, 0), (0, -1)]), ("x", [(0, 1)])])
    assert code == ErrorCode.none
    assert [(t["topic_name"], [p["error_code"] for p in t["partitions"]]) for t in results] == [
        ("t", [ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request]),
        ("x", [ErrorCode.unknown_topic_or_partition])]
    assert sorted(c.take_records()) == [(("g", "t", 0), {"s": 5, "e": 5, "r": []}),
                                        (("g", "t", 1), {"s": 3, "e": 3, "r": []})]


def test_deletes_write_tombstones_and_a_refused_write_puts_everything_back():
    c = ShareCoordinator(ShareGroups(), Logs())
    c.load({("g", "t", 0): {"s": 2, "e": 4, "r": [[2, 3, 0, 1]]}, ("g", "u", 0): {"s": 1, "e": 1, "r": []}})
    code, _, results = delete_offsets(c, Topics(), "g", ["t", "x", "t"])  # only durable so far: rebuilt, dropped
    assert code == ErrorCode.none
    assert [(t["topic_name"], t["error_code"]) for t in results] == [
        ("t", ErrorCode.none), ("x", ErrorCode.unknown_topic_or_partition), ("t", ErrorCode.none)]
    assert c.take_records() == [(("g", "t", 0), None)]
    c.rollback()  # the disk refused the tombstone
    assert offsets(c) == [("t", 0, 2, 8), ("u", 0, 1, -1)]  # "u" has no log here: lag unknown
    assert delete_group(c, "g") == ErrorCode.none
    assert sorted(c.take_records()) == [(("g", "t", 0), None), (("g", "u", 0), None)]
    c.written()
    assert group_state(c, "g") is None and offsets(c, [("t", [0])]) == [("t", 0, -1, -1)]
    assert delete_offsets(c, Topics(), "g", ["t"])[0] == ErrorCode.group_id_not_found


def test_the_coordinator_validates_partitions_kept_elsewhere_and_leaves_them_unchanged():
    c = ShareCoordinator(ShareGroups(), Logs())
    consumed(c)
    not_t1 = lambda name, p: (name, p) != ("t", 1)  # noqa: E731 - t-1's state is another node's
    code, _, results = alter_offsets(c, Topics(), "g", [("t", [(0, 5), (1, 3), (1, -1)])], not_t1)
    assert (code, [p["error_code"] for t in results for p in t["partitions"]]) == (
        ErrorCode.none, [ErrorCode.none, ErrorCode.none, ErrorCode.invalid_request])  # t-1: the caller's to send
    assert c.take_records() == [(("g", "t", 0), {"s": 5, "e": 5, "r": []})]
    c.written()
    assert delete_offsets(c, Topics(), "g", ["u"], lambda name, p: name != "u")[2][0]["error_code"] == ErrorCode.none
    assert delete_offsets(c, Topics(), "g", ["u"])[2][0]["error_message"] == "There is no offset information to delete."
    assert c.take_records() == []


def test_a_leader_answers_the_state_rpcs_per_partition_without_group_checks():
    c = ShareCoordinator(ShareGroups(), Logs())
    beat(c.groups, "b", 0, ["t"])  # members: the coordinator checked the group, not the leader
    assert [(r["partition"], r["error_code"]) for r in initialize_states(c, Topics(), "g", [
        ("t", 0, 4), ("t", 1, -1), ("t", 2, 0), ("x", 0, 0)])] == [
        (0, ErrorCode.none), (1, ErrorCode.invalid_request), (2, ErrorCode.unknown_topic_or_partition),
        (0, ErrorCode.unknown_topic_or_partition)]
    assert c.take_records() == [(("g", "t", 0), {"s": 4, "e": 4, "r": []})]
    c.written()
    assert [(r["partition"], r["error_code"], r.get("start_offset"), r.get("delivery_complete_count"))
            for r in state_summaries(c, Topics(), "g", [("t", 0), ("t", 1), ("u", 3)])] == [
        (0, ErrorCode.none, 4, 0), (1, ErrorCode.none, -1, -1), (3, ErrorCode.unknown_topic_or_partition, None, None)]
    assert [r["error_code"] for r in delete_states(c, Topics(), "g", [("t", 0), ("t", 1)])] == [ErrorCode.none] * 2
    assert c.take_records() == [(("g", "t", 0), None)]  # t-1 had no state: nothing written, NONE all the same
    assert state_summaries(c, Topics(), "g", [("t", 0)])[0]["start_offset"] == -1


def test_a_group_whose_state_other_nodes_keep_is_empty_not_unknown():
    c = ShareCoordinator(ShareGroups(), Logs())
    assert alter_offsets(c, Topics(), "g", [("t", [(1, 3)])], lambda name, p: False)[0] == ErrorCode.group_id_not_found
    assert alter_offsets(c, Topics(), "g", [("t", [(1, 3)])], lambda name, p: False, True)[0] == ErrorCode.none
    assert delete_offsets(c, Topics(), "g", ["t"], lambda name, p: False, True)[0] == ErrorCode.none
    assert (delete_group(c, "g"), delete_group(c, "g", True)) == (ErrorCode.group_id_not_found, ErrorCode.none)
    beat(c.groups, "b", 0, ["t"])
    assert delete_group(c, "g", True) == ErrorCode.non_empty_group
    assert c.take_records() == []
