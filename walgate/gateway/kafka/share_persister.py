"""A replicated cluster's share-partition states kept by the share coordinator (KIP-932's persister and share
coordinator; docs/cluster.md "Share groups", docs/plans/replication-wiring.md step 7 increment 6).

With ``replication.enable`` a share-partition's durable state is not the leader's ``share_groups.log`` but a record
``["s", group, topic key, partition]`` of the group's own ``__consumer_offsets`` partition ``hash(group) % N``
(:mod:`walgate.storage.coordinator_records`), kept by that partition's leader, the group's coordinator: so one node
holds a group's membership and all its state, and a share-partition's state survives its leader's loss. (Kafka keys
``__share_group_state`` by ``hash(group:topicId:partition)`` to spread one group's share-partitions over its own
topic's partitions; walgate shares N and placement between its coordinators, as for transactions.)

* **Writes** (:meth:`SharePersister.write_round`): the share service's log is a
  :class:`~walgate.storage.replicated_coordinator_log.PersistedShareStateLog`; each group-commit round of it (the
  states every call queued meanwhile) is written here, each state recorded with the leader epoch this node leads
  its data partition in (:mod:`walgate.coordinator.share_state_batches`; a round holding a share-partition whose
  partition this node no longer leads fails whole), grouped by coordinator partition, all partitions at once: appended locally (:func:`write_states` on the coordinator lane, answered once the partition's in-sync
  replicas hold it) when this node leads that partition, else sent to its leader as WriteShareGroupState v0 (api
  85) over the node links, which answers the same way. NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE, CLUSTER_AUTHORIZATION_FAILED (the other node has not read the cluster's node token yet)
  and an unreachable node are tried again (:data:`RETRY_S` apart) for up to
  :data:`WRITE_S`; then, or for any other error (FENCED_LEADER_EPOCH: this node's leadership is older than the
  state's writer's), the round fails: the share coordinator undoes every change not durable and the client is
  answered a retriable error. A round written to some partitions and not others is refused whole (what was written
  stays: a later write of the same share-partition replaces it).
* **Reads** (:meth:`SharePersister.read`): a share-partition's state is read before its first use here
  (:meth:`ShareService.ensure_read <walgate.gateway.kafka.shares.ShareService.ensure_read>`), locally or with
  ReadShareGroupState v0 (api 84) from the coordinator partition's leader, with the data partition's leader epoch
  now, which the share coordinator records with the state (the previous leader's writes are fenced from then on);
  a share-partition whose read fails is left unread (it is read again at the next request, and acquires nothing
  meanwhile).
* **Answering** (:func:`write_states`, :func:`read_states`): on the coordinator lane, against the partition's
  :class:`~walgate.storage.replicated_coordinator_log.ReplicatedShareStateLog`; the handlers of api 84 and 85
  (:func:`walgate.gateway.kafka.share_state.answer_persisted`) answer only a cluster node (ClusterAction),
  NOT_COORDINATOR for a group whose partition this node does not lead, COORDINATOR_LOAD_IN_PROGRESS while it loads
  it.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from kio.schema.read_share_group_state.v0.request import PartitionData as ReadPartition
from kio.schema.read_share_group_state.v0.request import ReadShareGroupStateRequest, ReadStateData
from kio.schema.read_share_group_state.v0.response import ReadShareGroupStateResponse
from kio.schema.write_share_group_state.v0.request import PartitionData as WritePartition
from kio.schema.write_share_group_state.v0.request import StateBatch, WriteShareGroupStateRequest, WriteStateData
from kio.schema.write_share_group_state.v0.response import WriteShareGroupStateResponse
from kio.static.primitive import i8, i16, i32, i64

from walgate.coordinator.share_state_batches import epoch_of, fenced, from_wire, to_wire, with_epoch
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.group_coordinators import refusal
from walgate.gateway.kafka.node_links import NodeUnreachable
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.coordinator_partitions import partition_for
from walgate.storage.durability import Sync
from walgate.storage.errors import StorageError
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog, ShareStateSync
from walgate.storage.share_state_log import ShareKey
from walgate.wire.errors import ErrorCode

__all__ = ["RETRY_S", "SharePersister", "StateRead", "WRITE_S", "read_states", "write_states"]

log = logging.getLogger("walgate.share_groups")

WRITE_S: Final = 10.0
"""The longest a round (or a read) is tried before it fails."""

RETRY_S: Final = 0.2
"""Between two tries of a write or read refused with a retriable error."""

RETRIABLE: Final = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                              ErrorCode.coordinator_not_available,
                              ErrorCode.cluster_authorization_failed})  # (the other node has not read the node token)

Write = tuple[ShareKey, Any, int]
"""(share-partition, durable value or None: deleted, leader epoch of its data partition)."""


def write_states(shares: ReplicatedShareStateLog, writes: Sequence[Write]) -> dict[ShareKey, int]:
    """On the coordinator lane: ``writes`` queued as one write of ``shares`` (the lane's call returns once the
    partition's in-sync replicas hold it, or raises StorageUnavailable); the error of each write refused instead
    (FENCED_LEADER_EPOCH: its leader epoch is older than the newest state's written, queued ones included)."""
    refused: dict[ShareKey, int] = {key: ErrorCode.fenced_leader_epoch for key, _, epoch in writes
                                    if fenced(shares.latest(key), epoch)}
    shares.write([(key, with_epoch(value, epoch)) for key, value, epoch in writes if key not in refused])
    return refused


class StateRead(NamedTuple):
    """A share-partition's stored value (None: no state), or why it was not read."""

    value: Any
    error: int = ErrorCode.none


def read_states(shares: ReplicatedShareStateLog, reads: Sequence[tuple[ShareKey, int]]) -> dict[ShareKey, StateRead]:
    """On the coordinator lane: each share-partition's newest state, read by the leader of the leader epoch given
    with it: FENCED_LEADER_EPOCH for an epoch older than the state's; a newer one is recorded with the state (one
    write: the lane's call returns once the in-sync replicas hold it, or raises StorageUnavailable), so that the
    previous leader's writes are refused from then on, as Kafka's share coordinator records a read's epoch; -1 (a
    node reading a share-partition it does not lead: the administration's) reads without either. A state queued
    and not durable yet is written again with the read, so that it is answered only once durable."""
    states = shares.states()
    out: dict[ShareKey, StateRead] = {}
    again = []
    for key, epoch in reads:
        newest = shares.latest(key)
        if epoch >= 0 and fenced(newest, epoch):
            out[key] = StateRead(None, ErrorCode.fenced_leader_epoch)
            continue
        out[key] = StateRead(newest)
        if newest is not states.get(key) or (newest is not None and epoch > epoch_of(newest)):
            again.append((key, with_epoch(newest, max(epoch, epoch_of(newest)))))
    shares.write(again)
    return out


class SharePersister:
    """This node's share-partition leaders' persister (module docstring); on the event loop."""

    def __init__(self, broker: Broker, coordinator: StorageThread, partitions: int) -> None:
        self._broker = broker
        self._coordinator = coordinator
        self.partitions = partitions

    def _leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch this node leads the data partition of topic key ``topic`` in now: 0 for a one-copy one
        (never moves), -1 when its partition state names another leader or none (nothing of it is written; it is
        read without fencing anyone: :func:`read_states`)."""
        topics = self._broker.topics()
        name = topics.topic_name(uuid.UUID(topic))
        vgroup = None if name is None else topics.replicated_vgroup(name, partition)
        if vgroup is None:
            return 0
        led = self._broker.led
        state = None if led is None else led.state_of(*vgroup)
        return state.leader_epoch if state is not None and state.leader == self._broker.node_id else -1

    async def write_round(self, sync: Sync) -> None:
        """Write a :class:`ShareStateSync` round (GroupCommit's writer); its ``error`` set when it failed."""
        assert isinstance(sync, ShareStateSync)
        by_partition: dict[int, dict[str, list[Write]]] = {}
        for key, value in sync.records:
            epoch = self._leader_epoch(key[1], key[2])
            if epoch < 0:  # its leadership moved since: nothing of the round is written
                sync.error = OSError(errno.EAGAIN, f"{key}: this node does not lead its partition now")
                return
            writes = by_partition.setdefault(partition_for(key[0], self.partitions), {}).setdefault(key[0], [])
            writes.append((key, value, epoch))
        failures = [f for f in await asyncio.gather(*(
            self._write_group(group, writes) for groups in by_partition.values() for group, writes in groups.items()
        )) if f is not None]
        if failures:
            log.warning("share-partition states not persisted: %s", "; ".join(failures))
            sync.error = OSError(errno.EAGAIN, failures[0])

    async def _write_group(self, group_id: str, writes: list[Write]) -> str | None:
        """``writes`` of ``group_id`` persisted, tried again while retriable; None, or why they were not."""
        deadline = time.monotonic() + WRITE_S
        while True:
            code, why = await self._try(group_id, lambda owner: self._write_at(owner, group_id, writes))
            if code == ErrorCode.none:
                return None
            if code not in RETRIABLE or time.monotonic() + RETRY_S > deadline:
                return f"group {group_id!r}: {ErrorCode(code).name}: {why}"
            await asyncio.sleep(RETRY_S)

    async def read(self, group_id: str, keys: Sequence[ShareKey]) -> dict[ShareKey, Any]:
        """The durable value (None: no state) of each of ``keys`` (of ``group_id``) that could be read within
        :data:`WRITE_S`; those that could not are left out."""
        deadline = time.monotonic() + WRITE_S
        got: dict[ShareKey, Any] = {}

        async def at(owner: int) -> tuple[int, str | None]:
            code, why, values = await self._read_at(owner, group_id, keys)
            got.update(values)
            if values:
                log.info("share group %r: the state of %d share-partition(s) read from node %d (%d kept there)",
                         group_id, len(values), owner, sum(v is not None for v in values.values()))
            return code, why

        while True:
            code, why = await self._try(group_id, at)
            if code == ErrorCode.none or code not in RETRIABLE or time.monotonic() + RETRY_S > deadline:
                if code != ErrorCode.none:
                    log.warning("share-partition states of group %r not read: %s: %s", group_id,
                                ErrorCode(code).name, why)
                return got
            await asyncio.sleep(RETRY_S)

    async def _try(self, group_id: str, at: Callable[[int], Any]) -> tuple[int, str | None]:
        """``at(owner)`` with the node coordinating ``group_id`` now; COORDINATOR_NOT_AVAILABLE without one."""
        coordinators = self._broker.coordinators
        if coordinators is None:  # (a cluster node always has them)
            return ErrorCode.coordinator_not_available, "no group coordinators"
        try:
            owner = await coordinators.owner(group_id)
        except Exception as e:  # noqa: BLE001 - the placement not readable now: retried
            return ErrorCode.coordinator_not_available, str(e)
        if owner < 0:
            return ErrorCode.coordinator_not_available, "no leader of its coordinator partition"
        try:
            result: tuple[int, str | None] = await at(owner)
        except NodeUnreachable as e:
            return ErrorCode.coordinator_not_available, str(e)
        return result

    async def _local(self, group_id: str, fn: Callable[[ReplicatedShareStateLog], Any]) -> tuple[int, str | None, Any]:
        """``fn(log)`` on the coordinator lane with ``group_id``'s partition's share states, when this node leads
        it and has it loaded: (error, message, its result)."""
        code = await refusal(self._broker.coordinators, group_id)
        replicas = None if self._broker.coordinators is None else self._broker.coordinators.replicated
        shares = None if replicas is None else replicas.share_log(partition_for(group_id, self.partitions))
        if code != ErrorCode.none or shares is None:
            return code or ErrorCode.coordinator_load_in_progress, "not loaded here", None
        try:
            return ErrorCode.none, None, await self._coordinator.call(fn, shares)
        except StorageError as e:  # not taken by the in-sync replicas (or no longer led here): tried again
            return ErrorCode.coordinator_not_available, e.message, None

    async def _write_at(self, owner: int, group_id: str, writes: list[Write]) -> tuple[int, str | None]:
        if owner == self._broker.node_id:
            code, why, refused = await self._local(group_id, lambda shares: write_states(shares, writes))
            if code == ErrorCode.none and refused:
                code, why = next(iter(refused.values())), f"refused for {sorted(refused)}"
            return code, why
        links = self._broker.links
        if links is None:
            return ErrorCode.coordinator_not_available, "no links to other nodes"
        by_topic: dict[str, list[WritePartition]] = {}
        for (_, topic, partition), value, epoch in writes:
            start, batches = to_wire(value)
            by_topic.setdefault(topic, []).append(WritePartition(
                partition=i32(partition), state_epoch=i32(0), leader_epoch=i32(epoch), start_offset=i64(start),
                state_batches=tuple(StateBatch(first_offset=i64(b.first), last_offset=i64(b.last),
                                               delivery_state=i8(b.state), delivery_count=i16(b.delivery_count))
                                    for b in batches)))
        answer: WriteShareGroupStateResponse = await links.call(owner, WriteShareGroupStateRequest(
            group_id=group_id, topics=tuple(WriteStateData(topic_id=uuid.UUID(t), partitions=tuple(ps))
                                            for t, ps in by_topic.items())))
        errors = [(int(p.error_code), p.error_message) for r in answer.results for p in r.partitions
                  if p.error_code != ErrorCode.none]
        answered = sum(len(r.partitions) for r in answer.results)
        if not errors and answered != len(writes):
            return ErrorCode.unknown_server_error, f"node {owner} answered {answered} of {len(writes)} partitions"
        return errors[0] if errors else (ErrorCode.none, None)

    async def _read_at(self, owner: int, group_id: str,
                       keys: Sequence[ShareKey]) -> tuple[int, str | None, Mapping[ShareKey, Any]]:
        if owner == self._broker.node_id:
            reads = [(key, self._leader_epoch(key[1], key[2])) for key in keys]
            code, why, found = await self._local(group_id, lambda shares: read_states(shares, reads))
            failed = [(k, r.error) for k, r in (found or {}).items() if r.error != ErrorCode.none]
            if failed:
                code, why = failed[0][1], f"refused for {sorted(k for k, _ in failed)}"
            return code, why, {k: r.value for k, r in (found or {}).items() if r.error == ErrorCode.none}
        links = self._broker.links
        if links is None:
            return ErrorCode.coordinator_not_available, "no links to other nodes", {}
        by_topic: dict[str, list[int]] = {}
        for _, topic, partition in keys:
            by_topic.setdefault(topic, []).append(partition)
        answer: ReadShareGroupStateResponse = await links.call(owner, ReadShareGroupStateRequest(
            group_id=group_id, topics=tuple(ReadStateData(topic_id=uuid.UUID(t), partitions=tuple(
                ReadPartition(partition=i32(p), leader_epoch=i32(self._leader_epoch(t, p))) for p in ps))
                for t, ps in by_topic.items())))
        values: dict[ShareKey, Any] = {}
        error: tuple[int, str | None] = (ErrorCode.none, None)
        for r in answer.results:
            for p in r.partitions:
                key = (group_id, str(r.topic_id), int(p.partition))
                if key not in keys:
                    continue
                if p.error_code != ErrorCode.none:
                    error = (int(p.error_code), p.error_message)
                    continue
                try:
                    values[key] = from_wire(int(p.start_offset), [
                        (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches])
                except ValueError as e:
                    error = (ErrorCode.unknown_server_error, f"node {owner}: {e}")
        return error[0], error[1], values

