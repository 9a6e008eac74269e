"""OffsetCommit / OffsetFetch / OffsetDelete / DeleteGroups against group state and an in-memory OffsetStore."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from coordinator_helpers import Harness, MemoryOffsetStore, asg, sub
from kio.schema.errors import ErrorCode

from walgate.coordinator import (
    ClassicGroup,
    ClassicGroupMember,
    CommittedOffset,
    GroupState,
    OffsetCommitRecord,
    OffsetStore,
    PartitionCommit,
    commit_offsets,
    delete_groups,
    delete_offsets,
    fetch_offsets,
    validate_offset_commit,
)
from walgate.coordinator.errors import FencedInstanceId, IllegalGeneration, RebalanceInProgress, UnknownMemberId

E = ErrorCode


PARTITIONS = {("t", 0), ("t", 1), ("t", 2), ("t", 3), ("u", 0)}


def _exists(topic: str, partition: int) -> bool:
    return (topic, partition) in PARTITIONS


def _commit(
    h: Harness,
    store: OffsetStore,
    *,
    group: str = "g",
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    topics: Sequence[tuple[str, Sequence[PartitionCommit]]] = (("t", (PartitionCommit(0, 42),)),),
    v9: bool = True,
    transactional: bool = False,
):
    plan = commit_offsets(
        h.groups,
        store,
        group_id=group,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
        topics=topics,
        partition_exists=_exists,
        report_group_not_found=v9,
        now_ms=h.now,
        transactional=transactional,
    )
    store.commit(plan.records)
    return plan


def _errors(plan) -> list[ErrorCode]:
    return [p["error_code"] for t in plan.response["topics"] for p in t["partitions"]]


# ---------------------------------------------------------------------------- OffsetCommit


def test_simple_commit_to_an_unknown_group_is_stored_without_creating_a_group():
    h = Harness()
    h.sleep_until(1_000)
    store = MemoryOffsetStore()
    plan = _commit(
        h,
        store,
        topics=[("t", [PartitionCommit(0, 42, 5, "m"), PartitionCommit(1, 7)]), ("u", [PartitionCommit(0, 3)])],
    )
    assert plan.response == {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": E.none},
                    {"partition_index": 1, "error_code": E.none},
                ],
            },
            {"name": "u", "partitions": [{"partition_index": 0, "error_code": E.none}]},
        ]
    }
    assert plan.records == (
        OffsetCommitRecord("g", "t", 0, 42, 5, "m", 1_000),
        OffsetCommitRecord("g", "t", 1, 7, -1, "", 1_000),
        OffsetCommitRecord("g", "u", 0, 3, -1, "", 1_000),
    )
    assert store.fetch("g", "t", 0) == CommittedOffset(42, 5, "m", 1_000)
    assert h.groups.group("g") is None
    listed = h.groups.list_groups(offset_groups=store.groups_with_offsets())
    assert listed == [{"group_id": "g", "protocol_type": "", "group_state": "Empty", "group_type": "classic"}]


@pytest.mark.parametrize(("v9", "error"), [(True, E.group_id_not_found), (False, E.illegal_generation)])
def test_generation_commit_to_an_unknown_group(v9, error):
    h, store = Harness(), MemoryOffsetStore()
    plan = _commit(h, store, generation=1, member="m-1", v9=v9)
    assert _errors(plan) == [error]
    assert plan.records == () and store.offsets == {}


def test_generation_commit_to_a_group_that_only_has_offsets_is_unknown_member():
    h, store = Harness(), MemoryOffsetStore()
    _commit(h, store)
    assert _errors(_commit(h, store, generation=3, member="m-1")) == [E.unknown_member_id]
    assert _errors(_commit(h, store, member="m-1")) == [E.none]  # generation -1 in an Empty group


def test_commits_of_a_stable_group():
    h, store = Harness(), MemoryOffsetStore()
    a, _b = h.stable_pair()
    assert _errors(_commit(h, store, generation=1, member=a)) == [E.none]
    assert _errors(_commit(h, store, generation=0, member=a)) == [E.illegal_generation]
    assert _errors(_commit(h, store, generation=1, member="ghost")) == [E.unknown_member_id]
    assert _errors(_commit(h, store)) == [E.unknown_member_id]  # a simple commit needs an Empty group
    assert _errors(_commit(h, store, generation=-1, member=a)) == [E.illegal_generation]
    assert _errors(_commit(h, store, generation=1, member=a, instance="i")) == [E.unknown_member_id]
    assert store.fetch("g", "t", 0) == CommittedOffset(42, -1, "", 4_000)
    assert store.writes == 6


def test_transactional_commits_of_a_stable_group():
    h, store = Harness(), MemoryOffsetStore()
    a, _b = h.stable_pair()
    assert _errors(_commit(h, store, transactional=True, v9=False)) == [E.none]  # no member fields (kafkajs)
    assert _errors(_commit(h, store, transactional=True, v9=False, generation=1, member=a)) == [E.none]
    assert _errors(_commit(h, store, transactional=True, v9=False, generation=0, member=a)) == [E.illegal_generation]


def test_commit_with_a_fenced_instance_id():
    h, store = Harness(), MemoryOffsetStore()
    rid = h.join(client="c", instance="ia")
    h.sleep_until(2_000)
    assert h.answer(rid)["member_id"] == "ia-1"
    h.sync("ia-1", 1, {"ia-1": b""}, instance="ia")
    assert _errors(_commit(h, store, generation=1, member="ia-0", instance="ia")) == [E.fenced_instance_id]
    assert _errors(_commit(h, store, generation=1, member="ia-1", instance="ia")) == [E.none]


def test_commit_while_completing_rebalance_is_refused():
    h, store = Harness(), MemoryOffsetStore()
    a, _join_a = h.dance("c")
    h.sleep_until(2_000)
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    assert _errors(_commit(h, store, generation=1, member=a)) == [E.rebalance_in_progress]


def test_commit_of_the_previous_generation_during_a_rebalance_is_accepted_and_keeps_the_session():
    h, store = Harness(), MemoryOffsetStore()
    a, b = h.stable_pair()  # sessions end at 14000 unless refreshed
    h.dance("e")  # rebalance
    assert h.group().state is GroupState.PREPARING_REBALANCE
    h.sleep_until(13_000)
    assert h.heartbeat(a, 1) == E.rebalance_in_progress
    assert _errors(_commit(h, store, generation=1, member=b)) == [E.none]
    assert h.group().members[b].last_heartbeat_ms == 13_000
    h.sleep_until(22_999)
    assert b in h.group().members
    h.sleep_until(23_000)
    assert b not in h.group().members


def test_commit_to_an_empty_group_after_members_left():
    h, store = Harness(), MemoryOffsetStore()
    a, b = h.stable_pair()
    h.leave((a, None), (b, None))
    assert _errors(_commit(h, store)) == [E.none]
    assert _errors(_commit(h, store, generation=2, member=a)) == [E.unknown_member_id]


def test_commit_metadata_limit_and_unknown_partitions_are_per_partition():
    h, store = Harness(), MemoryOffsetStore()
    plan = _commit(
        h,
        store,
        topics=[
            ("t", [PartitionCommit(0, 1, metadata="x" * 4096), PartitionCommit(1, 1, metadata="x" * 4097)]),
            ("t", [PartitionCommit(9, 1)]),
            ("nope", [PartitionCommit(0, 1)]),
        ],
    )
    assert _errors(plan) == [
        E.none,
        E.offset_metadata_too_large,
        E.unknown_topic_or_partition,
        E.unknown_topic_or_partition,
    ]
    assert [(r.topic, r.partition) for r in plan.records] == [("t", 0)]


def test_unknown_partitions_keep_their_error_when_the_group_refuses():
    h, store = Harness(), MemoryOffsetStore()
    h.stable_pair()
    plan = _commit(
        h, store, generation=1, member="ghost", topics=[("t", [PartitionCommit(0, 1), PartitionCommit(7, 1)])]
    )
    assert _errors(plan) == [E.unknown_member_id, E.unknown_topic_or_partition]


def test_commit_of_only_unknown_partitions_does_not_reach_the_group():
    h, store = Harness(), MemoryOffsetStore()
    _a, b = h.stable_pair()
    h.sleep_until(13_000)
    plan = _commit(h, store, generation=1, member=b, topics=[("nope", [PartitionCommit(0, 1)])])
    assert _errors(plan) == [E.unknown_topic_or_partition]
    h.sleep_until(14_000)
    assert b not in h.group().members  # its session was not refreshed


def test_commit_with_an_empty_group_id():
    h, store = Harness(), MemoryOffsetStore()
    assert _errors(_commit(h, store, group="")) == [E.invalid_group_id]


def test_failed_store_write_turns_accepted_partitions_into_the_error():
    h, store = Harness(), MemoryOffsetStore()
    plan = _commit(h, store, topics=[("t", [PartitionCommit(0, 1), PartitionCommit(1, 1, metadata="x" * 5000)])])
    assert plan.failed({("t", 0): E.not_coordinator}) == {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": E.not_coordinator},
                    {"partition_index": 1, "error_code": E.offset_metadata_too_large},
                ],
            }
        ]
    }


@pytest.mark.parametrize(
    ("state", "generation", "member", "instance", "error"),
    [
        (GroupState.EMPTY, -1, "", None, None),
        (GroupState.EMPTY, -1, "x", None, None),
        (GroupState.EMPTY, 0, "", None, UnknownMemberId),
        (GroupState.STABLE, -1, "", None, UnknownMemberId),
        (GroupState.STABLE, 4, "m", None, None),
        (GroupState.STABLE, 3, "m", None, IllegalGeneration),
        (GroupState.STABLE, 4, "n", None, UnknownMemberId),
        (GroupState.STABLE, 4, "n", "i", FencedInstanceId),
        (GroupState.STABLE, 4, "m", "j", UnknownMemberId),
        (GroupState.PREPARING_REBALANCE, 4, "m", None, None),
        (GroupState.COMPLETING_REBALANCE, 4, "m", "i", RebalanceInProgress),
    ],
)
def test_validate_offset_commit_rules(state, generation, member, instance, error):
    group = ClassicGroup("g", 0)
    if state is not GroupState.EMPTY:
        group.add(ClassicGroupMember("m", "i", "c", "h", 1, 1, "consumer", (("range", b""),)))
        group.generation_id = 4
    group.state = state
    if error is None:
        validate_offset_commit(group, member, instance, generation)
    else:
        with pytest.raises(error):
            validate_offset_commit(group, member, instance, generation)


@pytest.mark.parametrize(
    ("state", "generation", "member", "instance", "error"),
    [
        (GroupState.STABLE, -1, "", None, None),  # no member fields: accepted in any state
        (GroupState.PREPARING_REBALANCE, -1, "", None, None),
        (GroupState.COMPLETING_REBALANCE, -1, "", None, None),
        (GroupState.COMPLETING_REBALANCE, 4, "m", "i", None),  # never REBALANCE_IN_PROGRESS
        (GroupState.STABLE, 3, "m", None, IllegalGeneration),  # member fields given: checked
        (GroupState.STABLE, 4, "n", None, UnknownMemberId),
        (GroupState.STABLE, -1, "", "j", UnknownMemberId),
    ],
)
def test_validate_transactional_offset_commit_rules(state, generation, member, instance, error):
    """Kafka's ``ClassicGroup.validateOffsetCommit`` with isTransactional (TxnOffsetCommit)."""
    group = ClassicGroup("g", 0)
    group.add(ClassicGroupMember("m", "i", "c", "h", 1, 1, "consumer", (("range", b""),)))
    group.generation_id = 4
    group.state = state
    if error is None:
        validate_offset_commit(group, member, instance, generation, transactional=True)
    else:
        with pytest.raises(error):
            validate_offset_commit(group, member, instance, generation, transactional=True)


# ---------------------------------------------------------------------------- OffsetFetch


def test_fetch_offsets():
    h, store = Harness(), MemoryOffsetStore()
    h.sleep_until(500)
    _commit(h, store, topics=[("u", [PartitionCommit(0, 3, 2, "meta")]), ("t", [PartitionCommit(1, 9)])])
    assert fetch_offsets(store, group_id="g", topics=[("t", [1, 2])]) == {
        "group_id": "g",
        "error_code": E.none,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition_index": 1,
                        "committed_offset": 9,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": E.none,
                    },
                    {
                        "partition_index": 2,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": E.none,
                    },
                ],
            }
        ],
    }
    everything = fetch_offsets(store, group_id="g", topics=None)
    assert [
        (t["name"], [(p["partition_index"], p["committed_offset"]) for p in t["partitions"]])
        for t in everything["topics"]
    ] == [
        ("t", [(1, 9)]),
        ("u", [(0, 3)]),
    ]
    assert everything["topics"][1]["partitions"][0]["committed_leader_epoch"] == 2
    assert everything["topics"][1]["partitions"][0]["metadata"] == "meta"
    assert fetch_offsets(store, group_id="other", topics=None) == {
        "group_id": "other",
        "error_code": E.none,
        "topics": [],
    }


def test_groups_do_not_share_progress():
    h, store = Harness(), MemoryOffsetStore()
    _commit(h, store, group="g1", topics=[("t", [PartitionCommit(0, 10)])])
    _commit(h, store, group="g2", topics=[("t", [PartitionCommit(0, 20)])])
    assert store.fetch("g1", "t", 0).offset == 10
    assert store.fetch("g2", "t", 0).offset == 20


# ---------------------------------------------------------------------------- OffsetDelete


def _delete(h: Harness, store: MemoryOffsetStore, group: str = "g", topics=(("t", (0, 1)),)):
    plan = delete_offsets(
        h.groups, store, group_id=group, topics=topics, topic_exists=lambda t: t in {"t", "u"}, now_ms=h.now
    )
    store.delete(plan.group_id, plan.deletions)
    return plan


def test_offset_delete_of_an_unknown_group():
    h, store = Harness(), MemoryOffsetStore()
    assert _delete(h, store).response == {"error_code": E.group_id_not_found, "topics": []}
    assert _delete(h, store, group="").response == {"error_code": E.invalid_group_id, "topics": []}


def test_offset_delete_refuses_topics_the_group_subscribes_to():
    h, store = Harness(), MemoryOffsetStore()
    a, _join_a = h.dance("c", protocols=(("range", sub("t")),))
    h.sleep_until(2_000)
    h.sync(a, 1, {a: asg({"t": [0, 1, 2, 3]})})
    _commit(h, store, generation=1, member=a, topics=[("t", [PartitionCommit(0, 5)]), ("u", [PartitionCommit(0, 6)])])
    plan = _delete(h, store, topics=[("t", [0, 1]), ("u", [0, 1]), ("gone", [0])])
    assert plan.response == {
        "error_code": E.none,
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {"partition_index": 0, "error_code": E.group_subscribed_to_topic},
                    {"partition_index": 1, "error_code": E.group_subscribed_to_topic},
                ],
            },
            {
                "name": "u",
                "partitions": [
                    {"partition_index": 0, "error_code": E.none},
                    {"partition_index": 1, "error_code": E.none},
                ],
            },
            {"name": "gone", "partitions": [{"partition_index": 0, "error_code": E.unknown_topic_or_partition}]},
        ],
    }
    assert plan.deletions == (("u", 0),)
    assert store.fetch_all("g") == {("t", 0): CommittedOffset(5, -1, "", 2_000)}


def test_offset_delete_with_unparsable_subscriptions_refuses_every_topic():
    h, store = Harness(), MemoryOffsetStore()
    h.dance("c", protocols=(("range", b"\x00\x00\xff"),))
    h.sleep_until(2_000)
    assert h.group().subscribed_topics is None
    plan = _delete(h, store, topics=[("u", [0])])
    assert plan.response["topics"][0]["partitions"][0]["error_code"] == E.group_subscribed_to_topic


def test_offset_delete_of_a_non_consumer_group_with_members_is_refused():
    h, store = Harness(), MemoryOffsetStore()
    h.dance("c", protocol_type="connect", protocols=(("v1", b""),))
    assert _delete(h, store).response == {"error_code": E.non_empty_group, "topics": []}


def test_offset_delete_of_an_empty_or_offsets_only_group():
    h, store = Harness(), MemoryOffsetStore()
    _commit(h, store, group="simple", topics=[("t", [PartitionCommit(0, 1), PartitionCommit(1, 2)])])
    plan = _delete(h, store, group="simple", topics=[("t", [1, 3])])
    assert plan.deletions == (("t", 1),)
    assert plan.response["topics"][0]["partitions"] == [
        {"partition_index": 1, "error_code": E.none},
        {"partition_index": 3, "error_code": E.none},
    ]
    assert store.fetch_all("simple") == {("t", 0): CommittedOffset(1, -1, "", 0)}

    a, b = h.stable_pair()
    _commit(h, store, generation=1, member=a, topics=[("u", [PartitionCommit(0, 1)])])
    h.leave((a, None), (b, None))
    assert h.group().subscribed_topics == frozenset()
    assert _delete(h, store, topics=[("t", [0]), ("u", [0])]).deletions == (("u", 0),)


# ---------------------------------------------------------------------------- DeleteGroups


def test_delete_groups_plans_deleting_all_their_offsets():
    h, store = Harness(), MemoryOffsetStore()
    _commit(h, store, group="simple", topics=[("t", [PartitionCommit(1, 1), PartitionCommit(0, 1)])])
    a, _b = h.stable_pair()
    _commit(h, store, generation=1, member=a)
    h.join(group="empty", client="e")
    plan = delete_groups(h.groups, store, group_ids=["simple", "g", "empty", "nope"], now_ms=h.now)
    assert plan.results == [
        {"group_id": "simple", "error_code": E.none},
        {"group_id": "g", "error_code": E.non_empty_group},
        {"group_id": "empty", "error_code": E.none},
        {"group_id": "nope", "error_code": E.group_id_not_found},
    ]
    assert plan.deletions == {"simple": (("t", 0), ("t", 1)), "empty": ()}
    for group_id, partitions in plan.deletions.items():
        store.delete(group_id, partitions)
    assert list(store.groups_with_offsets()) == ["g"]
    assert h.groups.group("empty") is None
