"""Share groups (KIP-932) on the storage thread: the share coordinator and its durable log.

The coordinator (:class:`~walgate.coordinator.share_coordinator.ShareCoordinator`, with the members of
:class:`~walgate.coordinator.share_group.ShareGroups`) and ``share_groups.log``
(:class:`~walgate.storage.share_state_log.ShareStateLog`) are plain synchronous objects touched only on the storage
thread, like the engine. :meth:`ShareService.run` is the one way in: it first settles the writes of earlier calls
(undoing, when the disk refused them, every change not durable: :meth:`ShareCoordinator.refused`), removes members
whose session ended and releases expired locks, runs the call, then queues the share-partition states the call
changed as one write of the log under the node's group commit: the storage thread goes on, the write and its fsync
run on a sync thread (one for every call queued meanwhile), and the call's answer waits for them
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
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from walgate.coordinator.group_configs import GroupTimeouts
from walgate.coordinator.share_coordinator import ShareCoordinator, ShareSettings
from walgate.coordinator.share_group import ShareGroups
from walgate.gateway.kafka.deadline_timer import DeadlineTimer
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound
from walgate.storage.resource_configs import GROUP
from walgate.storage.share_state_log import SHARE_GROUPS_LOG, ShareStateLog

__all__ = ["ShareService", "now_ms"]

T = TypeVar("T")

log = logging.getLogger(__name__)



def now_ms() -> int:
    return int(time.time() * 1000)


class _EngineLogs:
    """The coordinator's view of the engine (:class:`~walgate.coordinator.share_coordinator.ShareLogs`): watermarks
    by topic id, the groups' settings from their stored configs. Storage thread only."""

    def __init__(self, engine: Engine, configs: GroupTimeouts, max_in_flight: int) -> None:
        self._engine = engine
        self._configs = configs
        self._max_in_flight = max_in_flight

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        """Raises :class:`~walgate.storage.errors.NotFound` (UNKNOWN_TOPIC_OR_PARTITION) for a topic deleted since
        or a partition it does not have."""
        engine = self._engine
        name = engine.topic_name(uuid.UUID(topic))
        if name is None or not 0 <= partition < engine.partition_count(name):
            raise NotFound(f"topic id {topic} has no partition {partition}")
        offsets = engine.partitions.offsets(name, partition)
        return offsets.log_start, offsets.high_watermark

    def settings(self, group_id: str) -> ShareSettings:
        lock_ms, limit, reset, committed = self._configs.share(group_id)
        return ShareSettings(lock_ms, limit, reset, self._max_in_flight, committed)

    def stable(self, topic: str, partition: int) -> int:
        name = self._engine.topic_name(uuid.UUID(topic))
        if name is None:
            raise NotFound(f"topic id {topic} is gone")
        return self._engine.partitions.offsets(name, partition).last_stable


class ShareService:
    """The share coordinator and its log behind the storage thread (see the module docstring)."""

    def __init__(self, engine: Engine, storage: StorageThread, *, lock_ms: int, delivery_limit: int,
                 heartbeat_interval_ms: int, session_timeout_ms: int, max_in_flight: int = 2000,
                 lock_bounds: tuple[int, int] = (15_000, 60_000), delivery_bounds: tuple[int, int] = (2, 10),
                 wake: Callable[[str, int], None] | None = None) -> None:
        """``lock_ms``, ``delivery_limit``: the defaults of the groups' share configs, which ``lock_bounds`` and
        ``delivery_bounds`` bound (the broker's ``group.share.*`` settings); ``wake(topic, partition)`` (storage
        thread): wake the fetches waiting on a topic-partition."""
        self.storage = storage
        self._wake = wake
        self._timer = DeadlineTimer("share group timer", self._tick, self.now_ms, log)
        self._next_ms: int | None = None  # the coordinator's next expiry, as the last call left it (storage thread)
        self._engine = engine
        self.configs = GroupTimeouts(0, 0, lambda group_id: engine.resource_configs(GROUP, group_id), lock_ms,
                                     delivery_limit, lock_bounds, delivery_bounds)
        self.coordinator = ShareCoordinator(ShareGroups(heartbeat_interval_ms, session_timeout_ms),
                                            _EngineLogs(engine, self.configs, max_in_flight))
        self._log: ShareStateLog | None = None
        self._refusals = 0  # the log's refusals already undone
        # the share groups' ids as the last call left them, published by the storage thread for the event loop (a
        # consumer group's join checks the id space without waiting for the storage thread: group_types)
        self.group_ids: frozenset[str] = frozenset()

    async def open(self) -> None:
        """Replay ``share_groups.log`` (damage is reported, never fatal) into the coordinator."""
        def open_log() -> None:
            engine = self._engine
            self._log = ShareStateLog.open(engine.data_dir / SHARE_GROUPS_LOG, engine.damage_log, engine.syncs,
                                           engine.store.unsynced)
            self.coordinator.load(self._log.states())
            self.group_ids = self.coordinator.group_ids()

        await self.storage.call(open_log)

    def partitions(self, topic: str) -> int | None:
        """Partition count of topic ``topic`` (by name), None when there is none (storage thread)."""
        engine = self._engine
        return engine.partition_count(topic) if topic in engine.catalog.topics else None

    def now_ms(self) -> int:
        """The engine's clock, in ms (what expiry and the timer read)."""
        return self._engine.clock.time_ms()

    async def run(self, fn: Callable[[Engine, ShareCoordinator], T]) -> T:
        """``fn(engine, coordinator)`` on the storage thread, its changes durable before it returns (module doc)."""
        try:
            return await self.storage.call(self._call, fn)
        finally:
            self._arm()

    def _arm(self) -> None:
        """(Re)arm the timer at the coordinator's next expiry (event loop)."""
        if self._next_ms is None:
            self._timer.cancel()
        else:
            self._timer.arm(self._next_ms)

    async def _tick(self) -> None:
        await self.run(lambda engine, coordinator: None)

    def close(self) -> None:
        """Stop the timer (shutdown)."""
        self._timer.close()

    def _call(self, fn: Callable[[Engine, ShareCoordinator], T]) -> T:
        coordinator, slog = self.coordinator, self._log
        if slog is not None:
            coordinator.durable(slog.durable_to)
            if slog.refusals != self._refusals:  # every write not durable then was refused
                self._refusals = slog.refusals
                coordinator.refused()
        write = 0
        try:
            coordinator.expire(self.now_ms(), self.partitions)
            result = fn(self._engine, coordinator)
            records = coordinator.take_records()
            if records and slog is not None:
                write = slog.write(records)
        except BaseException:
            coordinator.rollback()
            raise
        finally:
            self._next_ms = coordinator.next_expiry()
            self.group_ids = coordinator.group_ids()
            self._wake_released()
        coordinator.written(write)
        return result

    def _wake_released(self) -> None:
        """Wake the fetches waiting on the partitions where records became acquirable again."""
        released = self.coordinator.take_released()
        if self._wake is None:
            return
        for _, topic, partition in released:
            name = self._engine.topic_name(uuid.UUID(topic))
            if name is not None:
                self._wake(name, partition)
