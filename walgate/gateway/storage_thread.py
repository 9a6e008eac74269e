"""The one thread that touches the storage engine.

The engine is synchronous and not thread-safe, and its calls may block on disk
I/O and fsync. Every engine call therefore goes through :meth:`StorageThread.call`,
which runs it on a single dedicated worker thread and awaits the result, so the
event loop never blocks and engine calls never overlap. Calls run in submission
order. Cancelling the awaiting task drops a call that is still queued; a call
that has started always runs to completion (engine calls are all-or-nothing).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["StorageThread"]

P = ParamSpec("P")
T = TypeVar("T")


class StorageThread:
    """A single-worker executor for engine calls."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="walgate-storage")

    async def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the storage thread and return its result (or raise its exception)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        """Wait for queued calls to finish and stop the thread."""
        self._executor.shutdown(wait=True)
