"""Group commit: the fdatasyncs that make WAL_LEVEL 2 appends and consumer-group commits durable, off the storage
thread.

Each file written with group commit (a vnode's WAL, a coordinator partition's log; see
:mod:`walgate.storage.durability`) has at most one *round* going at a time: take a sync of everything written to it
so far (on the file's owner lane: a WAL's vnode lane, the coordinator lane for a coordinator log, see
:meth:`GroupCommit.own`), run its fdatasync on one of the worker threads, then, in one call on that lane, mark it
done and take the next; back on the event loop, release every waiter whose target it made durable, or refuse
with :class:`~walgate.storage.errors.StorageUnavailable` every waiter it covered when it failed. Waiters that
arrived while it ran ride on the next sync, so one fdatasync answers every append and commit made while the previous
one ran. A round goes on while its file holds anything unsynced, waited for or not (an ``acks=0`` produce, a request
that failed after writing): readers see level-2 records only once durable. After a failed fdatasync the next one
waits :data:`RETRY_S` (the disk may need time; the round must not spin).

No lane runs these fdatasyncs, so Fetch, Metadata and Heartbeat are answered while they run; a coordinator log's
round never queues behind the storage lane (nor a WAL's behind the coordinator lane), and a WAL's round queues only
behind calls holding its vnode (or an exclusive storage call).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from walgate.gateway.storage_thread import StorageThread
from walgate.storage.durability import Need, Sync, Syncable
from walgate.storage.errors import StorageUnavailable
from walgate.storage.lanes import VnodeKey
from walgate.storage.wal import Wal

__all__ = ["GroupCommit", "RETRY_S", "SYNC_THREADS"]

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""Seconds between a failed fdatasync and the next one of the same file."""

SYNC_THREADS = 4
"""Worker threads running fdatasyncs (of different files) at once."""


class _File:
    """A file's waiters (target, future) and its running round."""

    __slots__ = ("file", "waiters", "task")

    def __init__(self, file: Syncable) -> None:
        self.file = file
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.task: asyncio.Task[None] | None = None


def _advance(file: Syncable, sync: Sync | None) -> tuple[int, Sync | None]:
    """On the file's owner lane: mark ``sync`` done; (what is durable now, the next sync to run or None)."""
    if sync is not None:
        sync.done()
    return file.durable_to, file.take_sync()


def _lane_of(file: Syncable) -> frozenset[VnodeKey] | None:
    """The vnode lane a WAL's syncs are taken and marked done on (its vnode's); None: the owner lane's whole (a
    coordinator log, on the coordinator lane)."""
    return frozenset({file.owner}) if isinstance(file, Wal) else None


class GroupCommit:
    """The node's sync service (see the module docstring); implements the storage thread's ``Durability``."""

    def __init__(self, storage: StorageThread, threads: int = SYNC_THREADS) -> None:
        self._storage = storage
        # file -> its lane, for files not the storage lane's; file -> what runs its syncs. Weak: a replicated
        # coordinator partition's logs are replaced at every change of its leader, and a forgotten one must not
        # leave its lane or writer behind (nor, by its id, to a file made later at its address)
        self._owners: weakref.WeakKeyDictionary[Syncable, StorageThread] = weakref.WeakKeyDictionary()
        self._writers: weakref.WeakKeyDictionary[Syncable, Callable[[Sync], Awaitable[None]]] = \
            weakref.WeakKeyDictionary()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="walgate-sync")
        self._files: dict[int, _File] = {}  # id(file) -> state, while it has waiters or a round

    def own(self, lane: StorageThread, files: Iterable[Syncable],
            writer: Callable[[Sync], Awaitable[None]] | None = None) -> None:
        """``files`` (the coordinator logs) belong to ``lane``: their syncs are taken and marked done there. Every
        other file is the storage lane's. With ``writer``, a sync of theirs is run by awaiting ``writer(sync)`` on
        the event loop (which sets its ``error`` when it fails) instead of :meth:`Sync.run` on a sync thread: a
        replicated coordinator partition's, whose write waits for other lanes and nodes
        (:mod:`walgate.gateway.kafka.coordinator_replicas`), so that no thread waits for them."""
        for file in files:
            self._owners[file] = lane
            if writer is not None:
                self._writers[file] = writer

    async def wait(self, needs: list[Need]) -> None:
        """Return once every need is durable; StorageUnavailable (the first) when an fdatasync covering one
        failed."""
        loop = asyncio.get_running_loop()
        futures = []
        for file, target in needs:
            future: asyncio.Future[None] = loop.create_future()
            state = self._state(file)
            state.waiters.append((target, future))
            self._start(state)
            futures.append(future)
        errors = [r for r in await asyncio.gather(*futures, return_exceptions=True) if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    def kick(self, needs: list[Need]) -> None:
        """Make ``needs`` durable, waiting for nothing."""
        for file, _ in needs:
            self._start(self._state(file))

    async def close(self) -> None:
        """Stop every round (their waiters are refused) and the worker threads (a running fdatasync finishes)."""
        for state in list(self._files.values()):
            if state.task is not None:
                state.task.cancel()
                try:
                    await state.task
                except asyncio.CancelledError:
                    pass
        self._pool.shutdown(wait=True)

    def _state(self, file: Syncable) -> _File:
        state = self._files.get(id(file))
        if state is None:
            state = self._files[id(file)] = _File(file)
        return state

    def _start(self, state: _File) -> None:
        if state.task is None:
            state.task = asyncio.create_task(self._rounds(state), name="walgate-group-commit")

    async def _rounds(self, state: _File) -> None:
        loop = asyncio.get_running_loop()
        sync: Sync | None = None
        try:
            while True:
                durable, following = await self._owners.get(state.file, self._storage).call_on(
                    _lane_of(state.file), functools.partial(_advance, state.file, sync))
                self._settle(state, durable, sync)
                failed, sync = sync is not None and sync.error is not None, None
                if following is None:
                    if not state.waiters:
                        break
                    # nothing to take while waiters wait: a sync taken by someone else (a periodic one) is running
                    await asyncio.sleep(RETRY_S)
                    continue
                if failed:
                    await asyncio.sleep(RETRY_S)
                writer = self._writers.get(state.file)
                if writer is None:
                    await loop.run_in_executor(self._pool, following.run)
                else:
                    await writer(following)
                sync = following
        except BaseException as exc:  # shutdown, or the storage thread failed: nobody waits forever
            for _, future in state.waiters:
                if not future.done():
                    future.set_exception(StorageUnavailable(f"not made durable: {type(exc).__name__} {exc}"))
            state.waiters.clear()
            raise
        finally:
            state.task = None
            del self._files[id(state.file)]

    @staticmethod
    def _settle(state: _File, durable: int, sync: Sync | None) -> None:
        """Release the waiters ``durable`` covers; refuse those a failed ``sync`` covered; keep the others."""
        kept = []
        for target, future in state.waiters:
            if future.done():  # its request was cancelled
                continue
            if target <= durable:
                future.set_result(None)
            elif sync is not None and sync.error is not None and target <= sync.covers:
                future.set_exception(StorageUnavailable(
                    f"the fdatasync making the write durable failed ({sync.error.strerror or sync.error}); it is not "
                    "acknowledged: retry once the disk accepts writes (WAL data it covered becomes visible if a later "
                    "fdatasync succeeds; a committed offset never does)"))
            else:
                kept.append((target, future))
        state.waiters = kept
