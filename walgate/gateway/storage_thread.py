"""The one thread that touches the storage engine.

The engine is synchronous and not thread-safe, and its calls may block on disk
I/O and fsync. Every engine call therefore goes through :meth:`StorageThread.call`,
which runs it on a single dedicated worker thread and awaits the result, so the
event loop never blocks and engine calls never overlap. Calls run in submission
order. Cancelling the awaiting task drops a call that is still queued; a call
that has started always runs to completion (engine calls are all-or-nothing).

Calls are submitted on the event loop only, so :attr:`StorageThread.queued`
(submitted, not yet started) is two plain counters, each written by one thread.
Every call that runs is reported to ``on_call(waited, ran)`` (seconds queued,
seconds running) on the storage thread: the gateway's metrics.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["StorageThread"]

P = ParamSpec("P")
T = TypeVar("T")


class StorageThread:
    """A single-worker executor for engine calls."""

    def __init__(self, on_call: Callable[[float, float], None] | None = None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="walgate-storage")
        self._on_call = on_call
        self._submitted = 0  # written on the event loop only
        self._started = 0  # written on the storage thread only
        self._dropped = 0  # cancelled before they started (event loop only)

    @property
    def queued(self) -> int:
        """Calls waiting for the storage thread (not counting the one running)."""
        return self._submitted - self._started - self._dropped

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the storage thread and return its result (or raise its exception)."""
        self._submitted += 1
        submitted = self._executor.submit(self._run, time.perf_counter(), functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.wrap_future(submitted)
        except asyncio.CancelledError:
            if submitted.cancelled():  # dropped from the queue before it started (asyncio cancels it first)
                self._dropped += 1
            raise

    def _run(self, submitted: float, fn: Callable[[], T]) -> T:
        start = time.perf_counter()
        self._started += 1
        try:
            return fn()
        finally:
            if self._on_call is not None:
                self._on_call(start - submitted, time.perf_counter() - start)

    def shutdown(self) -> None:
        """Wait for queued calls to finish and stop the thread."""
        self._executor.shutdown(wait=True)
