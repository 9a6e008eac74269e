"""Committed offsets: OffsetCommit / OffsetFetch / OffsetDelete / DeleteGroups against group state.

Kafka's rules (``OffsetMetadataManager`` and ``ClassicGroup.validateOffsetCommit``
/ ``validateOffsetDelete``), applied to the groups of a
:class:`~walgate.coordinator.ClassicGroups` (those of a
:class:`~walgate.coordinator.ConsumerGroups`, when given, check their members'
epochs themselves) and to an :class:`OffsetStore`, the durable part that a
storage-backed implementation (:mod:`walgate.coordinator.store`: offsets kept in
the vnode of each partition, as TDengine records consumption progress) provides.

Plans, then durability
----------------------
The write paths are pure: :func:`commit_offsets`, :func:`delete_offsets` and
:func:`delete_groups` validate, decide every partition's error code and return
a *plan* — the response plus what to write (:class:`OffsetCommitRecord` s, or
the partitions whose offsets to delete). They do not touch the store. The
gateway then applies the plan on the storage thread (``store.commit(records)``,
``store.delete(...)``, durable before returning) and only then sends the
response; a partition the store refused gets its error in place of NONE
(:meth:`OffsetCommitPlan.failed`), the others are stored. The store is the one place committed
offsets live: its start-up recovery rebuilds them from the WAL, so live and
recovered state cannot drift, and nothing here keeps a copy.

OffsetCommit validation (``ClassicGroup.validateOffsetCommit``)
----------------------------------------------------------------
* generation < 0 in an Empty (or non-existent) group: a "simple" commit (admin
  client, ``assign()`` consumers, OffsetCommit v0/v1), accepted;
* generation >= 0, or a member id / group instance id given: the member must
  exist (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID) and the generation be the
  group's (ILLEGAL_GENERATION);
* no generation and no member in a non-Empty group: UNKNOWN_MEMBER_ID;
* CompletingRebalance: REBALANCE_IN_PROGRESS (the member has its new generation
  but not its assignment yet); PreparingRebalance accepts the previous
  generation's commits, so members can commit before rejoining;
* a group that does not exist: accepted for generation < 0, else
  GROUP_ID_NOT_FOUND (OffsetCommit v9+) or ILLEGAL_GENERATION (older);
* a valid commit in Stable or PreparingRebalance restarts the member's session.

Per partition, metadata longer than ``offset.metadata.max.bytes`` (4096) gets
OFFSET_METADATA_TOO_LARGE, a partition that does not exist
UNKNOWN_TOPIC_OR_PARTITION (Kafka checks this before the coordinator sees the
request), and an empty group id INVALID_GROUP_ID.

A group whose only state is committed offsets is Kafka's "simple group": an
Empty group without protocol type. It is not kept in memory; it is recognised
by :meth:`OffsetStore.has_offsets`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.classic_model import ClassicGroup, GroupState
from walgate.coordinator.consumer_admin import CommitCheck, accept_commit, refuse_commit
from walgate.coordinator.consumer_group import ConsumerGroups
from walgate.coordinator.coordinator import GroupCoordinator
from walgate.coordinator.errors import (
    GroupError,
    GroupIdNotFound,
    IllegalGeneration,
    NonEmptyGroup,
    RebalanceInProgress,
    UnknownMemberId,
)

__all__ = [
    "OFFSET_METADATA_MAX_SIZE",
    "CommittedOffset",
    "GroupDeletePlan",
    "OffsetCommitPlan",
    "OffsetCommitRecord",
    "OffsetDeletePlan",
    "OffsetStore",
    "PartitionCommit",
    "commit_offsets",
    "delete_groups",
    "delete_offsets",
    "fetch_offsets",
    "validate_offset_commit",
]

OFFSET_METADATA_MAX_SIZE = 4096
"""Kafka's ``offset.metadata.max.bytes`` default."""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """What the store keeps for one (group, topic, partition)."""

    offset: int
    """The next offset to consume."""
    leader_epoch: int
    """-1 when the committer did not know it."""
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """One committed offset to store: the record an OffsetCommit writes."""

    group_id: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int


class OffsetStore(Protocol):
    """Durable committed offsets per (group, topic, partition)."""

    def commit(self, records: Sequence[OffsetCommitRecord]) -> list[Exception | None]:
        """Store *records* durably before returning; per record, None or the error that refused it (the others are
        stored). Later records for a partition win."""
        ...

    def fetch(self, group_id: str, topic: str, partition: int) -> CommittedOffset | None:
        """The committed offset of one partition, or None."""
        ...

    def fetch_all(self, group_id: str) -> Mapping[tuple[str, int], CommittedOffset]:
        """Every committed offset of *group_id*, keyed by (topic, partition)."""
        ...

    def delete(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Remove the committed offsets of *partitions* durably (absent ones are ignored)."""
        ...

    def has_offsets(self, group_id: str) -> bool:
        """Whether *group_id* has at least one committed offset."""
        ...

    def groups_with_offsets(self) -> Iterable[str]:
        """Every group with at least one committed offset."""
        ...


@dataclass(frozen=True, slots=True)
class PartitionCommit:
    """One partition of an OffsetCommit request."""

    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitPlan:
    """An OffsetCommit's response (``{"topics": [{name, partitions: [{partition_index, error_code}]}]}``) and records.

    The records are exactly the partitions answered NONE; store them, then send the response.
    """

    response: dict[str, Any]
    records: tuple[OffsetCommitRecord, ...]

    def failed(self, errors: Mapping[tuple[str, int], ErrorCode]) -> dict[str, Any]:
        """The response to send when the store refused the records of some partitions: *errors* by (topic,
        partition) in place of their NONE."""
        return {
            "topics": [
                {
                    "name": topic["name"],
                    "partitions": [
                        {
                            "partition_index": p["partition_index"],
                            "error_code": errors.get((topic["name"], p["partition_index"]), p["error_code"]),
                        }
                        for p in topic["partitions"]
                    ],
                }
                for topic in self.response["topics"]
            ]
        }


@dataclass(frozen=True, slots=True)
class OffsetDeletePlan:
    """An OffsetDelete's response (``{error_code, topics: [{name, partitions: [{partition_index, error_code}]}]}``).

    ``deletions`` are the partitions of ``group_id`` whose committed offsets to delete before responding.
    """

    response: dict[str, Any]
    group_id: str
    deletions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class GroupDeletePlan:
    """DeleteGroups results (``[{group_id, error_code}]``) and, per deleted group, the offsets to delete."""

    results: list[dict[str, Any]]
    deletions: dict[str, tuple[tuple[str, int], ...]]


def _simple_group(group_id: str, now_ms: int) -> ClassicGroup:
    """Kafka's "simple group": Empty, no protocol type, holding only offsets."""
    return ClassicGroup(group_id, now_ms)


def validate_offset_commit(
    group: ClassicGroup, member_id: str, group_instance_id: str | None, generation_id: int,
    transactional: bool = False,
) -> None:
    """Kafka's ``ClassicGroup.validateOffsetCommit``; raises a GroupError.

    A commit without member fields (generation < 0, no member id, no instance id) is accepted while the group is
    Empty, and in any state when *transactional* (a TxnOffsetCommit: the fields are optional there, kafkajs and
    v0-v2 send none). A commit with them is checked against the member and its generation; a non-transactional one
    is REBALANCE_IN_PROGRESS while the group awaits its assignment."""
    if generation_id < 0 and group.is_in_state(GroupState.EMPTY):
        return
    if generation_id >= 0 or member_id or group_instance_id is not None:
        group.validate_member(member_id, group_instance_id)
        if generation_id != group.generation_id:
            raise IllegalGeneration(f"generation {generation_id} is not {group.generation_id}")
    elif not transactional and not group.is_in_state(GroupState.EMPTY):
        raise UnknownMemberId("a commit without member id needs an Empty group")
    if not transactional and group.is_in_state(GroupState.COMPLETING_REBALANCE):
        raise RebalanceInProgress(f"group {group.group_id} is awaiting its assignment")


def _group_for_commit(
    groups: ClassicGroups,
    store: OffsetStore,
    group_id: str,
    generation_id: int,
    report_group_not_found: bool,
    now_ms: int,
) -> ClassicGroup:
    group = groups.group(group_id)
    if group is not None:
        return group
    if generation_id < 0 or store.has_offsets(group_id):
        return _simple_group(group_id, now_ms)
    if report_group_not_found:
        raise GroupIdNotFound(f"Group {group_id} not found.")
    raise IllegalGeneration(f"group {group_id} does not exist")


def _validate_and_touch(
    groups: ClassicGroups,
    store: OffsetStore,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    report_group_not_found: bool,
    now_ms: int,
    consumer: ConsumerGroups | None,
    transactional: bool = False,
) -> CommitCheck:
    """What refuses each partition of an OffsetCommit (a member's session is restarted if the request is valid)."""
    if not group_id:
        return refuse_commit(ErrorCode.invalid_group_id)
    if consumer is not None and consumer.has_group(group_id):
        if transactional and generation_id < 0 and not member_id and group_instance_id is None:
            return accept_commit  # Kafka's ConsumerGroup.validateOffsetCommit: a memberless TxnOffsetCommit
        return consumer.offset_commit_check(
            group_id, member_id, generation_id, consumer_protocol_version=report_group_not_found or transactional
        )
    try:
        group = _group_for_commit(groups, store, group_id, generation_id, report_group_not_found, now_ms)
        validate_offset_commit(group, member_id, group_instance_id, generation_id, transactional)
    except GroupError as error:
        return refuse_commit(error.error_code)
    if member_id and groups.group(group_id) is group and group.state in (GroupState.STABLE,
                                                                         GroupState.PREPARING_REBALANCE):
        groups.touch(group_id, member_id, now_ms)
    return accept_commit


def commit_offsets(
    groups: ClassicGroups,
    store: OffsetStore,
    *,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    topics: Sequence[tuple[str, Sequence[PartitionCommit]]],
    partition_exists: Callable[[str, int], bool],
    report_group_not_found: bool,
    now_ms: int,
    metadata_max_size: int = OFFSET_METADATA_MAX_SIZE,
    consumer: ConsumerGroups | None = None,
    transactional: bool = False,
) -> OffsetCommitPlan:
    """Validate an OffsetCommit and plan its records (see the module doc for the rules).

    *report_group_not_found*: OffsetCommit v9+ (GROUP_ID_NOT_FOUND instead of
    ILLEGAL_GENERATION for a generation-carrying commit to an unknown group; the
    only versions that carry a member epoch). Commits to a group of *consumer*
    (KIP-848) are validated by it.
    A valid commit restarts the member's session in *groups* (Stable / PreparingRebalance).
    *transactional*: a TxnOffsetCommit (KIP-447), which carries a KIP-848 member's epoch at any version.
    """
    check: CommitCheck = accept_commit
    # Kafka answers unknown partitions before the coordinator sees the request.
    if any(partition_exists(topic, p.partition) for topic, partitions in topics for p in partitions):
        check = _validate_and_touch(
            groups, store, group_id, generation_id, member_id, group_instance_id, report_group_not_found, now_ms,
            consumer, transactional,
        )

    records: list[OffsetCommitRecord] = []
    response_topics: list[dict[str, Any]] = []
    for topic, partitions in topics:
        answers: list[dict[str, Any]] = []
        for p in partitions:
            if not partition_exists(topic, p.partition):
                code = ErrorCode.unknown_topic_or_partition
            elif (refused := check(topic, p.partition)) is not None:
                code = refused
            elif p.metadata is not None and len(p.metadata) > metadata_max_size:
                code = ErrorCode.offset_metadata_too_large
            else:
                code = ErrorCode.none
                records.append(
                    OffsetCommitRecord(
                        group_id=group_id,
                        topic=topic,
                        partition=p.partition,
                        offset=p.offset,
                        leader_epoch=p.leader_epoch,
                        metadata=p.metadata or "",
                        commit_timestamp_ms=now_ms,
                    )
                )
            answers.append({"partition_index": p.partition, "error_code": code})
        response_topics.append({"name": topic, "partitions": answers})
    return OffsetCommitPlan({"topics": response_topics}, tuple(records))


def fetch_offsets(
    store: OffsetStore, *, group_id: str, topics: Sequence[tuple[str, Sequence[int]]] | None
) -> dict[str, Any]:
    """OffsetFetch for one group: ``{group_id, error_code, topics: [{name, partitions: [...]}]}``.

    Each partition is ``{partition_index, committed_offset, committed_leader_epoch,
    metadata, error_code}``; a partition without a committed offset has offset and
    epoch -1 and metadata ``""``. *topics* None asks for every committed offset of
    the group (in topic, partition order). An unknown group is not an error: it
    simply has no offsets (Kafka answers the same for groups it does not know).
    """
    if topics is None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(store.fetch_all(group_id)):
            by_topic.setdefault(topic, []).append(partition)
        topics = list(by_topic.items())
    response_topics: list[dict[str, Any]] = []
    for topic, partitions in topics:
        answers: list[dict[str, Any]] = []
        for partition in partitions:
            committed = store.fetch(group_id, topic, partition)
            answers.append(
                {
                    "partition_index": partition,
                    "committed_offset": -1 if committed is None else committed.offset,
                    "committed_leader_epoch": -1 if committed is None else committed.leader_epoch,
                    "metadata": "" if committed is None else committed.metadata,
                    "error_code": ErrorCode.none,
                }
            )
        response_topics.append({"name": topic, "partitions": answers})
    return {"group_id": group_id, "error_code": ErrorCode.none, "topics": response_topics}


def _validate_offset_delete(groups: ClassicGroups, store: OffsetStore, group_id: str, now_ms: int) -> ClassicGroup:
    group = groups.group(group_id)
    if group is None:
        if not store.has_offsets(group_id):
            raise GroupIdNotFound(f"Group {group_id} not found.")
        return _simple_group(group_id, now_ms)
    if not group.is_in_state(GroupState.EMPTY) and not group.uses_consumer_protocol():
        raise NonEmptyGroup(f"Group {group_id} is not empty.")
    return group


def delete_offsets(
    groups: ClassicGroups,
    store: OffsetStore,
    *,
    group_id: str,
    topics: Sequence[tuple[str, Sequence[int]]],
    topic_exists: Callable[[str], bool],
    now_ms: int,
    consumer: ConsumerGroups | None = None,
) -> OffsetDeletePlan:
    """OffsetDelete: plan deleting committed offsets of topics the group does not consume.

    Refuses the whole request with GROUP_ID_NOT_FOUND (no group, no offsets) or
    NON_EMPTY_GROUP (members, and not the consumer protocol); refuses the
    partitions of subscribed topics with GROUP_SUBSCRIBED_TO_TOPIC (all of them
    when the subscriptions cannot be parsed); UNKNOWN_TOPIC_OR_PARTITION for
    topics that do not exist. A group of *consumer* (KIP-848) may have members:
    only its subscribed topics are refused.
    """
    if not group_id:
        return OffsetDeletePlan({"error_code": ErrorCode.invalid_group_id, "topics": []}, group_id, ())
    is_subscribed: Callable[[str], bool]
    consumer_group = None if consumer is None else consumer.group(group_id)
    if consumer_group is not None:
        is_subscribed = consumer_group.subscribed_topics().__contains__
    else:
        try:
            is_subscribed = _validate_offset_delete(groups, store, group_id, now_ms).is_subscribed_to_topic
        except GroupError as error:
            return OffsetDeletePlan({"error_code": error.error_code, "topics": []}, group_id, ())
    deletions: list[tuple[str, int]] = []
    response_topics: list[dict[str, Any]] = []
    for topic, partitions in topics:
        if not topic_exists(topic):
            code = ErrorCode.unknown_topic_or_partition
        elif is_subscribed(topic):
            code = ErrorCode.group_subscribed_to_topic
        else:
            code = ErrorCode.none
            deletions += [(topic, p) for p in partitions if store.fetch(group_id, topic, p) is not None]
        response_topics.append(
            {"name": topic, "partitions": [{"partition_index": p, "error_code": code} for p in partitions]}
        )
    return OffsetDeletePlan(
        {"error_code": ErrorCode.none, "topics": response_topics}, group_id, tuple(dict.fromkeys(deletions))
    )


def delete_groups(
    groups: ClassicGroups | GroupCoordinator, store: OffsetStore, *, group_ids: Iterable[str], now_ms: int
) -> GroupDeletePlan:
    """DeleteGroups: drop the Empty groups from *groups* and plan deleting all their offsets."""
    results = groups.delete(group_ids, has_offsets=store.has_offsets, now_ms=now_ms)
    deletions = {
        r["group_id"]: tuple(sorted(store.fetch_all(r["group_id"])))
        for r in results
        if r["error_code"] is ErrorCode.none
    }
    return GroupDeletePlan(results, deletions)
