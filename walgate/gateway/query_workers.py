"""The query lane: SQL SELECTs run in worker processes, never on the storage thread.

A SELECT is prepared on the storage thread (compiled and bound to its vnodes' WAL snapshots:
:class:`~walgate.storage.select.PreparedSelect`; the time it takes grows with the WAL's index, a copy of it),
pickled to a worker process, run there, and its TDengine-REST JSON body (this node's part of a query merged across
nodes: its scanned rows as an Arrow IPC stream, :mod:`walgate.storage.select_merge`) written to a file in the
node's spool directory (a new directory in the system's temporary directory, ``TMPDIR``, made off the event loop
at the first query, locked with ``flock`` while the node uses it and removed when it stops; those whose lock can be
taken, their node gone even killed, are removed when another node makes its own: :func:`spool_dir`; one removed
under a running node, by another node or an ageing of ``TMPDIR``, is made again at its next query), which the node
relays to the client in chunks (:mod:`walgate.gateway.answer_spool`). The answer files the node holds are bounded
together by ``sql.answers.max.bytes`` (:class:`~walgate.gateway.answer_spool.AnswersBudget`): past it, queries are
refused with a retriable error until answers are sent. The node's threads (event
loop, storage thread) never wait for a query's scan, DuckDB or JSON, not even for the GIL, and never hold a whole
answer (at most ``sql.max.bytes``): an answer file nobody takes (its request cancelled) is removed. The OS
schedules the workers at a lower priority (``nice``
+:data:`NICE`). A worker that dies (the OOM killer, a kill) takes its pool down, not the node: the pool is made
again, the queries no worker had begun run in it (a SELECT reads only: running it again is safe), and those a worker
had begun fail (so a query that kills its worker fails once rather than killing worker after worker). The answer is what was visible when the query was prepared (rows a
retention or DROP DATABASE deleted meanwhile are not read). Workers are started when the first query comes
(``sql.workers`` of them: the processes that run queries at once), each then serving query after query; a worker
whose node is gone (even killed with SIGKILL, which stops nothing else) ends by itself within
:data:`ORPHAN_CHECK_S`.

Slots: a query holds one of :data:`SLOTS` slots from before it is prepared until its worker is done with it (more
wait for one, unprepared: a queue of queries costs no copies of WAL indexes). Each slot has a flag in an array the
workers share; the worker checks its query's flag every :data:`WATCH_S` (a watcher thread) and cancels the query's
:class:`~walgate.storage.cancel.Cancel`, which stops the scan between WAL entries, interrupts DuckDB (again at every
check: an interrupt only stops a statement that is running) and stops the JSON conversion between chunks.
:meth:`QueryWorkers.run` sets the flag when ``gone()`` says the client went away (checked every :data:`POLL_S`) and
when its awaiting task is cancelled, and only while the query is still in its worker, so a flag never reaches the
slot's next query (once its answer is written the worker is free: a client gone while it is sent ends the relay).
The watcher also cancels a query that has run for ``sql.timeout.ms`` in its worker (waiting for
a worker, or for one to start, does not count). Scans are bounded by ``sql.max.bytes`` of Arrow rows, answers by
``sql.max.bytes`` of JSON.

Damage a query finds is reported back (``(vnode index, version)``) and rechecked on the storage thread by the caller
(:meth:`~walgate.storage.engine.Engine.recheck`), where the WAL can write its quarantine.
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import logging
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from walgate.gateway.answer_spool import AnswersBudget, Spool, write_answer
from walgate.gateway.worker_processes import NICE, ORPHAN_CHECK_S, SHUTDOWN_S, pool_pids, start_worker, stop_pool
from walgate.storage.cancel import Cancel
from walgate.storage.errors import QueryCancelled, StorageError, StorageUnavailable
from walgate.storage.result import Result
from walgate.storage.select import PreparedSelect

__all__ = ["NICE", "ORPHAN_CHECK_S", "POLL_S", "SHUTDOWN_S", "SLOTS", "WATCH_S", "Answer", "QueryWorkers", "Spool"]

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a waiting request checks its client
WATCH_S = 0.05  # how often a worker checks its query's flag and time limit
SLOTS = 256

_GONE, _CANCELLED = 1, 2
_REASONS = {_GONE: "the client went away", _CANCELLED: "the request was cancelled (the node is stopping?)"}


@dataclass(frozen=True)
class Answer:
    """What a worker sends back: the size of the answer it wrote to its answer file (the JSON body; Arrow IPC rows
    for a scan; None with an error: no file), the damaged entries found, the query's error."""

    size: int | None
    damaged: list[tuple[int, int]]
    error: StorageError | None


_flags: Any = None  # the worker's view of the shared flags (set by _start)
_started: Any = None  # and of the slots whose query a worker began


def _start(flags: Any, started: Any, node: int) -> None:
    """A worker's initializer: keep the shared arrays, lower the priority, leave SIGINT to the node, and end when the
    node ``node`` (a pid) is gone, even killed with SIGKILL (checked every :data:`ORPHAN_CHECK_S`)."""
    global _flags, _started
    _flags, _started = flags, started
    start_worker(node, "walgate-query-node")


def _work(slot: int, prepared: PreparedSelect, max_bytes: int, timeout_s: float | None, path: str) -> Answer:
    """Run ``prepared`` in a worker, cancelled when its slot's flag is set or after ``timeout_s`` of running; its
    answer written to the new file ``path``."""
    _started[slot] = 1
    cancel = Cancel()
    deadline = time.monotonic() + timeout_s if timeout_s is not None else None

    def check() -> None:
        if flag := _flags[slot]:
            cancel.cancel(_REASONS[flag])
        elif deadline is not None and time.monotonic() >= deadline:
            cancel.cancel(f"it ran longer than sql.timeout.ms ({(timeout_s or 0) * 1000:.0f} ms)")

    done = threading.Event()

    def watch() -> None:
        while not done.wait(WATCH_S if deadline is None else max(0.0, min(WATCH_S, deadline - time.monotonic()))):
            check()  # again and again once cancelled: each check interrupts DuckDB's running statement

    check()  # cancelled while queued: not even started
    watcher = threading.Thread(target=watch, name="walgate-query-watch", daemon=True)
    watcher.start()
    damaged: list[tuple[int, int]] = []
    try:
        if prepared.scan:  # this node's part of a query merged across nodes: its scanned rows, Arrow IPC
            answer: Result | bytes = prepared.scan_rows(cancel, max_bytes, damaged)
        else:
            answer = prepared.run(cancel, max_bytes, damaged)
        return Answer(write_answer(path, answer, max_bytes, cancel), damaged, None)
    except StorageError as exc:  # returned, not raised: the damage found comes back either way
        return Answer(None, damaged, exc)
    finally:
        done.set()
        watcher.join()


def _never() -> bool:
    return False


class QueryWorkers:
    """``processes`` query workers; statements stopped after ``timeout_ms`` of running (0: never), scans and answers
    bounded by ``max_bytes``, the answers held by ``answers_max_bytes`` together (None: 4 x ``max_bytes``);
    ``observe(None, "")`` when a query reaches a worker, ``observe(seconds, outcome)`` when it leaves it (see the
    module docstring)."""

    def __init__(self, processes: int, timeout_ms: int, max_bytes: int,
                 observe: Callable[[float | None, str], None] = lambda seconds, outcome: None,
                 answers_max_bytes: int | None = None) -> None:
        self.processes = processes
        self.timeout_s = timeout_ms / 1000 if timeout_ms else None
        self.max_bytes = max_bytes
        self._observe = observe
        self._context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self._flags = self._context.Array("b", SLOTS, lock=False)
        self._started = self._context.Array("b", SLOTS, lock=False)  # set by the worker that begins a slot's query
        self._free = list(range(SLOTS))
        self._slots = asyncio.Semaphore(SLOTS)
        self._executor: ProcessPoolExecutor | None = None
        self._closed = False  # close() began: no pool is made again
        self.answers = AnswersBudget(answers_max_bytes if answers_max_bytes is not None else 4 * max_bytes)
        self._spool: str | None = None  # the answer files' directory, made at the first query (again if removed)
        self._spool_lock: int | None = None  # its descriptor, flock-ed while the node uses it (spool_dir)
        self._spool_made = asyncio.Lock()  # one query makes it, the others wait for it
        self._answers = itertools.count()  # each submission's answer file gets a new name

    @property
    def pids(self) -> list[int]:
        """The worker processes running now (none before the first query)."""
        return pool_pids(self._executor)

    async def run(self, prepare: Callable[[], Awaitable[PreparedSelect]],
                  gone: Callable[[], bool] = _never) -> tuple[PreparedSelect, Answer, Spool | None]:
        """The query ``prepare()`` gives (awaited once a slot is free), run in a worker: it, its answer and the
        answer's file, taken (None with an error; module docstring); QueryCancelled when its worker died under it.
        Each query that reaches a worker is reported to ``observe``: ok, refused (its own error), cancelled, or failed
        (a bug). A client ``gone()`` once a slot is free (or once prepared) is QueryCancelled before anything
        reaches a worker. Refused with StorageUnavailable (retriable) while the answers held fill their budget, before
        it runs or when its answer would pass it (its file removed)."""
        self.answers.check()
        await self._spool_ready()
        await self._slots.acquire()
        slot = self._free.pop()
        self._flags[slot] = self._started[slot] = 0
        submitted: Future[Answer] | None = None
        path = ""  # the answer file of the last submission
        spool: Spool | None = None
        try:
            if gone():
                raise QueryCancelled("query cancelled: the client went away while it waited for a query worker")
            prepared = await prepare()
            if gone():
                raise QueryCancelled("query cancelled: the client went away while it was prepared")
            pool, submitted, path = self._submit(slot, prepared)
            self._observe(None, "")
            started, outcome = time.monotonic(), "cancelled"  # unless it answers: a dead worker, a cancelled request
            try:
                retried = False
                while True:
                    try:
                        answer = await self._wait(slot, submitted, gone)
                        break
                    except BrokenProcessPool as exc:  # a worker died: again if no worker began it (it only reads)
                        self._discard(pool, exc)
                        if self._started[slot] or retried:
                            raise QueryCancelled("query cancelled: its worker process stopped (out of memory?)") \
                                from None
                        retried = True
                        _remove(path)  # what the dead worker may have begun
                        pool, submitted, path = self._submit(slot, prepared)
            except (QueryCancelled, asyncio.CancelledError):
                raise
            except Exception:
                outcome = "failed"  # a bug in the worker (the caller logs its traceback)
                raise
            else:
                error = answer.error
                outcome = "ok" if error is None else "cancelled" if isinstance(error, QueryCancelled) else "refused"
                if answer.size is not None:
                    try:
                        spool = Spool.take(path, answer.size, self.answers)
                    except StorageUnavailable:
                        outcome = "refused"
                        raise
                return prepared, answer, spool
            finally:
                self._observe(time.monotonic() - started, outcome)
        finally:
            if submitted is None or submitted.done():
                if spool is None:
                    _remove(path)  # an answer nobody takes
                self._release(slot)
            else:  # the worker still has it: the slot is free once it is done (flags set now reach this query only)
                loop = asyncio.get_running_loop()
                submitted.add_done_callback(lambda _: loop.call_soon_threadsafe(self._forsake, slot, path))

    def _submit(self, slot: int, prepared: PreparedSelect) -> tuple[ProcessPoolExecutor, Future[Answer], str]:
        """The query handed to the pool, and its answer file's path; a pool broken while idle (a worker killed) is
        replaced first."""
        pool = self._pool()
        assert self._spool is not None  # (_spool_ready)
        path = os.path.join(self._spool, f"{next(self._answers)}.json")
        try:
            return pool, pool.submit(_work, slot, prepared, self.max_bytes, self.timeout_s, path), path
        except BrokenProcessPool as exc:
            self._discard(pool, exc)
        pool = self._pool()
        return pool, pool.submit(_work, slot, prepared, self.max_bytes, self.timeout_s, path), path

    async def _wait(self, slot: int, submitted: Future[Answer], gone: Callable[[], bool]) -> Answer:
        """``submitted``'s answer; BrokenProcessPool when a worker of its pool died."""
        future = asyncio.wrap_future(submitted)
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=POLL_S)
                if done:
                    return future.result()
                if gone() and not submitted.done() and self._flags[slot] != _GONE:
                    log.info("a SELECT's client went away: its query worker is told to stop it")
                    self._flags[slot] = _GONE
        except asyncio.CancelledError:
            if not submitted.done():
                self._flags[slot] = _CANCELLED
            raise

    async def _spool_ready(self) -> None:
        """The answer directory made (off the event loop: it lists ``TMPDIR`` and may remove dead nodes' directories)
        when there is none yet or the one made was removed under the node (module docstring)."""
        async with self._spool_made:
            if self._spool_lock is not None and os.fstat(self._spool_lock).st_nlink == 0:
                log.warning("the answer directory %s was removed under the node (another node sharing %s? an "
                            "ageing of it?): a new one is made", self._spool, os.path.dirname(self._spool or ""))
                self._forget_spool()
            if self._spool is None:
                self._spool, self._spool_lock = await asyncio.to_thread(spool_dir, tempfile.gettempdir())

    def _forget_spool(self) -> None:
        """The answer directory given up: removed (if still there) and unlocked."""
        spool, lock, self._spool, self._spool_lock = self._spool, self._spool_lock, None, None
        if spool is not None and lock is not None and os.fstat(lock).st_nlink:
            shutil.rmtree(spool, ignore_errors=True)
        if lock is not None:
            os.close(lock)

    def _pool(self) -> ProcessPoolExecutor:
        if self._closed:
            raise QueryCancelled("query cancelled: the node is stopping")
        if self._executor is None:
            self._executor = ProcessPoolExecutor(self.processes, mp_context=self._context, initializer=_start,
                                                 initargs=(self._flags, self._started, os.getpid()))
        return self._executor

    def _discard(self, pool: ProcessPoolExecutor, exc: BaseException) -> None:
        """Forget a broken pool (once, however many of its queries report it); the next query makes a new one."""
        if self._executor is pool:
            log.error("a query worker process stopped (%s); the query workers are started again", exc)
            self._executor = None
            pool.shutdown(wait=False, cancel_futures=True)

    def _release(self, slot: int) -> None:
        self._free.append(slot)
        self._slots.release()

    def _forsake(self, slot: int, path: str) -> None:
        """A query whose request gave up is done in its worker: its answer file removed, its slot free."""
        _remove(path)
        self._release(slot)

    def cancel_all(self) -> None:
        """Cancel every query (the node is stopping)."""
        for slot in range(SLOTS):
            self._flags[slot] = _CANCELLED

    async def close(self) -> None:
        """Cancel every query and stop the workers (:func:`~walgate.gateway.worker_processes.stop_pool`:
        terminated, waited for up to :data:`SHUTDOWN_S`, then killed)."""
        self._closed = True
        self.cancel_all()
        executor, self._executor = self._executor, None
        await stop_pool(executor, "query workers")
        self._forget_spool()


SPOOL_PREFIX = "walgate-answers-"


def spool_dir(parent: str) -> tuple[str, int]:
    """A new answer directory in ``parent`` (mode 0700, named for this process) and a descriptor of it holding its
    ``flock``, which marks it in use until the descriptor is closed (or its process ends, even killed). The answer
    directories there whose lock can be taken (their node gone) are removed first, each while holding its lock, so
    never one a running node holds, whatever PID namespace it runs in."""
    for name in os.listdir(parent):
        if name.startswith(SPOOL_PREFIX):
            _remove_unlocked(os.path.join(parent, name))
    while True:
        path = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=parent)
        lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for another node removing it as unlocked (its lock held meanwhile)
        if os.fstat(lock).st_nlink:  # still there: no other node can take it from now on
            return path, lock
        os.close(lock)  # removed between its making and its locking: another


def _remove_unlocked(path: str) -> None:
    """The answer directory ``path`` removed if no node holds its lock (taken meanwhile, so that no node can begin
    to use it)."""
    try:
        lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # gone, or not a directory: not an answer directory
        return
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a running node's
            return
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(lock)


def _remove(path: str) -> None:
    """``path`` removed if it is there (an answer file no request takes)."""
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
