"""What the node's worker process pools share (:mod:`~walgate.gateway.query_workers`,
:mod:`~walgate.gateway.ingest_workers`): a worker runs at a lower priority (``nice`` +:data:`NICE`), leaves SIGINT to
the node and ends by itself within :data:`ORPHAN_CHECK_S` once its node is gone (even killed with SIGKILL, which
stops nothing else). A worker keeps nothing that must outlive it (a plan writes nothing; an answer file is its node's
to remove), so a pool is stopped by terminating its workers (SIGTERM) at once, waited for up to :data:`SHUTDOWN_S`,
then killed."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

__all__ = ["NICE", "ORPHAN_CHECK_S", "SHUTDOWN_S", "pool_pids", "start_worker", "stop_pool"]

log = logging.getLogger(__name__)

NICE = 10
ORPHAN_CHECK_S = 0.5  # a worker whose node died (kill -9) ends within this
SHUTDOWN_S = 5.0  # how long a node's shutdown waits for its workers before killing them


def start_worker(node: int, name: str) -> None:
    """In a worker process, first: lower its priority, leave SIGINT to the node, and end it when the node ``node``
    (a pid) is gone (a daemon thread named ``name`` checks every :data:`ORPHAN_CHECK_S`)."""
    os.nice(NICE)
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch_node() -> None:
        while os.getppid() == node:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch_node, name=name, daemon=True).start()


def pool_pids(executor: ProcessPoolExecutor | None) -> list[int]:
    """The worker processes of ``executor`` running now (none without a pool)."""
    return [] if executor is None else [p.pid for p in list(executor._processes.values()) if p.pid is not None]


async def stop_pool(executor: ProcessPoolExecutor | None, what: str) -> None:
    """Stop ``executor``'s workers (``what`` they are, for the log): terminated at once, since a worker that is
    still importing or running a query reads no stop request (a nice +10 process on a busy machine can take seconds),
    waited for up to :data:`SHUTDOWN_S`, then killed."""
    if executor is None:
        return
    pids = pool_pids(executor)
    stopping = asyncio.ensure_future(asyncio.to_thread(executor.shutdown, wait=True, cancel_futures=True))
    _signal(pids, signal.SIGTERM)
    done, _ = await asyncio.wait({stopping}, timeout=SHUTDOWN_S)
    if not done:
        log.warning("%s %s did not stop within %.0f s; killed", what, pids, SHUTDOWN_S)
        _signal(pids, signal.SIGKILL)
        await stopping


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
