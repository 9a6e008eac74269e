"""A lane: one thread that owns a part of the node's state (the storage engine's, or the coordinators').

The engine is synchronous and not thread-safe, and its calls may block on disk
I/O and fsync. Every engine call therefore goes through :meth:`StorageThread.call`,
which runs it on a single dedicated worker thread and awaits the result, so the
event loop never blocks and engine calls never overlap. Calls run in submission
order. Cancelling the awaiting task drops a call that is still queued; a call
that has started always runs to completion (engine calls are all-or-nothing).

The node runs two lanes (issue 23): ``walgate-storage`` (catalog, vnodes, topics) and ``walgate-coordinator`` (the
group and transaction coordinators and the coordinator log: committed offsets, group records, the transaction log),
so a slow storage call never delays an OffsetCommit or a Heartbeat. Each piece of state has one owner lane; the
storage lane may wait for the coordinator lane (:meth:`StorageThread.run_from_other_lane`, e.g. SHOW CONSUMERS), the
coordinator lane never waits for the storage lane (it reads the catalog only through the topics snapshot the storage
lane publishes), so the two never deadlock.

Group commit (:meth:`StorageThread.group_commit`, the gateway's): the engine's writes return before their fsync
and note what they need (:mod:`walgate.storage.durability`); at the end of every call, on the storage thread, those
notes are taken, and :meth:`StorageThread.call` returns only once they are durable (raising
:class:`~walgate.storage.errors.StorageUnavailable` when the fsync failed), so an answer is never sent before its
data is durable. The fsyncs themselves run elsewhere (:mod:`walgate.gateway.group_commit`): the storage thread
goes on with other calls (Fetch, Metadata, Heartbeat) meanwhile. A call that raises does not wait, but what it
wrote is still synced. A handler that answers parts of a request separately takes the notes itself
(``Engine.take_unsynced``) and waits for each part with :meth:`StorageThread.durable`.

Calls are submitted on the event loop only, so :attr:`StorageThread.queued`
(submitted, not yet started) is two plain counters, each written by one thread.
Every call that runs is reported to ``on_call(waited, ran)`` (seconds queued,
seconds running) on the storage thread: the gateway's metrics.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, Protocol, TypeVar

from walgate.storage.durability import Need

__all__ = ["Durability", "LaneBridge", "StorageThread"]

P = ParamSpec("P")
T = TypeVar("T")


class Durability(Protocol):
    """What makes noted needs durable (:class:`walgate.gateway.group_commit.GroupCommit`)."""

    async def wait(self, needs: list[Need]) -> None:
        """Return once every need is durable; StorageUnavailable when an fsync covering one failed."""

    def kick(self, needs: list[Need]) -> None:
        """Make them durable, waiting for nothing."""


def _no_needs() -> list[Need]:
    return []


class StorageThread:
    """A single-worker executor for one lane's calls (``name``: its thread's name)."""

    def __init__(self, on_call: Callable[[float, float], None] | None = None, name: str = "walgate-storage") -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._thread: int | None = None  # the lane thread's ident, once it ran a call
        self._on_call = on_call
        self._submitted = 0  # written on the event loop only
        self._posted = 0  # calls submitted from another lane (written on that lane's one thread only)
        self._started = 0  # written on the storage thread only
        self._dropped = 0  # cancelled before they started (event loop only)
        self._unsynced: Callable[[], list[Need]] = _no_needs  # called on the storage thread after each call
        self._durability: Durability | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def group_commit(self, unsynced: Callable[[], list[Need]], durability: Durability) -> None:
        """From now on every call returns once what it wrote is durable: ``unsynced()`` (on the storage thread, at
        the end of each call) says what that is, ``durability`` makes it so (call on the event loop)."""
        self._unsynced, self._durability = unsynced, durability
        self._loop = asyncio.get_running_loop()

    @property
    def queued(self) -> int:
        """Calls waiting for the storage thread (not counting the one running)."""
        return self._submitted + self._posted - self._started - self._dropped

    def on_lane(self) -> bool:
        """Whether the calling thread is this lane's."""
        return threading.get_ident() == self._thread

    def run_from_other_lane(self, fn: Callable[[], T]) -> tuple[T, list[Need]]:
        """From another lane's thread (the storage lane only: the one that may wait for this one): run ``fn`` on
        this lane, wait for it, and return its result with the needs it noted, which the caller must wait for before
        answering (it adds them to its own call's). On this lane itself, ``fn`` runs at once."""
        if self.on_lane():
            return fn(), []
        self._posted += 1
        return self._executor.submit(self._run, time.perf_counter(), fn).result()

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the storage thread and return its result (or raise its exception)."""
        self._submitted += 1
        submitted = self._executor.submit(self._run, time.perf_counter(), functools.partial(fn, *args, **kwargs))
        try:
            result, needs = await asyncio.wrap_future(submitted)
        except asyncio.CancelledError:
            if submitted.cancelled():  # dropped from the queue before it started (asyncio cancels it first)
                self._dropped += 1
            raise
        if needs:
            await self.durable(needs)
        return result

    async def durable(self, needs: list[Need]) -> None:
        """Return once ``needs`` (taken from ``Engine.take_unsynced`` in a call) are durable; StorageUnavailable when
        the fsync that covered one failed."""
        if needs:
            assert self._durability is not None  # (needs are only noted under group commit)
            await self._durability.wait(needs)

    def _run(self, submitted: float, fn: Callable[[], T]) -> tuple[T, list[Need]]:
        start = time.perf_counter()
        self._thread = threading.get_ident()
        self._started += 1
        try:
            result = fn()
        except BaseException:
            needs = self._unsynced()
            if needs and self._durability is not None and self._loop is not None:
                self._loop.call_soon_threadsafe(self._durability.kick, needs)
            raise
        finally:
            if self._on_call is not None:
                self._on_call(start - submitted, time.perf_counter() - start)
        return result, self._unsynced()

    def shutdown(self) -> None:
        """Wait for queued calls to finish and stop the thread."""
        self._executor.shutdown(wait=True)


class LaneBridge:
    """The storage lane's way to the coordinator lane (:class:`walgate.storage.lanes.CoordinatorLane`): ``run(fn)``
    waits for ``fn`` on ``lane``; the needs its writes noted are kept until :meth:`take_needs` (the storage lane's
    end-of-call taker), so the storage-lane call answers only once they are durable too."""

    separate = True

    def __init__(self, lane: StorageThread) -> None:
        self._lane = lane
        self._needs: list[Need] = []  # written on the storage lane only (the coordinator lane's own runs note none)

    def run(self, fn: Callable[[], T]) -> T:
        result, needs = self._lane.run_from_other_lane(fn)
        self._needs += needs
        return result

    def take_needs(self) -> list[Need]:
        needs, self._needs = self._needs, []
        return needs
