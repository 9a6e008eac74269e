"""The query lane: SQL SELECTs run in worker processes, never on the storage thread and never under the node's GIL.

A SELECT is prepared on the storage thread (compiled and bound to its vnodes' WAL snapshots, which is quick:
:class:`~walgate.storage.select.PreparedSelect`), pickled to a worker process, run there, and its TDengine-REST JSON
body comes back as bytes. The node's threads (event loop, storage thread) never wait for a query, not even for the
GIL, and the OS schedules the workers at a lower priority (``nice`` +:data:`NICE`); a query that exhausts memory
takes its worker down, not the node (its client gets an error, the pool is made again). The answer is what was
visible when the query started. Workers are started when the first query comes (``sql.workers`` of them: the
processes that run queries at once), each then serving query after query; a worker whose node is gone (even killed
with SIGKILL, which stops nothing else) ends by itself within :data:`ORPHAN_CHECK_S`.

Cancelling: each query running or queued holds a slot of a shared array of flags; the worker checks its slot
every :data:`WATCH_S` (a watcher thread) and cancels the query's :class:`~walgate.storage.cancel.Cancel`, which
stops the scan between WAL entries and interrupts DuckDB. :meth:`QueryWorkers.run` sets the flag when ``gone()``
says the client went away (checked every :data:`POLL_S`) and when its awaiting task is cancelled; a slot is reused
only once its query ended. The watcher also cancels a query that has run for ``sql.timeout.ms`` in its worker
(waiting for a worker, or for one to start, does not count). Scans are bounded by ``sql.max.bytes``.
At most :data:`SLOTS` queries are running or queued; more wait for a slot.

Damage a query finds is reported back (``(vnode index, version)``) and rechecked on the storage thread by the caller
(:meth:`~walgate.storage.engine.Engine.recheck`), where the WAL can write its quarantine.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import orjson

from walgate.storage.cancel import Cancel
from walgate.storage.errors import QueryCancelled, StorageError
from walgate.storage.select import PreparedSelect

__all__ = ["NICE", "ORPHAN_CHECK_S", "POLL_S", "SLOTS", "WATCH_S", "Answer", "QueryWorkers"]

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a waiting request checks its client and the time limit
WATCH_S = 0.05  # how often a worker checks its query's flag
SLOTS = 256
NICE = 10
ORPHAN_CHECK_S = 0.5  # a worker whose node died (kill -9) ends within this

_GONE, _CANCELLED = 1, 2
_REASONS = {_GONE: "the client went away", _CANCELLED: "the request was cancelled (the node is stopping?)"}

Answer = tuple[bytes | None, list[tuple[int, int]], StorageError | None]
"""What a worker sends back: the JSON body (None on error), the damaged entries found, the error."""

_flags: Any = None  # the worker's view of the shared flags (set by _start)


def _start(flags: Any, node: int) -> None:
    """A worker's initializer: keep the flags, lower the priority, leave SIGINT to the node, and end when the node
    ``node`` (a pid) is gone, even killed with SIGKILL (checked every :data:`ORPHAN_CHECK_S`)."""
    global _flags
    _flags = flags
    os.nice(NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch_node() -> None:
        while os.getppid() == node:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch_node, name="walgate-query-node", daemon=True).start()


def _work(slot: int, prepared: PreparedSelect, max_bytes: int, timeout_s: float | None) -> Answer:
    """Run ``prepared`` in a worker, cancelled when its slot's flag is set or after ``timeout_s`` of running."""
    cancel = Cancel()
    if flag := _flags[slot]:  # cancelled while queued: not even started
        cancel.cancel(_REASONS[flag])
    done = threading.Event()
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None

    def watch() -> None:
        while not done.wait(WATCH_S if deadline is None else max(0.0, min(WATCH_S, deadline - time.monotonic()))):
            if flag := _flags[slot]:
                cancel.cancel(_REASONS[flag])
                return
            if deadline is not None and time.monotonic() >= deadline:
                assert timeout_s is not None
                cancel.cancel(f"it ran longer than sql.timeout.ms ({timeout_s * 1000:.0f} ms)")
                return

    watcher = threading.Thread(target=watch, name="walgate-query-watch", daemon=True)
    watcher.start()
    damaged: list[tuple[int, int]] = []
    try:
        return orjson.dumps(prepared.run(cancel, max_bytes, damaged).rest_body()), damaged, None
    except StorageError as exc:  # returned, not raised: the damage found comes back either way
        return None, damaged, exc
    finally:
        done.set()
        watcher.join()


def _never() -> bool:
    return False


class QueryWorkers:
    """``processes`` query workers; statements stopped after ``timeout_ms`` (0: never), scans bounded by
    ``max_bytes`` (see the module docstring)."""

    def __init__(self, processes: int, timeout_ms: int, max_bytes: int,
                 observe: Callable[[float | None, str], None] = lambda seconds, outcome: None) -> None:
        self.processes = processes
        self._observe = observe  # (None, ""): a query entered; (seconds, outcome): it left (Metrics.query)
        self.timeout_s = timeout_ms / 1000 if timeout_ms else None
        self.max_bytes = max_bytes
        self._context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self._flags = self._context.Array("b", SLOTS, lock=False)
        self._free = list(range(SLOTS))
        self._slots = asyncio.Semaphore(SLOTS)
        self._executor: ProcessPoolExecutor | None = None

    @property
    def pids(self) -> list[int]:
        """The worker processes running now (none before the first query)."""
        executor = self._executor
        return [] if executor is None else [p.pid for p in list(executor._processes.values()) if p.pid is not None]

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(self.processes, mp_context=self._context, initializer=_start,
                                                 initargs=(self._flags, os.getpid()))
        return self._executor

    async def run(self, prepared: PreparedSelect, gone: Callable[[], bool] = _never) -> Answer:
        """``prepared`` run in a worker: (body, damaged, error) (module docstring); QueryCancelled when the worker
        died under it. Each query is reported to ``observe``: ok, refused (its own error) or cancelled."""
        started = time.monotonic()
        self._observe(None, "")
        outcome = "cancelled"  # unless it answers: a dead worker, a cancelled request
        try:
            answer = await self._run(prepared, gone)
            error = answer[2]
            outcome = "ok" if error is None else "cancelled" if isinstance(error, QueryCancelled) else "refused"
            return answer
        finally:
            self._observe(time.monotonic() - started, outcome)

    async def _run(self, prepared: PreparedSelect, gone: Callable[[], bool]) -> Answer:
        await self._slots.acquire()
        slot = self._free.pop()
        self._flags[slot] = 0
        loop = asyncio.get_running_loop()
        try:
            pool = self._pool()
            submitted = pool.submit(_work, slot, prepared, self.max_bytes, self.timeout_s)
        except BaseException:
            self._release(slot)
            raise
        submitted.add_done_callback(lambda _: loop.call_soon_threadsafe(self._release, slot))
        future = asyncio.wrap_future(submitted)
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=POLL_S)
                if done:
                    return future.result()
                if gone():
                    self._flags[slot] = _GONE
        except asyncio.CancelledError:
            self._flags[slot] = _CANCELLED
            raise
        except BrokenProcessPool as exc:
            if self._executor is pool:
                log.error("a query worker process stopped (%s); the query workers are started again", exc)
                self._executor = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise QueryCancelled("query cancelled: its worker process stopped (out of memory?)") from None

    def _release(self, slot: int) -> None:
        self._free.append(slot)
        self._slots.release()

    def shutdown(self) -> None:
        """Cancel every query and stop the workers (waits for them: a cancelled query stops within WATCH_S)."""
        for slot in range(SLOTS):
            self._flags[slot] = _CANCELLED
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
