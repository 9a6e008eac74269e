"""Share groups' administration, as Kafka's group coordinator answers it: DescribeShareGroupOffsets,
AlterShareGroupOffsets, DeleteShareGroupOffsets, and a share group's part in ListGroups and DeleteGroups.

A share group exists while it has members (``Stable``) or share-partition state (``Empty``: it consumed, or its
offsets were altered, and its members are gone); any other id is no share group (GROUP_ID_NOT_FOUND where Kafka
answers it). Changing offsets is for an empty group only (NON_EMPTY_GROUP otherwise), as Kafka's
``ShareGroup.validateOffsetsAlterable`` / ``validateDeleteGroup``.

* Describe: the share-partition start offset of each asked partition, -1 for one without state or of an unknown
  topic (absence of data, not an error, as Kafka's); with no topics asked, every share-partition with state. The lag
  (v1) is the high watermark less the start offset less the records past it already acknowledged or archived; -1
  when unknown.
* Alter: each partition of a known topic starts afresh at the given offset (a negative one is INVALID_REQUEST);
  an unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION.
* Delete offsets / delete group: the state of the topics' share-partitions (of every topic, for the group) is
  deleted; a later consumer starts them as ``share.auto.offset.reset`` says.
* In a cluster each share-partition's state is kept by its partition's leader node; the group's coordinator reaches
  the others' with the share coordinator's state RPCs (KIP-932), which a leader answers with :func:`initialize_states`
  (InitializeShareGroupState), :func:`delete_states` (DeleteShareGroupState) and :func:`state_summaries`
  (ReadShareGroupStateSummary), per share-partition and with no group check (the coordinator made it). The
  coordinator's own functions above take ``here``: whether a topic's partition's state is kept on its node; those
  kept elsewhere are validated but left to the caller to send.
* In a replicated cluster every share-partition state of a group is a record of the group's own
  ``__consumer_offsets`` partition, kept by its leader, the group's coordinator (KIP-932's share coordinator,
  :mod:`walgate.gateway.kafka.share_persister`): the administration reads those records, ``recorded`` here
  (:func:`recorded_summary`, :func:`describe_recorded`, :func:`recorded_groups`), not the share-partitions this
  node happened to use, as Kafka's group coordinator reads them through its persister.

Pure and synchronous: names and partition counts of topics come through :class:`ShareTopics`; every change is
made through the coordinator's :meth:`~walgate.coordinator.share_coordinator.ShareCoordinator.reset` and
:meth:`~walgate.coordinator.share_coordinator.ShareCoordinator.drop`, which the caller makes durable (or rolls
back) as every other share change.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from walgate.coordinator.share_coordinator import ShareCoordinator, ShareKey
from walgate.coordinator.share_partition import RecordState

__all__ = [
    "Here", "ShareTopics", "StateResult", "alter_offsets", "delete_group", "delete_offsets", "delete_states",
    "describe_offsets", "describe_recorded", "group_state", "initialize_states", "list_groups", "recorded_groups",
    "recorded_summary", "state_summaries",
]

UNKNOWN_TOPIC = "This server does not host this topic-partition."
NO_OFFSETS = "There is no offset information to delete."

Here = Callable[[str, int], bool]
"""Whether the state of a topic's (by name) partition is kept on this node (always, on a single node)."""
StateResult = dict[str, Any]
"""A partition's answer to a state RPC, in the response's field names (``partition``, ``error_code``,
``error_message``, and a summary's ``state_epoch``, ``leader_epoch``, ``start_offset``,
``delivery_complete_count``)."""


def _everywhere(name: str, partition: int) -> bool:
    return True


class ShareTopics(Protocol):
    def key(self, name: str) -> str | None:
        """The topic key (the coordinator's) of topic ``name``, None when there is no such topic."""

    def name(self, key: str) -> str | None:
        """The name of the topic of key ``key``, None when it is gone."""

    def partitions(self, name: str) -> int:
        """The partition count of an existing topic."""


def group_state(coordinator: ShareCoordinator, group_id: str) -> str | None:
    """``Stable`` (members), ``Empty`` (share-partition state, no members), None (no share group)."""
    if coordinator.groups.groups.get(group_id) is not None:
        return "Stable"
    return "Empty" if coordinator.has_state(group_id) else None


def list_groups(coordinator: ShareCoordinator, states_filter: Sequence[str] = (),
                types_filter: Sequence[str] = ()) -> list[dict[str, Any]]:
    """ListGroups' entries of the share groups (protocol type and group type ``share``); the filters compare
    case-insensitively, an empty one matches all."""
    states = {s.strip().lower() for s in states_filter}
    types = {t.strip().lower() for t in types_filter}
    if types and "share" not in types:
        return []
    ids = sorted(set(coordinator.groups.groups) | {k[0] for k in coordinator.state_keys_all()})
    listed = [(g, group_state(coordinator, g) or "Dead") for g in ids]
    return [{"group_id": g, "protocol_type": "share", "group_state": state, "group_type": "share"}
            for g, state in listed if not states or state.lower() in states]


def recorded_summary(value: Any) -> tuple[int, int]:
    """(start offset, records past it ACKNOWLEDGED or ARCHIVED) of a share-partition's recorded value
    (:meth:`SharePartition.to_record <walgate.coordinator.share_partition.SharePartition.to_record>`'s runs
    ``[first, last, state, delivery count]``), what :meth:`ShareCoordinator.summary` answers of it once loaded."""
    final = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
    return int(value["s"]), sum(int(last) - int(first) + 1 for first, last, state, _ in value["r"]
                                if int(state) in final)


def recorded_groups(records: Iterable[tuple[ShareKey, Any]]) -> set[str]:
    """The ids of the groups of which ``records`` (share-partition key, value; None: deleted) hold a state."""
    return {key[0] for key, value in records if value is not None}


def describe_recorded(topics: ShareTopics, records: Mapping[ShareKey, Any], group_id: str,
                      wanted: Sequence[tuple[str, Sequence[int]]] | None,
                      marks: Mapping[tuple[str, int], int]) -> list[dict[str, Any]]:
    """DescribeShareGroupOffsets' topics of one group from the share coordinator's ``records`` (a replicated
    cluster's): ``wanted`` as (topic name, partitions), None for every share-partition recorded (of a topic that
    still exists), by topic name; start offset -1 for a partition without a record. The lag is the high watermark
    in ``marks`` (topic key, partition; its leader's) less the start offset less the records past it acknowledged
    or archived, -1 when the watermark is unknown. Topic ids are topic keys (the caller's to turn into UUIDs)."""
    def described(key: str | None, partitions: Iterable[int]) -> list[dict[str, Any]]:
        out = []
        for p in partitions:
            value = None if key is None else records.get((group_id, key, p))
            start, lag = -1, -1
            if value is not None:
                start, done = recorded_summary(value)
                mark = marks.get((key or "", p))
                lag = -1 if mark is None else max(0, mark - start - done)
            out.append({"partition_index": p, "start_offset": start, "leader_epoch": 0, "lag": lag,
                        "error_code": ErrorCode.none, "error_message": None})
        return out

    if wanted is None:
        by_topic: dict[str, list[int]] = {}
        for (group, topic, p), value in records.items():
            if group == group_id and value is not None:
                by_topic.setdefault(topic, []).append(p)
        wanted = sorted((name, sorted(ps)) for topic, ps in by_topic.items()
                        if (name := topics.name(topic)) is not None)
    return [{"topic_name": name, "topic_id": (key := topics.key(name)), "partitions": described(key, partitions)}
            for name, partitions in wanted]


def _refusal(coordinator: ShareCoordinator, group_id: str, elsewhere: bool) -> tuple[int, str | None] | None:
    """The group-level error of a change of the group's offsets, None when it may change (``elsewhere``: other
    nodes keep state of the group, so that without members here it is empty, not unknown)."""
    state = group_state(coordinator, group_id) or ("Empty" if elsewhere else None)
    if state is None:
        return ErrorCode.group_id_not_found, f"Group {group_id} not found."
    if state != "Empty":
        return ErrorCode.non_empty_group, f"The share group {group_id} is not empty."
    return None


def _lag(coordinator: ShareCoordinator, topic: str, partition: int, start: int, done: int) -> int:
    try:
        marks = coordinator.logs.watermarks(topic, partition)
    except Exception:  # noqa: BLE001 - a partition whose log cannot be read has no known lag
        return -1
    return -1 if marks is None else max(0, marks[1] - max(start, 0) - done)


def _described(coordinator: ShareCoordinator, group_id: str, topic: str, partitions: Sequence[int]) -> list[
        dict[str, Any]]:
    """The partitions' start offsets and lags (-1 for those without state; ``topic`` empty: an unknown topic)."""
    out = []
    for p in partitions:
        summary = coordinator.summary((group_id, topic, p)) if topic else None
        if summary is None:
            out.append({"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
                        "error_code": ErrorCode.none, "error_message": None})
        else:
            start, done = summary
            out.append({"partition_index": p, "start_offset": start, "leader_epoch": 0,
                        "lag": _lag(coordinator, topic, p, start, done), "error_code": ErrorCode.none,
                        "error_message": None})
    return out


def describe_offsets(coordinator: ShareCoordinator, topics: ShareTopics, group_id: str,
                     wanted: Sequence[tuple[str, Sequence[int]]] | None) -> list[dict[str, Any]]:
    """DescribeShareGroupOffsets' topics of one group: ``wanted`` as (topic name, partitions), None for every
    share-partition with state. Topic ids are the coordinator's topic keys (the caller's to turn into UUIDs)."""
    if wanted is None:
        by_topic: dict[str, list[int]] = {}
        for _, topic, p in coordinator.state_keys(group_id):
            by_topic.setdefault(topic, []).append(p)
        named = sorted((n, topic, ps) for topic, ps in by_topic.items() for n in (topics.name(topic),) if n is not None)
        return [{"topic_name": n, "topic_id": topic, "partitions": _described(coordinator, group_id, topic, ps)}
                for n, topic, ps in named]
    out = []
    for name, partitions in wanted:
        key = topics.key(name)
        out.append({"topic_name": name, "topic_id": key,
                    "partitions": _described(coordinator, group_id, key or "", partitions)})
    return out


def alter_offsets(coordinator: ShareCoordinator, topics: ShareTopics, group_id: str,
                  offsets: Sequence[tuple[str, Sequence[tuple[int, int]]]],
                  here: Here = _everywhere, elsewhere: bool = False) -> tuple[int, str | None, list[dict[str, Any]]]:
    """AlterShareGroupOffsets: (error code, message, per-topic results) for ``offsets`` as (topic name,
    [(partition, start offset)]); a group-level error changes nothing. A valid partition not ``here`` is answered
    NONE and not changed: the caller initializes it on its leader and answers what that says. ``elsewhere``: other
    nodes keep state of the group (it exists without state or members here)."""
    refused = _refusal(coordinator, group_id, elsewhere)
    if refused is not None:
        return refused[0], refused[1], []
    out = []
    for name, partitions in offsets:
        key = topics.key(name)
        count = topics.partitions(name) if key is not None else 0
        results = []
        for p, start in partitions:
            if key is None or not 0 <= p < count:
                results.append({"partition_index": p, "error_code": ErrorCode.unknown_topic_or_partition,
                                "error_message": UNKNOWN_TOPIC})
            elif start < 0:
                results.append({"partition_index": p, "error_code": ErrorCode.invalid_request,
                                "error_message": f"The start offset {start} is negative."})
            else:
                if here(name, p):
                    coordinator.reset((group_id, key, p), start)
                results.append({"partition_index": p, "error_code": ErrorCode.none, "error_message": None})
        out.append({"topic_name": name, "topic_id": key, "partitions": results})
    return ErrorCode.none, None, out


def delete_offsets(coordinator: ShareCoordinator, topics: ShareTopics, group_id: str,
                   names: Sequence[str], here: Here = _everywhere, elsewhere: bool = False,
                   recorded: Collection[ShareKey] = ()) -> tuple[int, str | None, list[dict[str, Any]]]:
    """DeleteShareGroupOffsets: (error code, message, per-topic results); a group-level error changes nothing. A
    topic with a partition not ``here`` is answered NONE whether or not this node kept state of it: the caller
    deletes the state of those partitions on their leaders and answers what they say. ``elsewhere``: as for
    :func:`alter_offsets`. ``recorded``: the share-partitions the share coordinator keeps a record of (a replicated
    cluster's), deleted with those this node holds (here, by ``here``)."""
    refused = _refusal(coordinator, group_id, elsewhere)
    if refused is not None:
        return refused[0], refused[1], []
    keys = set(coordinator.state_keys(group_id)) | {k for k in recorded if k[0] == group_id}
    out = []
    for name in names:
        key = topics.key(name)
        mine = sorted(k for k in keys if k[1] == key and here(name, k[2]))
        if key is None:
            out.append({"topic_name": name, "topic_id": None, "error_code": ErrorCode.unknown_topic_or_partition,
                        "error_message": UNKNOWN_TOPIC})
        elif not mine and all(here(name, p) for p in range(topics.partitions(name))):
            out.append({"topic_name": name, "topic_id": None, "error_code": ErrorCode.unknown_topic_or_partition,
                        "error_message": NO_OFFSETS})
        else:
            for k in mine:
                coordinator.drop(k)
            out.append({"topic_name": name, "topic_id": key, "error_code": ErrorCode.none, "error_message": None})
    return ErrorCode.none, None, out


def delete_group(coordinator: ShareCoordinator, group_id: str, elsewhere: bool = False,
                 recorded: Collection[ShareKey] = ()) -> int:
    """DeleteGroups of a share group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, or NONE with its share-partitions'
    state and sessions gone (``elsewhere``: as for :func:`alter_offsets`; ``recorded``: share-partitions of the
    group recorded by the share coordinator whose partition this node leads, deleted with those it holds)."""
    refused = _refusal(coordinator, group_id, elsewhere)
    if refused is not None:
        return refused[0]
    for key in sorted(set(coordinator.state_keys(group_id)) | {k for k in recorded if k[0] == group_id}):
        coordinator.drop(key)
    coordinator.drop_sessions(group_id)
    return ErrorCode.none


def _state_key(topics: ShareTopics, group_id: str, topic_id: str, partition: int) -> tuple[str, str, int] | StateResult:
    """The share key of a state RPC's partition, or its answer when the topic id names no partition here
    (UNKNOWN_TOPIC_OR_PARTITION, as Kafka's share coordinator answers it)."""
    name = topics.name(topic_id)
    if name is None or not 0 <= partition < topics.partitions(name):
        return {"partition": partition, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": UNKNOWN_TOPIC}
    return group_id, topic_id, partition


def initialize_states(coordinator: ShareCoordinator, topics: ShareTopics, group_id: str,
                      partitions: Sequence[tuple[str, int, int]]) -> list[StateResult]:
    """InitializeShareGroupState on a partition's leader: each (topic key, partition, start offset) starts afresh at
    that offset (a negative one is INVALID_REQUEST: walgate initializes only with the offset an alter gives)."""
    out: list[StateResult] = []
    for topic_id, p, start in partitions:
        key = _state_key(topics, group_id, topic_id, p)
        if isinstance(key, dict):
            out.append(key)
        elif start < 0:
            out.append({"partition": p, "error_code": ErrorCode.invalid_request,
                        "error_message": f"The start offset {start} is negative."})
        else:
            coordinator.reset(key, start)
            out.append({"partition": p, "error_code": ErrorCode.none, "error_message": None})
    return out


def delete_states(coordinator: ShareCoordinator, topics: ShareTopics, group_id: str,
                  partitions: Sequence[tuple[str, int]]) -> list[StateResult]:
    """DeleteShareGroupState on a partition's leader: the state of each (topic key, partition) is deleted (NONE for
    one without state, as Kafka's share coordinator)."""
    out: list[StateResult] = []
    for topic_id, p in partitions:
        key = _state_key(topics, group_id, topic_id, p)
        if isinstance(key, dict):
            out.append(key)
        else:
            coordinator.drop(key)
            out.append({"partition": p, "error_code": ErrorCode.none, "error_message": None})
    return out


def state_summaries(coordinator: ShareCoordinator, topics: ShareTopics, group_id: str,
                    partitions: Sequence[tuple[str, int]]) -> list[StateResult]:
    """ReadShareGroupStateSummary on a partition's leader: each (topic key, partition)'s start offset and the records
    past it already acknowledged or archived (KIP-1226's delivery complete count); start offset -1 and count -1 for
    one without state (NONE, as Kafka's share coordinator)."""
    out: list[StateResult] = []
    for topic_id, p in partitions:
        key = _state_key(topics, group_id, topic_id, p)
        if isinstance(key, dict):
            out.append(key)
            continue
        summary = coordinator.summary(key)
        start, done = (-1, -1) if summary is None else summary
        out.append({"partition": p, "error_code": ErrorCode.none, "error_message": None, "state_epoch": 0,
                    "leader_epoch": 0, "start_offset": start, "delivery_complete_count": done})
    return out
