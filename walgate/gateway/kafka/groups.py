"""The consumer-group coordinator wired to the event loop.

The coordinator (:class:`GroupCoordinator`: classic and KIP-848 groups) and the offset store it reads are
plain synchronous objects; like the engine they are only touched on the
storage thread, so group state and committed offsets never race. What lives
here is the asynchronous part:

* parked JoinGroup/SyncGroup requests: each gets a request id and a future;
  every coordinator call returns the completions it produced, which resolve
  those futures (possibly other connections' requests);
* the timer: after every call one ``loop.call_at`` is armed at the
  coordinator's ``next_deadline()``; when it fires, ``tick(now)`` runs on the
  storage thread and its completions are delivered the same way;
* a parked request whose connection goes away is forgotten (its future is
  dropped; the coordinator replaces it when the member retries, as Kafka does).

The clock is wall time in ms (commit timestamps are shown to users).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Callable, TypeVar

from walgate.coordinator.classic import Completion
from walgate.coordinator.coordinator import GroupCoordinator
from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import ConsumerRow, Engine

__all__ = ["GroupService", "now_ms"]

T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupService:
    def __init__(self, engine: Engine, storage: StorageThread, groups: GroupCoordinator | None = None) -> None:
        self.groups = groups or GroupCoordinator()
        self.store = EngineOffsetStore(engine)
        self.engine = engine
        self.storage = storage
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._timer: asyncio.TimerHandle | None = None
        engine.consumers_view = self._consumer_rows

    def topic_partitions(self, topic: str) -> int | None:
        """Partition count of *topic*, None if it does not exist (storage thread only)."""
        return self.engine.partition_count(topic) if topic in self.engine.catalog.topics else None

    def _consumer_rows(self) -> list[ConsumerRow]:
        """SHOW CONSUMERS' view of the coordinator (called by the engine, on the storage thread)."""
        return [
            ConsumerRow(c.group_id, c.member_id, c.client_id, c.client_host.lstrip("/"), c.state,
                        dict(c.assignment or {}), c.last_heartbeat_ms)
            for c in self.groups.consumers()
        ]

    async def run(self, fn: Callable[[], tuple[T, list[Completion]]]) -> T:
        """Run ``fn`` (a coordinator call returning (result, completions)) on the storage thread."""
        result, completions = await self.storage.call(fn)
        self._deliver(completions)
        await self._rearm()
        return result

    async def parked(self, call: Callable[[int], list[Completion]]) -> dict[str, Any]:
        """Run a JoinGroup/SyncGroup ``call(request_id)`` and wait for its response, however late."""
        rid = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            await self.run(lambda: (None, call(rid)))
            return await future
        finally:
            self._pending.pop(rid, None)

    def _deliver(self, completions: list[Completion]) -> None:
        for c in completions:
            future = self._pending.pop(c.request_id, None)
            if future is not None and not future.done():
                future.set_result(c.response)

    async def _rearm(self) -> None:
        deadline = await self.storage.call(self.groups.next_deadline)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is not None:
            loop = asyncio.get_running_loop()
            delay = max(deadline - now_ms(), 0) / 1000
            self._timer = loop.call_later(delay, lambda: loop.create_task(self._tick()))

    async def _tick(self) -> None:
        self._timer = None
        await self.run(lambda: (None, self.groups.tick(now_ms())))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
