"""A coordinator's timer on the event loop: one ``loop.call_later`` armed at the coordinator's next deadline, and
at most one tick running.

The group and share services arm it after every call of their coordinator. When it fires, the service's tick runs
as a task (kept, so it cannot be lost; never two at once). A tick that raises is logged in one line, without a
traceback (what refused it, usually the disk, is in the message), and the timer is armed again
:data:`TICK_RETRY_S` later: a coordinator's timer never stops silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

__all__ = ["DeadlineTimer", "TICK_RETRY_S"]

TICK_RETRY_S = 1.0
"""Seconds before the timer runs again after a tick failed."""


class DeadlineTimer:
    """The armed wake-up (``call_later``) and the running tick of one coordinator (event loop only)."""

    def __init__(self, name: str, tick: Callable[[], Awaitable[object]], clock_ms: Callable[[], int],
                 log: logging.Logger) -> None:
        """``name``: what the failure line calls the timer (its tick task is ``walgate-<name with dashes>``);
        ``tick``: the service's call that runs what is due (and arms the timer again); ``clock_ms``: the clock the
        coordinator's deadlines are on."""
        self._name = name
        self._tick = tick
        self._clock_ms = clock_ms
        self._log = log
        self._handle: asyncio.TimerHandle | None = None
        self._due_ms = 0  # when the armed handle is due, on clock_ms
        self._task: asyncio.Task[None] | None = None

    def arm(self, deadline_ms: int) -> None:
        """Fire at ``deadline_ms`` (at once when it has passed), replacing the armed time, if any."""
        self.cancel()
        self._due_ms = deadline_ms
        delay_s = max(deadline_ms - self._clock_ms(), 0) / 1000
        self._handle = asyncio.get_running_loop().call_later(delay_s, self._start)

    def cancel(self) -> None:
        """Disarm (no deadline); a running tick goes on."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    async def run_if_due(self) -> None:
        """Run the tick now when the armed time has passed but its callback has not run yet (a starved event loop
        may hand a request over first): the request then sees what was due, as a timer thread would have done it."""
        if self._handle is not None and self._clock_ms() >= self._due_ms:
            self.cancel()
            await self._run()

    def close(self) -> None:
        """Stop: disarm and cancel a running tick (shutdown)."""
        self.cancel()
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def _start(self) -> None:
        self._handle = None
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="walgate-" + self._name.replace(" ", "-"))

    async def _run(self) -> None:
        try:
            await self._tick()
        except Exception as exc:  # noqa: BLE001 - logged in one line and tried again: the timer never stops
            self._log.error("%s tick failed (%s: %s); next tick in %.0f s", self._name, type(exc).__name__, exc,
                            TICK_RETRY_S)
            self.arm(self._clock_ms() + int(TICK_RETRY_S * 1000))
