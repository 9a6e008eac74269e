"""A lane: the threads that own a part of the node's state (the storage engine's, or the coordinators').

The engine is synchronous and its calls may block on disk I/O and fsync. Every engine call therefore goes through a
lane's :meth:`StorageThread.call` or :meth:`StorageThread.call_on`, which runs it on the lane's threads and awaits
the result, so the event loop never blocks. Cancelling the awaiting task drops a call that is still queued; a call
that has started always runs to completion (engine calls are all-or-nothing).

Two kinds of calls (issue 23, per-vnode lanes; :mod:`walgate.storage.lanes` states what each may touch):

* **exclusive** (:meth:`StorageThread.call`): the whole lane, on its one thread; it runs alone, after every call
  submitted before it, and everything submitted after it waits for it (but see below). Catalog changes (DDL, topic
  creation and deletion), background steps (retention, the cleaner, the WAL sync task), SQL statements and every
  request not named below are exclusive.
* **keyed** (:meth:`StorageThread.call_on`): the call holds only the vnodes ``keys`` names, ``(database, vgroup)``,
  and runs on a pool of ``vnode_threads`` threads beside keyed calls holding other vnodes: Produce, Fetch and
  ListOffsets of Kafka-native partitions, Metadata (no vnode: it reads the catalog only), a write body planned in an
  ingest worker (every vnode of its databases), a WAL's group-commit round (its vnode). Two calls sharing a vnode
  run in submission order; the vnodes of one call are taken together at submission (one queue, no lock held while
  waiting for another), so calls on {0,1} and {1,0} never deadlock.

The dispatcher runs on the event loop (:meth:`StorageThread._dispatch`): a pending call starts once nothing running
or submitted before it conflicts with it (an exclusive call conflicts with every call). One exception keeps a long
keyed call (a large write) from stalling every other vnode behind an exclusive call queued after it: while an
exclusive call still waits for a keyed call that was running when it came, later keyed calls on free vnodes start
meanwhile (it would wait that long anyway); once those older calls ended no later call passes it, so it is never
starved. A background step (``call_on(..., background=True)``: the log cleaner's) never passes an exclusive call:
it starts only when none is pending before it, so every exclusive call submitted while it runs waits for it and lets
later keyed calls on other vnodes pass meanwhile; a slow step (a slow disk) thus delays no other vnode's calls,
which a passer's could (an exclusive call it passed waits for it, and everything after waits for that call). A
keyed call whose keys no longer cover what it must touch (the catalog moved since they were computed) raises
:class:`~walgate.storage.lanes.Relane` before changing anything and runs again, exclusive, at the end of the queue.

The node runs two lanes: ``walgate-storage`` (catalog, vnodes, topics; exclusive calls on ``walgate-storage``, keyed
ones on ``walgate-storage-vnode`` threads) and ``walgate-coordinator`` (the group and transaction coordinators and
the coordinator log: committed offsets, group records; exclusive calls only), so a slow storage call never delays an
OffsetCommit or a Heartbeat. Each piece of state has one owner lane; the storage lane's exclusive calls may wait for
the coordinator lane (:meth:`StorageThread.run_from_other_lane`, e.g. SHOW CONSUMERS), the coordinator lane never
waits for the storage lane (it reads the catalog only through the topics snapshot the storage lane publishes), so
the two never deadlock.

Group commit (:meth:`StorageThread.group_commit`, the gateway's): the engine's writes return before their fsync
and note what they need (:mod:`walgate.storage.durability`); at the end of every call, on the thread that ran it, those
notes (that thread's own) are taken, and :meth:`StorageThread.call` returns only once they are durable (raising
:class:`~walgate.storage.errors.StorageUnavailable` when the fsync failed), so an answer is never sent before its
data is durable. The fsyncs themselves run elsewhere (:mod:`walgate.gateway.group_commit`): the storage thread
goes on with other calls (Fetch, Metadata, Heartbeat) meanwhile. A call that raises does not wait, but what it
wrote is still synced. A handler that answers parts of a request separately takes the notes itself
(``Engine.take_unsynced``) and waits for each part with :meth:`StorageThread.durable`.

Each call runs in a copy of its caller's :mod:`contextvars` context, taken when it is submitted: what the engine
notes for its caller there reaches it (:mod:`walgate.storage.led_appends`: the appends an acks=all write waits for).

Calls are submitted and dispatched on the event loop only (but for :meth:`StorageThread.run_from_other_lane`'s), so
the queue is plain state of the loop. Every call that runs is reported to ``on_call(waited, ran)`` (seconds queued,
seconds running) on the thread that ran it: the gateway's metrics (thread-safe).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

from walgate.storage.durability import Need
from walgate.storage.lanes import Relane, VnodeKey, holding

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


@dataclass(eq=False)
class _Call:
    """A submitted call: ``keys`` the vnodes it holds (None: the whole lane, exclusive)."""

    keys: frozenset[VnodeKey] | None
    fn: Callable[[], Any]
    submitted: float
    future: asyncio.Future[tuple[Any, list[Need]]]
    started: bool = False
    # an exclusive call: the calls that ran when it was submitted; while one of them still runs, later keyed calls
    # that conflict with nothing may start before it (it waits for those anyway), after that none may
    before: frozenset[_Call] = frozenset()
    background: bool = False  # a keyed call that never starts before a pending exclusive call (the module docstring)


class StorageThread:
    """One lane's calls (``name``: its threads' names): exclusive ones on one thread, and, with ``vnode_threads``,
    calls holding vnodes (:meth:`call_on`) on a pool of their own (see the module docstring)."""

    def __init__(self, on_call: Callable[[float, float], None] | None = None, name: str = "walgate-storage",
                 vnode_threads: int = 0) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._vnodes = (ThreadPoolExecutor(max_workers=vnode_threads, thread_name_prefix=f"{name}-vnode")
                        if vnode_threads else None)
        self._thread: int | None = None  # the exclusive thread's ident, once it ran a call
        self._on_call = on_call
        self._pending: list[_Call] = []  # submitted, not started, in submission order (event loop only)
        self._running: set[_Call] = set()  # event loop only
        self._running_keys: set[VnodeKey] = set()  # the vnodes the running keyed calls hold (event loop only)
        self._exclusive = False  # an exclusive call runs (event loop only)
        self._posted = 0  # calls submitted from another lane (written on that lane's one thread only)
        self._posted_started = 0  # written on this lane's exclusive thread only
        self.relaned = 0  # keyed calls that asked for the whole lane (Relane) and ran again exclusive
        self._unsynced: Callable[[], list[Need]] = _no_needs  # called on the running thread after each call
        self._durability: Durability | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def group_commit(self, unsynced: Callable[[], list[Need]], durability: Durability) -> None:
        """From now on every call returns once what it wrote is durable: ``unsynced()`` (on the thread that ran the
        call, at its end) says what that is, ``durability`` makes it so (call on the event loop)."""
        self._unsynced, self._durability = unsynced, durability
        self._loop = asyncio.get_running_loop()

    @property
    def queued(self) -> int:
        """Calls waiting for the lane (not counting the running ones)."""
        return len(self._pending) + self._posted - self._posted_started

    def on_lane(self) -> bool:
        """Whether the calling thread is this lane's exclusive thread."""
        return threading.get_ident() == self._thread

    def run_from_other_lane(self, fn: Callable[[], T]) -> tuple[T, list[Need]]:
        """From another lane's thread (the storage lane only: the one that may wait for this one): run ``fn`` on
        this lane, wait for it, and return its result with the needs it noted, which the caller must wait for before
        answering (it adds them to its own call's). On this lane itself, ``fn`` runs at once. (This lane's own calls
        are all exclusive: the coordinator lane's.)"""
        if self.on_lane():
            return fn(), []
        self._posted += 1
        return self._executor.submit(self._run, time.perf_counter(), fn, None, True).result()

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` with the whole lane (exclusive) and return its result (or raise its
        exception)."""
        result: T = await self._schedule(None, functools.partial(fn, *args, **kwargs))
        return result

    async def call_on(self, keys: frozenset[VnodeKey] | None, fn: Callable[[], T],
                      exclusive: Callable[[], Awaitable[T]] | None = None, background: bool = False) -> T:
        """Run ``fn()`` holding only the vnodes ``keys`` (None, or a lane without vnode threads: exclusive, as
        :meth:`call`). ``fn`` checks first that its keys cover what it will touch and raises
        :class:`~walgate.storage.lanes.Relane` before changing anything when they do not: it then runs again with the
        whole lane, through ``exclusive`` when given (the caller's own way to an exclusive call, e.g. a cluster
        node's staged call), else as :meth:`call` runs it. ``background``: a background step, which never starts
        before an exclusive call pending before it (the module docstring)."""
        if keys is None or self._vnodes is None:
            result: T = await (exclusive() if exclusive is not None else self._schedule(None, fn))
            return result
        try:
            result = await self._schedule(keys, fn, background)
        except Relane:
            self.relaned += 1
            result = await (exclusive() if exclusive is not None else self._schedule(None, fn))
        return result

    async def durable(self, needs: list[Need]) -> None:
        """Return once ``needs`` (taken from ``Engine.take_unsynced`` in a call) are durable; StorageUnavailable when
        the fsync that covered one failed."""
        if needs:
            assert self._durability is not None  # (needs are only noted under group commit)
            await self._durability.wait(needs)

    async def _schedule(self, keys: frozenset[VnodeKey] | None, fn: Callable[[], Any], background: bool = False
                        ) -> Any:
        call = _Call(keys, functools.partial(contextvars.copy_context().run, fn), time.perf_counter(),
                     asyncio.get_running_loop().create_future(),
                     before=frozenset(self._running) if keys is None else frozenset(), background=background)
        self._pending.append(call)
        self._dispatch()
        try:
            result, needs = await call.future
        except asyncio.CancelledError:
            if not call.started:  # dropped from the queue before it started
                self._pending.remove(call)
                self._dispatch()
            raise
        if needs:
            await self.durable(needs)
        return result

    def _dispatch(self) -> None:
        """Start every pending call that may start now (event loop): an exclusive call once nothing runs and nothing
        is before it; a keyed call once no running call and no earlier pending one holds any of its vnodes, and no
        exclusive call runs or is pending before it (but for an exclusive call still waiting for calls that ran
        when it came: later keyed calls may run meanwhile, and it waits for them too; so it waits at most for
        those, and for the keyed calls that started before they ended; a background call never passes one)."""
        if self._exclusive or not self._pending:
            return
        kept: list[_Call] = []
        blocked: set[VnodeKey] = set()
        exclusive_pending = False
        for i, call in enumerate(self._pending):
            if call.keys is None:
                if not self._running and not kept:
                    self._start(call)
                    kept += self._pending[i + 1:]
                    break
                kept.append(call)
                exclusive_pending = True
                if not call.before & self._running:  # it waits only for calls that came after it: no more of them
                    kept += self._pending[i + 1:]
                    break
            elif call.keys & self._running_keys or call.keys & blocked or (call.background and exclusive_pending):
                kept.append(call)
                blocked |= call.keys
            else:
                self._start(call)
        self._pending = kept

    def _start(self, call: _Call) -> None:
        call.started = True
        self._running.add(call)
        if call.keys is None:
            self._exclusive = True
            executor = self._executor
        else:
            assert self._vnodes is not None
            self._running_keys |= call.keys
            executor = self._vnodes
        loop = call.future.get_loop()
        try:
            running = executor.submit(self._run, call.submitted, call.fn, call.keys)
        except RuntimeError as exc:  # the lane was shut down: the call never runs, its caller is told so
            self._release(call)
            if not call.future.done():
                call.future.set_exception(exc)
            return
        running.add_done_callback(lambda done: loop.call_soon_threadsafe(self._finished, call, done))

    def _release(self, call: _Call) -> None:
        """``call`` no longer runs: what it held is free."""
        self._running.discard(call)
        if call.keys is None:
            self._exclusive = False
        else:
            self._running_keys -= call.keys

    def _finished(self, call: _Call, done: Future[tuple[Any, list[Need]]]) -> None:
        self._release(call)
        if not call.future.done():  # (cancelled: its caller went away; the call ran to completion all the same)
            error = done.exception()
            if error is not None:
                call.future.set_exception(error)
            else:
                call.future.set_result(done.result())
        self._dispatch()

    def _run(self, submitted: float, fn: Callable[[], T], keys: frozenset[VnodeKey] | None,
             posted: bool = False) -> tuple[T, list[Need]]:
        start = time.perf_counter()
        if keys is None:
            self._thread = threading.get_ident()
        if posted:
            self._posted_started += 1
        try:
            if keys is None:
                result = fn()
            else:
                with holding(keys):
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
        """Wait for started calls to finish and stop the threads."""
        if self._vnodes is not None:
            self._vnodes.shutdown(wait=True)
        self._executor.shutdown(wait=True)


class LaneBridge:
    """The storage lane's way to the coordinator lane (:class:`walgate.storage.lanes.CoordinatorLane`): ``run(fn)``
    waits for ``fn`` on ``lane``; the needs its writes noted are kept until :meth:`take_needs` (the storage lane's
    end-of-call taker), so the storage-lane call answers only once they are durable too. Only exclusive storage calls
    use it (keyed ones touch no coordinator state), and no keyed call runs beside them, so the needs a call takes at
    its end are its own."""

    separate = True

    def __init__(self, lane: StorageThread) -> None:
        self._lane = lane
        self._needs: list[Need] = []  # written on the storage lane only (the coordinator lane's own runs note none)

    def run(self, fn: Callable[[], T]) -> T:
        result, needs = self._lane.run_from_other_lane(fn)
        if needs:  # only from the storage lane; on the coordinator lane itself (none) ``+=`` would rebind the list
            self._needs += needs  # while the storage lane's taker may be swapping it
        return result

    def take_needs(self) -> list[Need]:
        needs, self._needs = self._needs, []
        return needs
