"""The clock storage reads time from: an input passed to the engine, never read behind the caller's back.

Every reading of time in ``storage/`` goes through a :class:`Clock` the caller chose: :meth:`Engine.open
<walgate.storage.engine.Engine.open>` takes one (``clock=``) and hands it to the parts that stamp or age things
(the WAL's segment age and fsync period, ``now`` in INSERT / SELECT / line protocol / CSV / JSON rows, creation
times in the catalog, transaction markers, quarantine names, the producer-id floor after a lost file, the data-dir
migration); ``walgate repair`` takes one of its own. Functions that already take ``now`` keep taking it: the gateway reads
``Engine.sync_due``'s and ``Engine.clean``'s from the engine's clock (``Engine.clock``), and a committed offset's
time (``Engine.commit_offsets``) is the group coordinator's ``now_ms``. Tests pass a clock they move by hand.

:data:`SYSTEM_CLOCK` is the one implementation that reads the machine's clock. It lives here, not in the gateway,
because the storage layer's constructors default to it (storage imports nothing of the gateway) and because the
fsync latency that :mod:`~walgate.storage.fileio` measures is real time by nature; ``grep`` finds no other reading
of the clock in ``storage/``.

Invariant: ``time_ns`` is wall time (ns since the Unix epoch; it may jump when the machine's time is set),
``monotonic`` never goes back (seconds from an arbitrary origin, for intervals only); ``time_ms`` and ``time``
are ``time_ns`` in other units.
"""

from __future__ import annotations

import time as _time
from typing import Final, Protocol

__all__ = ["Clock", "SYSTEM_CLOCK", "SystemClock"]


class Clock(Protocol):
    """Wall time and monotonic time (see the module docstring). An implementation gives ``time_ns`` and
    ``monotonic``; subclassing this protocol gives it ``time_ms`` and ``time`` derived from ``time_ns``."""

    def time_ns(self) -> int:
        """Wall time: ns since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals: segment age is wall time, fsync periods are this)."""
        ...

    def time_ms(self) -> int:
        """Wall time: ms since the Unix epoch."""
        return self.time_ns() // 1_000_000

    def time(self) -> float:
        """Wall time: seconds since the Unix epoch."""
        return self.time_ns() / 1e9


class SystemClock(Clock):
    """The machine's clocks: :func:`time.time_ns` and :func:`time.monotonic`."""

    def time_ns(self) -> int:
        return _time.time_ns()

    def monotonic(self) -> float:
        return _time.monotonic()


SYSTEM_CLOCK: Final[Clock] = SystemClock()
"""The real clock: what every storage constructor defaults to and what the gateway passes."""
