"""The planning lane: a large INSERT, line-protocol or CSV body is parsed and planned in a worker process, never on
the storage thread, and not under the node's GIL.

A body of at least :attr:`IngestWorkers.min_bytes` (:data:`PLAN_IN_WORKER_BYTES`) is pickled to a worker process
with a :class:`~walgate.storage.write_plan.WriteSnapshot` the storage thread took (the catalog: every database and
supertable, and its generation; each vnode's meta version, :class:`~walgate.storage.stored_tables.StoredTables`,
through which the worker reads the vnodes' ``meta.db`` itself, closed when the plan is made).
The worker parses it and plans it (:func:`~walgate.storage.write_plan.plan`: the same column path and row-by-row
fallback, so the same errors) into a :class:`~walgate.storage.write_plan.PreparedWrite`, which the caller applies on
the storage thread (:meth:`~walgate.storage.ingest.Ingest.apply`: checked against what the plan read, or planned
again there). A plan that needs tables the stores cannot answer for (an INSERT without ``USING``, a CSV ``table=``
on a vnode whose store a reader could not read, or that is behind its vnode) comes back as :class:`Missing`; the
node looks them up and sends the request again with them (at most once more: the planner asks for every such table
of the request at once). An SQL body that is not an INSERT comes back
parsed (:class:`NotInsert`) for the node's usual path; an INSERT the planner refuses comes back with its error and
its statement (:class:`Refused`), whose ACLs the node checks first, as it does before running a statement.

Planning writes nothing: a worker that dies (the OOM killer, a kill) under a plan makes the request fail with
StorageUnavailable (503) and nothing written, so it is safe to retry; the pool is made again for the next request,
and a request that finds the pool broken before its plan began is sent to the new pool. ``processes`` plans run at
once (the others wait, unsent: a queue of bodies costs no copies in workers). The workers run at a lower priority
(``nice`` +:data:`NICE`), ignore SIGINT and end within :data:`ORPHAN_CHECK_S` when their node is gone.

Every plan counts itself in :attr:`IngestWorkers.begun` when it starts and waits in its worker while
:attr:`IngestWorkers.gate` (a shared flag, 1 unless a test sets it to 0 to hold plans) is 0, checking it every
:data:`GATE_S`. Both are lock-free shared memory, so a worker killed at any point leaves nothing locked (a killed
waiter of a multiprocessing Event or Condition hangs whoever sets it next); ``begun`` is exact with one worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import os
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from walgate.gateway.worker_processes import NICE, ORPHAN_CHECK_S, SHUTDOWN_S, pool_pids, start_worker, stop_pool
from walgate.storage.errors import StorageError, StorageUnavailable
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.stored_tables import StoredTables
from walgate.storage.write_plan import InsertRequest, NeedTables, PreparedWrite, WriteRequest, WriteSnapshot, plan

__all__ = ["NICE", "ORPHAN_CHECK_S", "GATE_S", "PLAN_IN_WORKER_BYTES", "SHUTDOWN_S", "IngestWorkers", "Missing", "NotInsert", "Prepared", "Refused"]

log = logging.getLogger(__name__)

# Smaller bodies are planned and written in one call holding their database's vnodes (Ingest.write), not the whole
# lane; for them the hop to a niced worker costs more than it saves: bench/ingest.py's 450 KB line-protocol bodies,
# one after the other, went about 30 % slower through a worker (bench/RESULTS.md). Such a body may still take its
# vnodes for a second (20,000 new subtables: bench/RESULTS.md, 2026-12-01)
PLAN_IN_WORKER_BYTES = 1 << 20
GATE_S = 0.01  # how often a held plan checks the gate


@dataclass(frozen=True)
class Prepared:
    """A write planned: the plan, and for an INSERT its statement without its rows (what ACLs are checked on)."""

    write: PreparedWrite
    insert: ast.Insert | None


@dataclass(frozen=True)
class Refused:
    """An INSERT the planner refused, and the statement without its rows: its ACLs are checked before its error is
    answered (no error may tell a principal that may not write there what exists)."""

    error: StorageError
    insert: ast.Insert


@dataclass(frozen=True)
class Missing:
    """The tables (``(database, name)``) a plan needs looked up first."""

    keys: list[tuple[str, str]]


@dataclass(frozen=True)
class NotInsert:
    """An SQL body that parsed to another statement than INSERT: for the node's usual path."""

    stmt: ast.Statement


Planned = Prepared | Missing | NotInsert | Refused

_gate: Any = None  # the worker's view of IngestWorkers.gate (set by _start)
_begun: Any = None  # and of IngestWorkers.begun
_parsed: tuple[str, ast.Statement] | None = None  # the last SQL body this worker parsed: asked again after Missing


def _start(gate: Any, begun: Any, node: int) -> None:
    """A worker's initializer: keep the shared gate and counter, lower the priority, leave SIGINT to the node, and end
    when the node ``node`` (a pid) is gone, even killed with SIGKILL (checked every :data:`ORPHAN_CHECK_S`)."""
    global _gate, _begun
    _gate, _begun = gate, begun
    start_worker(node, "walgate-ingest-node")


def _work(request: WriteRequest, snapshot: WriteSnapshot) -> Planned:
    """``request`` parsed and planned against ``snapshot`` (in a worker; see the module docstring); the vnode
    stores it read are closed after."""
    _begun.value += 1
    while not _gate.value:
        time.sleep(GATE_S)
    try:
        return _planned(request, snapshot)
    finally:
        if isinstance(snapshot.tables, StoredTables):
            snapshot.tables.close()


def _planned(request: WriteRequest, snapshot: WriteSnapshot) -> Planned:
    global _parsed
    parsed, _parsed = _parsed, None  # kept only from one try of a request to the next (after Missing)
    sql = ""
    if isinstance(request, InsertRequest) and isinstance(request.stmt, str):
        sql = request.stmt
        stmt = parsed[1] if parsed is not None and parsed[0] == sql else parse(sql)
        if not isinstance(stmt, ast.Insert):
            return NotInsert(stmt)
        request = dataclasses.replace(request, stmt=stmt)
    try:
        prepared = plan(snapshot, request)
    except NeedTables as exc:
        if isinstance(request, InsertRequest) and isinstance(request.stmt, ast.Insert) and sql:
            _parsed = (sql, request.stmt)
        return Missing(exc.keys)
    except StorageError as exc:
        if not isinstance(request, InsertRequest):
            raise
        return Refused(exc, _skeleton(request))
    if not isinstance(request, InsertRequest):
        return Prepared(prepared, None)
    return Prepared(prepared, _skeleton(request))


def _skeleton(request: InsertRequest) -> ast.Insert:
    """The parsed INSERT of ``request`` without its rows (what ACLs are checked on)."""
    assert isinstance(request.stmt, ast.Insert)
    return ast.Insert(tuple(dataclasses.replace(t, rows=()) for t in request.stmt.targets))


class IngestWorkers:
    """``processes`` planning workers for bodies of at least ``min_bytes`` (see the module docstring)."""

    def __init__(self, processes: int = 1, min_bytes: int = PLAN_IN_WORKER_BYTES) -> None:
        self.processes = processes
        self.min_bytes = min_bytes
        self._context = multiprocessing.get_context("spawn")  # never fork a process that runs threads
        self.gate = self._context.RawValue("b", 1)  # 0: plans wait in their workers (tests)
        self.begun = self._context.RawValue("q", 0)  # plans a worker started, ever
        self._slots = asyncio.Semaphore(processes)
        self._executor: ProcessPoolExecutor | None = None
        self._closed = False  # close() began: no pool is made again

    @property
    def pids(self) -> list[int]:
        """The worker processes running now (none before the first plan)."""
        return pool_pids(self._executor)

    def takes(self, size: int) -> bool:
        """Whether a body of ``size`` bytes is planned in a worker."""
        return size >= self.min_bytes

    async def plan(self, request: WriteRequest,
                   snapshot: Callable[[list[tuple[str, str]]], Awaitable[WriteSnapshot]]
                   ) -> Prepared | NotInsert | Refused:
        """``request`` planned in a worker against ``snapshot(keys)`` (taken once a worker is free; ``keys``: the
        tables it must know); StorageUnavailable when the worker died under it."""
        async with self._slots:
            keys: list[tuple[str, str]] = []
            while True:
                planned = await self._run(request, await snapshot(keys))
                if not isinstance(planned, Missing):
                    return planned
                assert not set(planned.keys) & set(keys), "a looked-up table asked for again"
                keys += planned.keys

    async def _run(self, request: WriteRequest, snapshot: WriteSnapshot) -> Planned:
        pool, submitted = self._submit(request, snapshot)
        try:
            return await asyncio.wrap_future(submitted)
        except BrokenProcessPool as exc:
            self._discard(pool, exc)
            raise StorageUnavailable("the worker process planning this write stopped (out of memory?): nothing was "
                                     "written") from None

    def _submit(self, request: WriteRequest, snapshot: WriteSnapshot) -> tuple[ProcessPoolExecutor, Future[Planned]]:
        """The plan handed to the pool; a pool broken while idle (a worker killed) is replaced first."""
        pool = self._pool()
        try:
            return pool, pool.submit(_work, request, snapshot)
        except BrokenProcessPool as exc:
            self._discard(pool, exc)
        pool = self._pool()
        return pool, pool.submit(_work, request, snapshot)

    def _pool(self) -> ProcessPoolExecutor:
        if self._closed:
            raise StorageUnavailable("the node is stopping: nothing was written")
        if self._executor is None:
            self._executor = ProcessPoolExecutor(self.processes, mp_context=self._context, initializer=_start,
                                                 initargs=(self.gate, self.begun, os.getpid()))
        return self._executor

    def _discard(self, pool: ProcessPoolExecutor, exc: BaseException) -> None:
        """Forget a broken pool (once, however many of its plans report it); the next plan makes a new one."""
        if self._executor is pool:
            log.error("an ingest worker process stopped (%s); the ingest workers are started again", exc)
            self._executor = None
            pool.shutdown(wait=False, cancel_futures=True)

    async def close(self) -> None:
        """Stop the workers (:func:`~walgate.gateway.worker_processes.stop_pool`: terminated, waited for up to
        :data:`SHUTDOWN_S`, then killed; a plan held at the gate is let go)."""
        self._closed = True
        self.gate.value = 1
        executor, self._executor = self._executor, None
        await stop_pool(executor, "ingest workers")
