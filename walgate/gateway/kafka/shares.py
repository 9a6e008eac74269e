"""Share groups (KIP-932) on the coordinator lane: the share coordinator and its durable log.

The coordinator (:class:`~walgate.coordinator.share_coordinator.ShareCoordinator`, with the members of
:class:`~walgate.coordinator.share_group.ShareGroups`) and ``share_groups.log``
(:class:`~walgate.storage.share_state_log.ShareStateLog`) are plain synchronous objects touched only on the
coordinator lane (``walgate-coordinator``, beside the group and transaction coordinators: issue 23), so a slow
storage call never delays a ShareGroupHeartbeat, a ShareAcknowledge or a ShareFetch's acknowledgements. They read the
catalog (topics by id, partition counts, the groups' share configs) only through the topics snapshot the storage
lane publishes, and a partition's log only through what a ShareFetch round read for them on the storage lane first
(:mod:`.share_reads`, :meth:`ShareService.with_reads`; DescribeShareGroupOffsets' lags the same way): the coordinator lane never waits for the storage lane.

:meth:`ShareService.run` is the one way in: it first settles the writes of earlier calls
(undoing, when the disk refused them, every change not durable: :meth:`ShareCoordinator.refused`), removes members
whose session ended and releases expired locks, runs the call, then queues the share-partition states the call
changed as one write of the log under the node's group commit (the coordinator lane's notes): the lane goes on, the
write and its fsync run on a sync thread (one for every call queued meanwhile), and the call's answer waits for them
(:meth:`StorageThread.call`); when the disk refuses them :class:`~walgate.storage.errors.StorageUnavailable` is
raised (the handlers answer a retriable error) and the next call undoes the changes, so an acknowledgement a client
is told of survives ``kill -9``.

Topics are keyed by their topic id (as a string) in the coordinator and the log: a topic deleted and created again
is a new share-partition. Lock expiry and session timeouts are applied when a share request arrives and by a timer:
after every call one ``loop.call_later`` is armed at the coordinator's next expiry
(:meth:`ShareCoordinator.next_expiry`, on the engine's clock); when it fires, a tick runs an empty call (which
expires what is due and writes it; :mod:`.deadline_timer`: a tick that fails is logged in one line and tried
again). Whenever a call leaves records acquirable again in a share-partition (released, expired, their member or
session gone), the long-poll ShareFetches waiting on its topic-partition are woken (``wake``, the Fetch wake-ups),
so a worker that waits gets a killed worker's records when its lock or session ends without sending anything new.

In a replicated cluster (``persister`` given: :mod:`.share_persister`) the log is a
:class:`~walgate.storage.replicated_coordinator_log.PersistedShareStateLog`, whose rounds the persister writes to
the share groups' ``__consumer_offsets`` partitions (answered once their in-sync replicas hold them) instead of
``share_groups.log``, which is not read. A share-partition's state is read from there before its first use
(:meth:`ShareService.ensure_read`), and forgotten whenever this node begins or stops leading its data partition
(:meth:`ShareService.leadership`), to be read again at its next use.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from walgate.coordinator.group_configs import GroupTimeouts
from walgate.coordinator.share_coordinator import ReadWant, ShareCoordinator, ShareSettings
from walgate.coordinator.share_group import ShareGroups
from walgate.gateway.kafka.deadline_timer import DeadlineTimer
from walgate.gateway.kafka.share_reads import LogRead, LogReads, read_logs
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.clock import Clock
from walgate.storage.durability import Syncable
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound
from walgate.storage.lanes import VnodeKey
from walgate.storage.replicated_coordinator_log import PersistedShareStateLog
from walgate.storage.share_state_log import ShareStateLog
from walgate.storage.topics_snapshot import TopicsSnapshot

if TYPE_CHECKING:  # (it imports the broker, which imports this module)
    from walgate.gateway.kafka.share_persister import SharePersister

__all__ = ["ShareService", "now_ms"]

T = TypeVar("T")

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class _LaneLogs:
    """The coordinator's view of the logs (:class:`~walgate.coordinator.share_coordinator.ShareLogs`) on the
    coordinator lane: the groups' settings from the topics snapshot's group configs; watermarks only while an
    with_reads call runs (``reads``: what its round read on the storage lane), unknown (None) otherwise."""

    def __init__(self, engine: Engine, configs: GroupTimeouts, max_in_flight: int) -> None:
        self._engine = engine
        self._configs = configs
        self._max_in_flight = max_in_flight
        self.reads: LogReads | None = None

    def watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        """Raises :class:`~walgate.storage.errors.NotFound` (UNKNOWN_TOPIC_OR_PARTITION) for a topic deleted since
        or a partition it does not have."""
        if self.reads is not None:
            return self.reads.watermarks(topic, partition)
        topics = self._engine.topics()
        name = topics.topic_name(uuid.UUID(topic))
        if name is None or not topics.has_partition(name, partition):
            raise NotFound(f"topic id {topic} has no partition {partition}")
        return None

    def settings(self, group_id: str) -> ShareSettings:
        lock_ms, limit, reset, committed = self._configs.share(group_id)
        return ShareSettings(lock_ms, limit, reset, self._max_in_flight, committed)

    def stable(self, topic: str, partition: int) -> int:
        if self.reads is None:
            raise NotFound(f"the log of topic id {topic} partition {partition} was not read")
        return self.reads.stable(topic, partition)


class ShareService:
    """The share coordinator and its log behind the coordinator lane (see the module docstring)."""

    def __init__(self, engine: Engine, lane: StorageThread, storage: StorageThread, *, lock_ms: int,
                 delivery_limit: int, heartbeat_interval_ms: int, session_timeout_ms: int, max_in_flight: int = 2000,
                 lock_bounds: tuple[int, int] = (15_000, 60_000), delivery_bounds: tuple[int, int] = (2, 10),
                 wake: Callable[[str, int], None] | None = None, persister: SharePersister | None = None) -> None:
        """``lane``: the coordinator lane, where the coordinator and its log live; ``storage``: the storage lane,
        where a ShareFetch reads the logs; ``lock_ms``, ``delivery_limit``: the defaults of the groups' share
        configs, which ``lock_bounds`` and ``delivery_bounds`` bound (the broker's ``group.share.*`` settings);
        ``wake(topic, partition)`` (any thread): wake the fetches waiting on a topic-partition; ``persister``: a
        replicated cluster's (module docstring)."""
        self.lane = lane
        self.storage = storage
        self._wake = wake
        self._timer = DeadlineTimer("share group timer", self._tick, self.now_ms, log)
        self._next_ms: int | None = None  # the coordinator's next expiry, as the last call left it (coordinator lane)
        self._engine = engine
        self._clock: Clock | None = None  # the engine's, read on the coordinator lane at open
        self.configs = GroupTimeouts(0, 0, lambda group_id: engine.topics().group_configs(group_id), lock_ms,
                                     delivery_limit, lock_bounds, delivery_bounds)
        self._logs = _LaneLogs(engine, self.configs, max_in_flight)
        self.persister = persister
        self._forgetting: set[asyncio.Task[None]] = set()  # leadership changes being applied on the lane
        self.coordinator = ShareCoordinator(ShareGroups(heartbeat_interval_ms, session_timeout_ms), self._logs,
                                            persisted=persister is not None)
        self._log: ShareStateLog | None = None
        self._refusals = 0  # the log's refusals already undone
        # the share groups' ids as the last call left them, published by the coordinator lane for the event loop (a
        # consumer group's join checks the id space without waiting for the lane: group_types)
        self.group_ids: frozenset[str] = frozenset()

    async def open(self) -> list[Syncable]:
        """Replay ``share_groups.log`` (damage is reported, never fatal) into the coordinator, or, with a persister,
        make the log it writes; the log, whose group-commit syncs the coordinator lane takes (``GroupCommit.own``,
        with the persister's writer)."""
        def open_log() -> list[Syncable]:
            self._clock = self._engine.clock
            if self.persister is not None:
                self._log = PersistedShareStateLog(self._engine.store.coordinator_unsynced)
            else:
                self._log = self._engine.share_state_log()
                self.coordinator.load(self._log.states())
            self.group_ids = self.coordinator.group_ids()
            return [self._log]

        return await self.lane.call(open_log)

    def partitions(self, topic: str) -> int | None:
        """Partition count of topic ``topic`` (by name), None when there is none (the topics snapshot)."""
        return self._engine.topics().partition_count(topic)

    def now_ms(self) -> int:
        """The engine's clock, in ms (what expiry and the timer read; any thread, once open)."""
        assert self._clock is not None  # (open() comes before any call)
        return self._clock.time_ms()

    async def run(self, fn: Callable[[TopicsSnapshot, ShareCoordinator], T]) -> T:
        """``fn(topics, coordinator)`` on the coordinator lane, its changes durable before it returns (module doc);
        ``topics``: the snapshot the storage lane last published."""
        try:
            return await self.lane.call(self._call, fn)
        finally:
            self._arm()

    async def ensure_read(self, group_id: str, partitions: list[tuple[str, int]]) -> None:
        """With a persister, the durable state of the group's share-partitions of ``partitions`` (topic key,
        partition) not read yet, read into the coordinator (those that cannot be read now stay unread: they acquire
        nothing and are read at the next call)."""
        if self.persister is None:
            return
        coordinator = self.coordinator
        unread, forgotten = await self.lane.call(lambda: (coordinator.unread(group_id, partitions),
                                                          coordinator.forgotten))
        if unread:
            values = await self.persister.read(group_id, unread)
            if values:
                await self.lane.call(coordinator.states_read, values, forgotten)

    def leadership(self, key: VnodeKey, epoch: int | None) -> None:
        """The replica manager began (``epoch``) or stopped (None) leading vnode ``key``: with a persister, the
        share-partitions of the Kafka topic partition it holds are forgotten here (read again at their next use)."""
        if self.persister is None:
            return
        topics = self._engine.topics()
        for name in topics.names():
            found, tid = topics.topic(name), topics.topic_id(name)
            if found is not None and found.db == key[0] and tid is not None:
                task = asyncio.get_running_loop().create_task(self.lane.call(self.coordinator.forget, str(tid), key[1]),
                                                              name="walgate-share-forget")
                self._forgetting.add(task)
                task.add_done_callback(self._forgetting.discard)

    async def read(self, wants: list[ReadWant], committed: bool, max_bytes: int) -> dict[tuple[str, int], LogRead]:
        """What ``wants`` asks of the logs, read on the storage lane (:func:`.share_reads.read_logs`)."""
        return await self.storage.call(read_logs, self._engine, wants, committed, max_bytes)

    async def with_reads(self, reads: dict[tuple[str, int], LogRead], max_bytes: int,
                        fn: Callable[[TopicsSnapshot, ShareCoordinator, LogReads], T]) -> T:
        """``fn(topics, coordinator, logs)`` as :meth:`run` runs a call, the coordinator's watermarks those of
        ``reads`` meanwhile (``logs``: them, with an answer's byte budget of ``max_bytes``)."""
        def with_reads(topics: TopicsSnapshot, coordinator: ShareCoordinator) -> T:
            logs = self._logs.reads = LogReads(topics, reads, max_bytes)
            try:
                return fn(topics, coordinator, logs)
            finally:
                self._logs.reads = None

        return await self.run(with_reads)

    def _arm(self) -> None:
        """(Re)arm the timer at the coordinator's next expiry (event loop)."""
        if self._next_ms is None:
            self._timer.cancel()
        else:
            self._timer.arm(self._next_ms)

    async def _tick(self) -> None:
        await self.run(lambda topics, coordinator: None)

    def close(self) -> None:
        """Stop the timer (shutdown)."""
        self._timer.close()

    def _call(self, fn: Callable[[TopicsSnapshot, ShareCoordinator], T]) -> T:
        coordinator, slog = self.coordinator, self._log
        if slog is not None:
            coordinator.durable(slog.durable_to)
            if slog.refusals != self._refusals:  # every write not durable then was refused
                self._refusals = slog.refusals
                coordinator.refused()
        write = 0
        topics = self._engine.topics()
        try:
            coordinator.expire(self.now_ms(), topics.partition_count)
            result = fn(topics, coordinator)
            records = coordinator.take_records()
            if records and slog is not None:
                write = slog.write(records)
        except BaseException:
            coordinator.rollback()
            raise
        finally:
            self._next_ms = coordinator.next_expiry()
            self.group_ids = coordinator.group_ids()
            self._wake_released(topics)
        coordinator.written(write)
        return result

    def _wake_released(self, topics: TopicsSnapshot) -> None:
        """Wake the fetches waiting on the partitions where records became acquirable again."""
        released = self.coordinator.take_released()
        if self._wake is None:
            return
        for _, topic, partition in released:
            name = topics.topic_name(uuid.UUID(topic))
            if name is not None:
                self._wake(name, partition)
