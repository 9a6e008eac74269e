"""A clock for tests: it stands still until the test moves it (:class:`walgate.storage.clock.Clock`)."""

from __future__ import annotations

import time

from walgate.storage.clock import Clock

NOV_2023_NS = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z: a whole second, a multiple of 10 s


class ManualClock(Clock):
    """Wall and monotonic time that move only by :meth:`advance`, both by the same amount."""

    def __init__(self, wall_ns: int = NOV_2023_NS, monotonic: float = 1000.0) -> None:
        self.wall_ns = wall_ns
        self.mono = monotonic

    @classmethod
    def from_now(cls) -> ManualClock:
        """Starting at the machine's wall time, for what compares against file times (retention by segment age):
        then a file written during the test is at most the test's duration younger than the clock."""
        return cls(time.time_ns())

    def time_ns(self) -> int:
        return self.wall_ns

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall_ns += round(seconds * 1e9)
        self.mono += seconds
