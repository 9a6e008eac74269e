"""Group records: the values the coordinator produces, and the groups rebuilt from them after a restart."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from coordinator_helpers import asg, sub
from kio.schema.errors import ErrorCode

from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.classic_model import GroupState
from walgate.coordinator.consumer_group import ConsumerGroups
from walgate.coordinator.consumer_model import MemberState
from walgate.coordinator.coordinator import GroupCoordinator

TOPICS = {"t": 4}
SESSION = 10_000


class Node:
    """A GroupCoordinator on a fake clock whose records go to ``disk`` (group id -> value, as the coordinator log keeps it)."""

    def __init__(self, disk: dict[str, Any] | None = None, now: int = 0) -> None:
        ids = itertools.count(1)
        classic = ClassicGroups(member_id_suffix=lambda: str(next(ids)), initial_rebalance_delay_ms=0)
        self.c = GroupCoordinator(
            classic,
            ConsumerGroups(new_member_id=lambda: f"m{next(ids)}", session_timeout_ms=45_000,
                           is_classic_group_in_use=classic.has_members),
            now_ms=now,
        )
        self.now = now
        self.disk: dict[str, Any] = {} if disk is None else disk
        self.answers: dict[int, dict[str, Any]] = {}
        self.rids = itertools.count(1)
        self.failed = self.c.load(json.loads(json.dumps(self.disk)), now) if disk else []

    def persist(self) -> list[tuple[str, Any]]:
        """What the gateway does after every call: write the records (through JSON), report them written."""
        records = self.c.take_records()
        for group_id, value in records:
            if value is None:
                self.disk.pop(group_id, None)
            else:
                self.disk[group_id] = json.loads(json.dumps(value))
        self.c.records_written(records)
        return records

    def _collect(self, completions: list[Any]) -> None:
        for c in completions:
            self.answers[c.request_id] = c.response
        self.persist()

    def sleep(self, ms: int) -> None:
        target = self.now + ms
        while (d := self.c.next_deadline()) is not None and d <= target:
            self.now = max(self.now, d)
            self._collect(self.c.tick(self.now, offset_groups=frozenset))
        self.now = target

    def join(self, member_id: str = "", instance: str | None = None) -> int:
        rid = next(self.rids)
        self._collect(self.c.join(
            rid, topic_partitions=TOPICS.get, group_id="g", member_id=member_id, group_instance_id=instance,
            client_id=f"client-{instance}", client_host="/10.0.0.2", protocol_type="consumer",
            protocols=[("range", sub("t"))], session_timeout_ms=SESSION, rebalance_timeout_ms=30_000,
            require_known_member_id=True, supports_skip_assignment=False, now_ms=self.now,
        ))
        return rid

    def sync(self, member_id: str, generation: int, instance: str | None,
             assignments: dict[str, bytes] | None = None) -> int:
        rid = next(self.rids)
        self._collect(self.c.sync(
            rid, group_id="g", generation_id=generation, member_id=member_id, group_instance_id=instance,
            protocol_type="consumer", protocol_name="range", assignments=assignments or {}, now_ms=self.now,
        ))
        return rid

    def heartbeat(self, member_id: str, generation: int, instance: str | None) -> ErrorCode:
        error = self.c.heartbeat(group_id="g", generation_id=generation, member_id=member_id,
                                 group_instance_id=instance, now_ms=self.now)
        self.persist()
        return error

    def hb(self, member_id: str = "", epoch: int = 0, owned: list[int] | None = None,
           instance: str | None = None) -> dict[str, Any]:
        response, completions = self.c.consumer_heartbeat(
            group_id="g", member_id=member_id, member_epoch=epoch, instance_id=instance, rack_id=None,
            rebalance_timeout_ms=60_000 if epoch == 0 else -1,
            subscribed_topic_names=["t"] if epoch == 0 else None, server_assignor=None,
            topic_partitions=TOPICS.get, owned=[] if epoch == 0 else [("t", owned or [])],
            client_id="kip848", client_host="/10.0.0.1", now_ms=self.now,
        )
        self._collect(completions)
        return response


def stable_classic_group(node: Node, instances: list[str | None]) -> dict[str, str]:
    """Members (static for an instance id, else dynamic) joined and synced: instance or member id -> member id."""
    rids = {}
    for instance in instances:
        rid = node.join(instance=instance)
        if instance is None:
            first = node.answers.pop(rid)
            assert first["error_code"] == ErrorCode.member_id_required
            rid = node.join(first["member_id"])
        rids[rid] = instance
    node.sleep(0)
    joined = {rid: node.answers.pop(rid) for rid in rids}
    leader = next(j["leader"] for j in joined.values())
    members = {(rids[rid] or j["member_id"]): j["member_id"] for rid, j in joined.items()}
    plan = {m: asg({"t": [k]}) for k, m in enumerate(members.values())}
    sync_rids = [node.sync(j["member_id"], j["generation_id"], rids[rid], plan if j["member_id"] == leader else None)
                 for rid, j in joined.items()]
    for rid in sync_rids:
        assert node.answers.pop(rid)["error_code"] == ErrorCode.none
    assert node.c.classic.group("g").state is GroupState.STABLE
    return members


def test_a_stable_classic_group_with_static_members_survives_a_restart() -> None:
    node = Node()
    members = stable_classic_group(node, ["a", "b"])
    before = node.c.classic.group("g")
    assert set(node.disk) == {"g"}

    after = Node(node.disk, now=1_000_000)
    group = after.c.classic.group("g")
    assert after.failed == [] and group is not None
    assert (group.state, group.generation_id, group.leader_id, group.protocol_name) == (
        GroupState.STABLE, before.generation_id, before.leader_id, "range")
    assert {m.member_id: m.assignment for m in group.members.values()} == {
        m.member_id: m.assignment for m in before.members.values()}
    assert group.static_members == before.static_members
    assert group.subscribed_topics == frozenset({"t"})
    # Members go on without rejoining: heartbeats and syncs of the generation are accepted.
    assert after.heartbeat(members["a"], before.generation_id, "a") == ErrorCode.none
    rid = after.sync(members["b"], before.generation_id, "b")
    assert after.answers.pop(rid)["assignment"] == before.members[members["b"]].assignment
    assert after.persist() == []  # nothing changed


def test_sessions_restart_at_the_load_time_and_dynamic_members_expire_as_in_kafka() -> None:
    node = Node()
    members = stable_classic_group(node, ["a", None])
    generation = node.c.classic.group("g").generation_id
    dynamic = next(m for k, m in members.items() if k != "a")

    after = Node(node.disk, now=5_000_000)
    assert set(after.c.classic.group("g").members) == set(members.values())  # the dynamic member is kept too
    after.sleep(SESSION - 1)  # no session ran out: each starts at the load time
    assert set(after.c.classic.group("g").members) == set(members.values())
    assert after.heartbeat(members["a"], generation, "a") == ErrorCode.none
    after.sleep(1)  # the dynamic member never came back: it expires and the group rebalances
    group = after.c.classic.group("g")
    assert dynamic not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert after.heartbeat(members["a"], generation, "a") == ErrorCode.rebalance_in_progress


def test_a_classic_group_in_a_rebalance_keeps_its_last_stable_generation() -> None:
    node = Node()
    members = stable_classic_group(node, ["a", "b"])
    stable = json.loads(json.dumps(node.disk["g"]))
    node.join(instance="c")  # a new member starts a rebalance
    assert node.c.classic.group("g").state is GroupState.PREPARING_REBALANCE
    assert node.disk["g"] == stable  # the transient state is not recorded

    after = Node(node.disk, now=1_000_000)
    assert after.c.classic.group("g").generation_id == stable["generation"]
    assert after.heartbeat(members["a"], stable["generation"], "a") == ErrorCode.none


def test_a_static_member_replaced_while_stable_is_recorded_under_its_new_id() -> None:
    node = Node()
    members = stable_classic_group(node, ["a", "b"])
    generation = node.c.classic.group("g").generation_id
    rid = node.join(instance="a")  # a restarted client: new member id, same instance id, no rebalance
    new_id = node.answers.pop(rid)["member_id"]
    assert new_id != members["a"]
    after = Node(node.disk, now=1_000_000)
    assert after.heartbeat(new_id, generation, "a") == ErrorCode.none
    assert after.heartbeat(members["a"], generation, "a") == ErrorCode.fenced_instance_id


def parts(response: dict[str, Any]) -> list[int] | None:
    """The partitions of t a heartbeat response assigns (None: no assignment in it)."""
    assignment = response["assignment"]
    if assignment is None:
        return None
    return [p for tp in assignment["topic_partitions"] for p in tp["partitions"]]


def settle(node: Node, members: dict[str, tuple[int, list[int]]], instances: dict[str, str]) -> None:
    for _ in range(4):
        for member_id, (epoch, owned) in list(members.items()):
            r = node.hb(member_id, epoch, owned, instance=instances[member_id])
            assert r["error_code"] == ErrorCode.none, r
            new = parts(r)
            members[member_id] = (r["member_epoch"], owned if new is None else new)


def test_a_consumer_group_with_static_members_survives_a_restart_at_its_epochs() -> None:
    node = Node()
    members, instances = {}, {}
    for instance in ("a", "b"):
        r = node.hb(instance=instance)
        members[r["member_id"]] = (r["member_epoch"], parts(r) or [])
        instances[r["member_id"]] = instance
    settle(node, members, instances)
    before = node.c.consumer.group("g")
    assert before.state.value == "Stable"

    after = Node(node.disk, now=1_000_000)
    group = after.c.consumer.group("g")
    assert after.failed == [] and group is not None
    assert (group.group_epoch, group.assignment_epoch, group.state.value) == (
        before.group_epoch, before.assignment_epoch, "Stable")
    assert group.partition_owner == before.partition_owner and group.target == before.target
    for member_id, (epoch, owned) in members.items():
        r = after.hb(member_id, epoch, owned, instance=instances[member_id])
        assert (r["error_code"], r["member_epoch"], r["assignment"]) == (ErrorCode.none, epoch, None)
    assert after.c.consumer.group("g").group_epoch == before.group_epoch
    assert after.persist() == []


def test_a_consumer_member_revoking_partitions_is_restored_revoking_its_session_from_the_load_time() -> None:
    node = Node()
    first = node.hb(instance="a")
    node.hb(instance="b")  # the first member must now give up half of its partitions
    node.hb(first["member_id"], first["member_epoch"], [0, 1, 2, 3], instance="a")
    member = node.c.consumer.group("g").members[first["member_id"]]
    assert member.state is MemberState.UNREVOKED_PARTITIONS

    after = Node(node.disk, now=1_000_000)
    assert after.c.consumer.group("g").members[first["member_id"]].state is MemberState.UNREVOKED_PARTITIONS
    after.sleep(45_000 - 1)
    assert first["member_id"] in after.c.consumer.group("g").members
    after.sleep(1)  # neither member heartbeated since the load: the session timeouts remove both
    assert not after.c.consumer.group("g").members


def test_a_deleted_group_deletes_its_record() -> None:
    node = Node()
    r = node.hb("m", 0)
    node.hb("m", -1)  # leaves: the group is empty
    assert node.disk["g"]["members"] == []
    assert node.c.delete(["g"], has_offsets=lambda g: False, now_ms=node.now) == [
        {"group_id": "g", "error_code": ErrorCode.none}]
    assert node.persist() == [("g", None)] and node.disk == {}
    assert r["error_code"] == ErrorCode.none


def test_records_not_written_are_taken_again() -> None:
    node = Node()
    node.c.consumer_heartbeat(
        group_id="g", member_id="m", member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=60_000,
        subscribed_topic_names=["t"], server_assignor=None, topic_partitions=TOPICS.get, owned=[],
        client_id="c", client_host="/h", now_ms=0,
    )
    first = node.c.take_records()  # the write failed: not reported written
    assert [g for g, _ in first] == ["g"]
    assert node.c.take_records() == first
    node.c.records_written(first)
    assert node.c.take_records() == []


@pytest.mark.parametrize("value", [
    {"type": "classic", "generation": "x"},
    {"type": "consumer", "epoch": 1},
    {"type": "nonsense"},
    [1, 2],
    {"type": "consumer", "epoch": 1, "assignment_epoch": 1, "subscription": {}, "target": {}, "members": [
        {"id": m, "instance": None, "rack": None, "client_id": "", "client_host": "", "rebalance_timeout": 1,
         "assignor": None, "topics": ["t"], "state": "stable", "epoch": 1, "previous_epoch": 0,
         "assigned": {"t": [0]}, "pending": {}, "given_at": [], "classic": None} for m in ("x", "y")]},
])
def test_a_value_that_does_not_rebuild_is_reported_and_its_record_deleted(value: Any) -> None:
    node = Node({"g": value, "h": {"type": "classic", "protocol_type": "consumer", "protocol": None,
                                   "generation": 3, "leader": None, "members": []}})
    assert [g for g, _ in node.failed] == ["g"]
    assert node.c.classic.group("g") is None and node.c.consumer.group("g") is None
    assert node.c.classic.group("h").generation_id == 3  # the other groups load
    assert node.persist() == [("g", None)]


def test_a_consumer_group_keeps_its_classic_members_across_a_restart() -> None:
    node = Node()
    member = node.hb("kip", 0, instance="k")  # a consumer group; then a classic member joins it
    rid = node.join(instance="c")
    joined = node.answers.pop(rid)
    assert joined["error_code"] == ErrorCode.none
    classic_id = joined["member_id"]
    node.hb("kip", member["member_epoch"], [0, 1, 2, 3], instance="k")  # revokes what the classic member gets
    rid = node.join(classic_id, instance="c")
    joined = node.answers.pop(rid)
    before = node.c.consumer.group("g").members[classic_id]
    assert before.classic is not None

    after = Node(node.disk, now=1_000_000)
    restored = after.c.consumer.group("g").members[classic_id]
    assert (restored.classic, restored.member_epoch, restored.assigned) == (
        before.classic, before.member_epoch, before.assigned)
    assert after.heartbeat(classic_id, joined["generation_id"], "c") == node.heartbeat(
        classic_id, joined["generation_id"], "c")
    after.sleep(SESSION)  # the classic member's own session timeout, from the load time
    assert classic_id not in after.c.consumer.group("g").members
