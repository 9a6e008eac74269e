"""The consumer-group coordinator wired to the event loop.

The coordinator (:class:`GroupCoordinator`: classic and KIP-848 groups) and the offset store it reads are
plain synchronous objects; they are only touched on the coordinator lane (``walgate-coordinator``,
:mod:`walgate.gateway.storage_thread`), so group state and committed offsets never race, and a slow storage-lane
call never delays an OffsetCommit, a Heartbeat or a JoinGroup. The store (the coordinator's view of the engine:
the coordinator log, and the topics snapshot the storage lane publishes) is private: :meth:`GroupService.with_store`
and :meth:`GroupService.join` hand it only to functions run on the coordinator lane, so no handler can read the
engine from the event loop. What lives here is the asynchronous part:

* parked JoinGroup/SyncGroup requests: each gets a request id and a future;
  every coordinator call returns the completions it produced, which resolve
  those futures (possibly other connections' requests);
* the timer: after every call one ``loop.call_later`` is armed at the
  coordinator's ``next_deadline()``; when it fires, a tick task (kept, so it
  cannot be lost) runs ``tick(now)`` on the coordinator lane and its completions
  are delivered the same way (:mod:`.deadline_timer`: a tick that raises is
  logged in one line and tried again, group timers never stop silently).
  Ticks also run the coordinator's cleanup of empty groups, told which groups
  have committed offsets;
* a parked request whose connection goes away is forgotten (its future is
  dropped; the coordinator replaces it when the member retries, as Kafka does);
* group records (:mod:`walgate.coordinator.group_records`): after every
  coordinator call, still on the coordinator lane, the records it produced are
  written and fsynced (:meth:`walgate.storage.engine.Engine.write_group_records`)
  before any response of the call is delivered, so a group state a client is
  told survives ``kill -9``. When the disk refuses them, the call raises
  :class:`~walgate.coordinator.errors.GroupNotRecorded` (COORDINATOR_NOT_AVAILABLE:
  clients find the coordinator again and retry) and the parked requests it
  answered get that error instead; the coordinator takes the records again on
  its next call. :meth:`GroupService.load` rebuilds the groups at start.

The clock is wall time in ms (commit timestamps are shown to users).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

from walgate.coordinator.classic import Completion
from walgate.coordinator.coordinator import GroupCoordinator
from walgate.coordinator.errors import GroupNotRecorded, NotCoordinatorNow
from walgate.coordinator.store import EngineOffsetStore
from walgate.gateway.kafka.deadline_timer import DeadlineTimer
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.lanes import INLINE, CoordinatorLane
from walgate.storage.observers import ConsumerRow

__all__ = ["GroupService", "GroupMembers", "consumer_rows", "now_ms"]

log = logging.getLogger("walgate.groups")

T = TypeVar("T")



def now_ms() -> int:
    return int(time.time() * 1000)


class GroupMembers:
    """The consumer-group members SHOW CONSUMERS / SUBSCRIPTIONS list: the engine's
    :class:`~walgate.storage.observers.ConsumersView`, created before the engine is opened and filled by the
    :class:`GroupService` whose coordinator knows the members (none until then). Asked on the storage lane, read on
    the coordinator lane (which the storage lane waits for)."""

    def __init__(self) -> None:
        self._groups: GroupCoordinator | None = None
        self._lane: CoordinatorLane = INLINE

    def follow(self, groups: GroupCoordinator, lane: CoordinatorLane) -> None:
        self._groups, self._lane = groups, lane

    def consumers(self) -> list[ConsumerRow]:
        groups = self._groups
        if groups is None:
            return []
        return self._lane.run(lambda: consumer_rows(groups))


def consumer_rows(groups: GroupCoordinator) -> list[ConsumerRow]:
    """Every member of ``groups`` as SHOW CONSUMERS / SUBSCRIPTIONS list it (coordinator lane)."""
    return [ConsumerRow(c.group_id, c.member_id, c.client_id, c.client_host.lstrip("/"), c.state,
                        dict(c.assignment or {}), c.last_heartbeat_ms) for c in groups.consumers()]


class GroupService:
    def __init__(
        self, engine: Engine, lane: StorageThread, groups: GroupCoordinator | None = None,
        members: GroupMembers | None = None, bridge: CoordinatorLane = INLINE,
    ) -> None:
        """``lane``: the coordinator lane every coordinator call runs on; ``members``: the consumers view the engine
        was opened with, which this service's coordinator fills (read through ``bridge``, the storage lane's way to
        ``lane``)."""
        self.groups = groups or GroupCoordinator()
        self._store = EngineOffsetStore(engine)  # the engine is reachable only through it, on the coordinator lane
        self._records = engine  # its group records, written and read only on the coordinator lane
        self.lane = lane
        self._ids = itertools.count(1)
        self._pending: dict[Hashable, asyncio.Future[dict[str, Any]]] = {}
        self._parked_groups: dict[Hashable, str] = {}  # request id -> the group of a parked request
        self._timer = DeadlineTimer("group timer", self._tick, lambda: now_ms(), log)  # the module clock, read late
        if members is not None:
            members.follow(self.groups, bridge)

    async def load(self) -> None:
        """Rebuild the recorded groups (at start, before any request); a record that does not rebuild is logged,
        its group's members rejoin."""
        def load() -> tuple[int, list[tuple[str, str]]]:
            values = self._records.group_records()
            return len(values), self.groups.load(values, now_ms())

        count, failed = await self.lane.call(load)
        for group_id, reason in failed:
            log.error("group %r: its recorded state does not load (%s); its members rejoin", group_id, reason)
        if count:
            log.info("loaded %d recorded group(s)", count - len(failed))
        await self._rearm()

    def _call(self, fn: Callable[[], tuple[T, list[Completion]]], taken: list[Any]
              ) -> tuple[T, list[Completion], Exception | None]:
        """``fn()`` then the writing of the group records it produced (on the coordinator lane); the error that
        refused them, if any. What it took is put in ``taken`` too (the records, and what the call answers): a
        replicated coordinator's records are only queued here, and refused when the lane call waits for them."""
        result, completions = fn()
        records = self.groups.take_records()
        if records:
            try:
                self._records.write_group_records(records)
            except Exception as exc:  # noqa: BLE001 - the records are taken again by the next call
                return result, completions, exc
            self.groups.records_written(records)
        taken.append((result, completions, records))
        return result, completions, None

    async def run(self, fn: Callable[[], tuple[T, list[Completion]]]) -> T:
        """Run ``fn`` (a coordinator call returning (result, completions)) on the coordinator lane; its responses are
        delivered once the group records it produced are durable (else GroupNotRecorded, see the module docstring;
        records a replicated coordinator queued and the in-sync replicas did not take are taken again by the next
        call).

        A timer already due runs first: a request handled after a deadline (a starved event loop may read it before
        the timer's callback runs) sees the members whose sessions ended by then expired, as Kafka's coordinator,
        whose timer fires on a thread of its own, shows them."""
        await self._timer.run_if_due()
        taken: list[tuple[T, list[Completion], list[tuple[str, Any]]]] = []
        try:
            result, completions, error = await self.lane.call(functools.partial(self._call, fn, taken))
        except StorageUnavailable as exc:  # group commit refused what the call queued
            if not taken or not taken[0][2]:
                raise
            result, completions, records = taken[0]
            await self.lane.call(self.groups.records_unwritten, records)
            error = exc
        if error is not None:
            log.error("group state could not be written (%s: %s); the requests that changed it get "
                      "COORDINATOR_NOT_AVAILABLE", type(error).__name__, error)
            completions = [Completion(c.request_id, {**c.response, "error_code": GroupNotRecorded.error_code})
                           for c in completions]
        self._deliver(completions)
        await self._rearm()
        if error is not None:
            raise GroupNotRecorded(str(error)) from error
        return result

    async def with_store(self, fn: Callable[[EngineOffsetStore], tuple[T, list[Completion]]]) -> T:
        """A coordinator call that reads or writes committed offsets or partition counts: ``fn(store)`` on the
        coordinator lane."""
        return await self.run(functools.partial(fn, self._store))

    async def join(self, **kwargs: Any) -> dict[str, Any]:
        """JoinGroup (``GroupCoordinator.join``'s arguments but the request id and partition counts), parked."""
        return await self.parked(lambda rid: self.groups.join(rid, topic_partitions=self._store.topic_partitions,
                                                              **kwargs), kwargs["group_id"])

    async def parked(self, call: Callable[[int], list[Completion]], group_id: str) -> dict[str, Any]:
        """Run a JoinGroup/SyncGroup of ``group_id``, ``call(request_id)``, and wait for its response, however late
        (NotCoordinatorNow when this node stops coordinating the group meanwhile: :meth:`unload_groups`)."""
        rid = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        self._parked_groups[rid] = group_id
        try:
            await self.run(lambda: (None, call(rid)))
            return await future
        finally:
            self._pending.pop(rid, None)
            self._parked_groups.pop(rid, None)

    async def load_groups(self, values: Mapping[str, Any]) -> None:
        """Rebuild the groups of their recorded ``values`` (group id -> value): the groups of a coordinator
        partition this node began to lead (replicated coordinators, :mod:`.coordinator_replicas`); a record that
        does not rebuild is logged, its group's members rejoin."""
        failed = await self.lane.call(lambda: self.groups.load(values, now_ms()))
        for group_id, reason in failed:
            log.error("group %r: its recorded state does not load (%s); its members rejoin", group_id, reason)
        await self._rearm()

    async def unload_groups(self, mine: Callable[[str], bool]) -> None:
        """Forget every group ``mine`` takes (their coordinator partition is led by another node now) and answer
        their parked requests NOT_COORDINATOR (Kafka's ``onGroupUnloaded``)."""
        def unload() -> set[str]:
            known = set(self.groups.classic.group_ids()) | set(self.groups.consumer.group_ids())
            gone = {g for g in known | set(self.groups.recorded()) if mine(g)}
            self.groups.unload(gone)
            return gone

        gone = await self.lane.call(unload)
        for rid, group_id in list(self._parked_groups.items()):
            future = self._pending.get(rid)
            if group_id in gone and future is not None and not future.done():
                future.set_exception(NotCoordinatorNow(f"this node no longer coordinates group {group_id}"))
        await self._rearm()

    def _deliver(self, completions: list[Completion]) -> None:
        for c in completions:
            future = self._pending.pop(c.request_id, None)
            if future is not None and not future.done():
                future.set_result(c.response)

    async def _rearm(self) -> None:
        deadline = await self.lane.call(self.groups.next_deadline)
        self._timer.arm(deadline)

    async def _tick(self) -> None:
        await self.run(lambda: (None, self.groups.tick(now_ms(), offset_groups=self._store.groups_with_offsets)))

    def close(self) -> None:
        self._timer.close()
