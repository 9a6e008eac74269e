"""KIP-848 consumer groups (walgate.coordinator.consumer_group) on a fake clock."""

from __future__ import annotations

import itertools
from typing import Any

from kio.schema.errors import ErrorCode

from walgate.coordinator.consumer_group import ConsumerGroups
from walgate.coordinator.consumer_model import MemberState

TOPICS = {"t": 4, "u": 2}


def make(**config: Any) -> ConsumerGroups:
    counter = itertools.count(1)
    return ConsumerGroups(new_member_id=lambda: f"m{next(counter)}", **config)


def hb(
    groups: ConsumerGroups,
    now: int,
    member_id: str = "",
    epoch: int = 0,
    *,
    topics: list[str] | None = None,
    owned: list[tuple[str, list[int]]] | None = None,
    instance_id: str | None = None,
    group_id: str = "g",
    rebalance_timeout_ms: int = -1,
) -> dict[str, Any]:
    joining = epoch == 0
    return groups.heartbeat(
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        rack_id=None,
        rebalance_timeout_ms=60_000 if joining and rebalance_timeout_ms == -1 else rebalance_timeout_ms,
        subscribed_topic_names=(topics or ["t"]) if joining else topics,
        server_assignor=None,
        topic_partitions=TOPICS.get,
        owned=[] if joining else owned,
        client_id="cli",
        client_host="/10.0.0.1",
        now_ms=now,
    )


def parts(response: dict[str, Any], topic: str = "t") -> list[int] | None:
    assignment = response["assignment"]
    if assignment is None:
        return None
    for tp in assignment["topic_partitions"]:
        if tp["topic_name"] == topic:
            return tp["partitions"]
    return []


def settle(groups: ConsumerGroups, now: int, members: dict[str, tuple[int, list[int]]]) -> dict[str, list[int]]:
    """Heartbeat every member with what it owns until nothing changes; returns member -> partitions of t."""
    for _ in range(5):
        for member_id, (epoch, owned) in list(members.items()):
            r = hb(groups, now, member_id, epoch, owned=[("t", owned)])
            assert r["error_code"] == ErrorCode.none, r
            new = parts(r)
            members[member_id] = (r["member_epoch"], owned if new is None else new)
    return {m: sorted(o) for m, (_, o) in members.items()}


def test_join_of_one_member_gets_all_partitions() -> None:
    groups = make()
    r = hb(groups, 0)
    assert r == {
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": "m1",
        "member_epoch": 1,
        "heartbeat_interval_ms": 5_000,
        "assignment": {"topic_partitions": [{"topic_name": "t", "partitions": [0, 1, 2, 3]}]},
    }
    # A heartbeat that changes nothing carries no assignment.
    r = hb(groups, 1_000, "m1", 1, owned=[("t", [0, 1, 2, 3])])
    assert (r["member_epoch"], r["assignment"]) == (1, None)
    assert groups.group("g").state.value == "Stable"


def test_client_generated_member_id_is_kept() -> None:
    groups = make()
    r = hb(groups, 0, "client-uuid")
    assert (r["member_id"], r["member_epoch"], parts(r)) == ("client-uuid", 1, [0, 1, 2, 3])


def test_tdengine_four_partitions_three_and_five_members() -> None:
    groups = make()
    members: dict[str, tuple[int, list[int]]] = {}
    for _ in range(3):
        r = hb(groups, 0)
        members[r["member_id"]] = (r["member_epoch"], parts(r) or [])
    result = settle(groups, 0, members)
    assert sorted(len(p) for p in result.values()) == [1, 1, 2]
    assert sorted(p for ps in result.values() for p in ps) == [0, 1, 2, 3]
    for _ in range(2):
        r = hb(groups, 0)
        members[r["member_id"]] = (r["member_epoch"], parts(r) or [])
    result = settle(groups, 0, members)
    assert sorted(len(p) for p in result.values()) == [0, 1, 1, 1, 1]
    assert sorted(p for ps in result.values() for p in ps) == [0, 1, 2, 3]
    (describe,) = groups.describe(["g"])
    assert describe["group_state"] == "Stable"
    assert describe["group_epoch"] == describe["assignment_epoch"] == 5
    assert [c.state for c in groups.consumers()] == ["ready"] * 5


def test_second_member_waits_for_revocation_by_the_first() -> None:
    groups = make()
    r1 = hb(groups, 0)
    assert parts(r1) == [0, 1, 2, 3]
    r2 = hb(groups, 100)
    # The target moved 2 and 3 to m2, but m1 still owns them: m2 gets nothing yet.
    assert (r2["member_id"], r2["member_epoch"], parts(r2)) == ("m2", 2, [])
    assert groups.group("g").members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    assert [c.state for c in groups.consumers()] == ["rebalancing", "rebalancing"]  # m1 must still revoke
    # m1 is asked to revoke: it stays at epoch 1 with the partitions it keeps.
    r1 = hb(groups, 200, "m1", 1, owned=[("t", [0, 1, 2, 3])])
    assert (r1["member_epoch"], parts(r1)) == (1, [0, 1])
    assert groups.group("g").members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    # m2 still gets nothing while m1's heartbeats list 2 and 3.
    r2 = hb(groups, 300, "m2", 2, owned=[])
    assert (r2["member_epoch"], r2["assignment"]) == (2, None)
    r1 = hb(groups, 400, "m1", 1, owned=[("t", [0, 1, 2, 3])])
    assert (r1["member_epoch"], r1["assignment"]) == (1, None)
    # m1 revoked: it moves to epoch 2; then m2 gets 2 and 3.
    r1 = hb(groups, 500, "m1", 1, owned=[("t", [0, 1])])
    assert (r1["member_epoch"], r1["assignment"]) == (2, None)
    r2 = hb(groups, 600, "m2", 2, owned=[])
    assert (r2["member_epoch"], parts(r2)) == (2, [2, 3])
    assert groups.group("g").state.value == "Stable"
    assert [c.assignment for c in groups.consumers()] == [{"t": (0, 1)}, {"t": (2, 3)}]
    assert [c.state for c in groups.consumers()] == ["ready", "ready"]


def test_member_that_does_not_revoke_within_rebalance_timeout_is_removed() -> None:
    groups = make()
    hb(groups, 0, rebalance_timeout_ms=10_000)
    hb(groups, 100)
    hb(groups, 200, "m1", 1, owned=[("t", [0, 1, 2, 3])])  # must revoke; timer at 200 + 10000
    assert groups.next_deadline() == 10_200
    hb(groups, 5_000, "m1", 1, owned=[("t", [0, 1, 2, 3])])  # still owns them: deadline unchanged
    assert groups.tick(10_199) == []
    assert groups.tick(10_200) == [("g", "m1")]
    assert list(groups.group("g").members) == ["m2"]
    r2 = hb(groups, 10_300, "m2", 2, owned=[])
    assert (r2["member_epoch"], parts(r2)) == (3, [0, 1, 2, 3])


def test_leave_reassigns() -> None:
    groups = make()
    members = {}
    for _ in range(2):
        r = hb(groups, 0)
        members[r["member_id"]] = (r["member_epoch"], parts(r) or [])
    assert settle(groups, 0, members) == {"m1": [0, 1], "m2": [2, 3]}
    r = hb(groups, 1_000, "m2", -1)
    assert r == {
        "error_code": ErrorCode.none,
        "error_message": None,
        "member_id": "m2",
        "member_epoch": -1,
        "heartbeat_interval_ms": 0,
        "assignment": None,
    }
    assert groups.group("g").state.value == "Assigning"
    r1 = hb(groups, 2_000, "m1", 2, owned=[("t", [0, 1])])
    assert (r1["member_epoch"], parts(r1)) == (3, [0, 1, 2, 3])
    # Leaving again: the member is gone.
    assert hb(groups, 3_000, "m2", -1)["error_code"] == ErrorCode.unknown_member_id


def test_session_expiry_reassigns() -> None:
    groups = make(session_timeout_ms=45_000)
    members = {}
    for _ in range(2):
        r = hb(groups, 0)
        members[r["member_id"]] = (r["member_epoch"], parts(r) or [])
    settle(groups, 0, members)
    hb(groups, 30_000, "m1", 2, owned=[("t", [0, 1])])
    assert groups.next_deadline() == 45_000  # m2's session (last heartbeat at 0)
    assert groups.tick(44_999) == []
    assert groups.tick(45_000) == [("g", "m2")]
    r1 = hb(groups, 46_000, "m1", 2, owned=[("t", [0, 1])])
    assert (r1["member_epoch"], parts(r1)) == (3, [0, 1, 2, 3])
    assert groups.next_deadline() == 91_000
    assert groups.tick(91_000) == [("g", "m1")]
    assert groups.describe(["g"])[0]["group_state"] == "Empty"


def test_fenced_epochs() -> None:
    groups = make()
    hb(groups, 0)
    hb(groups, 100)
    hb(groups, 200, "m1", 1, owned=[("t", [0, 1])])  # m1 -> epoch 2 (previous 1)
    assert groups.group("g").members["m1"].member_epoch == 2
    ahead = hb(groups, 300, "m1", 3, owned=[("t", [0, 1])])
    assert ahead["error_code"] == ErrorCode.fenced_member_epoch
    assert ahead["member_id"] is None and ahead["assignment"] is None
    # The previous epoch is accepted when it owns a subset of the assignment (the response was lost) ...
    assert hb(groups, 400, "m1", 1, owned=[("t", [0])])["member_epoch"] == 2
    # ... but not when it owns more, nor an older epoch.
    assert hb(groups, 500, "m1", 1, owned=[("t", [0, 1, 2])])["error_code"] == ErrorCode.fenced_member_epoch
    assert hb(groups, 600, "m1", 1, owned=None)["error_code"] == ErrorCode.fenced_member_epoch
    # The fenced member rejoins with epoch 0 and its id.
    r = hb(groups, 700, "m1", 0)
    assert (r["error_code"], r["member_epoch"], parts(r)) == (ErrorCode.none, 2, [0, 1])


def test_unknown_member_and_invalid_requests() -> None:
    groups = make()
    hb(groups, 0)
    r = hb(groups, 100, "nobody", 1, owned=[])
    assert (r["error_code"], r["error_message"]) == (ErrorCode.unknown_member_id, "Member nobody is not a member of group g.")
    assert hb(groups, 100, "m1", 1, group_id="other", owned=[])["error_code"] == ErrorCode.unknown_member_id
    assert groups.group("other") is None
    assert hb(groups, 100, "", 1)["error_code"] == ErrorCode.invalid_request
    assert hb(groups, 100, "m1", -3)["error_code"] == ErrorCode.invalid_request
    join_with_owned = groups.heartbeat(
        group_id="g", member_id="", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=1,
        subscribed_topic_names=["t"], server_assignor=None, topic_partitions=TOPICS.get, owned=[("t", [0])],
        client_id="c", client_host="h", now_ms=0,
    )
    assert join_with_owned["error_code"] == ErrorCode.invalid_request
    range_assignor = groups.heartbeat(
        group_id="g", member_id="", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=1,
        subscribed_topic_names=["t"], server_assignor="range", topic_partitions=TOPICS.get, owned=[],
        client_id="c", client_host="h", now_ms=0,
    )
    assert range_assignor["error_code"] == ErrorCode.unsupported_assignor
    assert list(groups.group("g").members) == ["m1"]


def test_classic_group_id_is_refused() -> None:
    groups = make(is_classic_group_in_use=lambda group_id: group_id == "classic")
    r = hb(groups, 0, group_id="classic")
    assert (r["error_code"], r["error_message"]) == (ErrorCode.group_id_not_found, "Group classic is not a consumer group")
    assert groups.group("classic") is None


def test_static_member_leaves_and_rejoins_with_its_partitions() -> None:
    groups = make()
    hb(groups, 0, instance_id="i1")
    r = hb(groups, 100, "x", 0, instance_id="i1")
    assert r["error_code"] == ErrorCode.unreleased_instance_id
    assert hb(groups, 100, "x", 1, instance_id="i1", owned=[])["error_code"] == ErrorCode.fenced_instance_id
    assert hb(groups, 100, "m1", -2, instance_id="i1")["member_epoch"] == -2
    r = hb(groups, 200, "m9", 0, instance_id="i1")
    assert (r["member_id"], r["member_epoch"], parts(r)) == ("m9", 1, [0, 1, 2, 3])
    assert list(groups.group("g").members) == ["m9"]


def test_subscription_change_and_multiple_topics() -> None:
    groups = make()
    r1 = hb(groups, 0, topics=["t", "u"])
    assert (parts(r1, "t"), parts(r1, "u")) == ([0, 1, 2, 3], [0, 1])
    r2 = hb(groups, 0, topics=["u"])
    assert (r2["member_epoch"], parts(r2, "u")) == (2, [])
    r1 = hb(groups, 0, "m1", 1, owned=[("t", [0, 1, 2, 3]), ("u", [0, 1])])
    assert (r1["member_epoch"], parts(r1, "t"), parts(r1, "u")) == (1, [0, 1, 2, 3], [0])
    r1 = hb(groups, 0, "m1", 1, owned=[("t", [0, 1, 2, 3]), ("u", [0])])
    assert r1["member_epoch"] == 2
    r2 = hb(groups, 0, "m2", 2, owned=[])
    assert parts(r2, "u") == [1]
    # m1 drops u from its subscription: the epoch bumps, u goes to m2 after m1 revokes.
    r1 = hb(groups, 0, "m1", 2, topics=["t"], owned=[("t", [0, 1, 2, 3]), ("u", [0])])
    assert (r1["member_epoch"], parts(r1, "u")) == (2, [])
    hb(groups, 0, "m1", 2, owned=[("t", [0, 1, 2, 3])])
    r2 = hb(groups, 0, "m2", 2, owned=[("u", [1])])
    assert (r2["member_epoch"], parts(r2, "u")) == (3, [0, 1])


def test_describe() -> None:
    groups = make()
    hb(groups, 0)
    hb(groups, 100)
    described = groups.describe(["g", "nope"])
    assert described[1] == {
        "error_code": ErrorCode.group_id_not_found,
        "error_message": "Group nope not found.",
        "group_id": "nope",
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
    }
    g = described[0]
    assert (g["group_state"], g["group_epoch"], g["assignment_epoch"], g["assignor_name"]) == (
        "Reconciling", 2, 2, "uniform",
    )
    assert g["members"][1] == {
        "member_id": "m2",
        "instance_id": None,
        "rack_id": None,
        "member_epoch": 2,
        "client_id": "cli",
        "client_host": "/10.0.0.1",
        "subscribed_topic_names": ["t"],
        "subscribed_topic_regex": None,
        "assignment": {"topic_partitions": []},
        "target_assignment": {"topic_partitions": [{"topic_name": "t", "partitions": [2, 3]}]},
        "member_type": 1,
    }
    assert g["members"][0]["assignment"] == {"topic_partitions": [{"topic_name": "t", "partitions": [0, 1, 2, 3]}]}
    assert g["members"][0]["member_epoch"] == 1
