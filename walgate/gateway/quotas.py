"""Client quota enforcement on the event loop, as Kafka's ``ClientQuotaManager`` does it.

The quotas themselves live in the catalog (:mod:`walgate.storage.quotas`); :class:`ClientQuotas` holds a copy on
the event loop (:meth:`ClientQuotas.configure`, at start and after every AlterClientQuotas) and the rates measured
against them. With no quota configured every call returns 0 after one check: no lookup, no measurement.

Which quota applies to a request of principal ``User:<user>`` and client id ``<client>`` is Kafka's precedence, the
first entity holding the key: (user, client), (user, default client), (user), (default user, client), (default user,
default client), (default user), (client), (default client). The user of an unauthenticated connection is
``ANONYMOUS``, so default-user quotas apply to it. The rate is measured per the entity's dimensions with the real
names (a default-user quota gives every user a rate of its own; a user quota is shared by all the user's client ids).

Rates are Kafka's sampled ``Rate``: ``SAMPLES`` windows of ``WINDOW_S`` seconds; the rate is the windows' total over
the time they span, counted as at least ``SAMPLES - 1`` whole windows (so a first burst is averaged over ~10 s, not
over its own duration). A value that takes the rate above the bound gives a throttle time of
``(rate - bound) / bound * span`` ms (Kafka's ``QuotaUtils.throttleTime``); request-time throttles are capped at one
window (Kafka's ``ClientRequestQuotaManager``).

What is measured: ``producer_byte_rate`` the record bytes of each Produce, ``consumer_byte_rate`` the record bytes of
each Fetch and ShareFetch answer (bounded by what the quota allows over ten windows; an answer that would go over
is answered without records, its bytes not counted, as Kafka does), and
``request_percentage`` the time handlers take, in percent of one second per second, for every API but the exempt
ones (ApiVersions, SASL) and the long polls Fetch and ShareFetch (their wait is no work). That time is wall time
from the handler's start to its answer, waits for the storage thread and for group commit's fdatasync included: Kafka counts the CPU time of
its request handler threads, which an asyncio handler cannot tell apart from its waits, so a walgate
``request_percentage`` throttles earlier than Kafka's would under the same load. A throttled request is answered at once with ``throttle_time_ms`` set; the
connection then reads nothing more for that long (Kafka mutes the channel; KIP-219 clients also hold back).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping

from walgate.storage.quotas import CLIENT_ID, USER, Entity, QuotaValues

__all__ = ["ClientQuotas", "SAMPLES", "WINDOW_S", "PRODUCE", "FETCH", "REQUEST"]

SAMPLES = 11  # Kafka's quota.window.num
WINDOW_S = 1.0  # Kafka's quota.window.size.seconds
PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
# Fetch and ShareFetch (long polls: see the module docstring), SaslHandshake, ApiVersions, SaslAuthenticate
_EXEMPT_APIS = frozenset({1, 78, 17, 18, 36})
_MAX_SENSORS = 10_000  # rates kept before idle ones are dropped
_USER_PREFIX = "User:"


class _Rate:
    """Kafka's sampled rate: the sum of the last ``SAMPLES`` windows over the time they span."""

    __slots__ = ("samples", "last")

    def __init__(self) -> None:
        self.samples: deque[list[float]] = deque()  # [window start, total]
        self.last = 0.0

    def record(self, value: float, now: float) -> None:
        samples = self.samples
        if not samples or now >= samples[-1][0] + WINDOW_S:
            samples.append([now, 0.0])
        samples[-1][1] += value
        while samples and samples[0][0] <= now - SAMPLES * WINDOW_S:
            samples.popleft()
        self.last = now

    def unrecord(self, value: float) -> None:
        if self.samples:
            self.samples[-1][1] -= value

    def span(self, now: float) -> float:
        """Seconds the rate is measured over (at least ``SAMPLES - 1`` windows)."""
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed // WINDOW_S)
        if full < SAMPLES - 1:
            elapsed += (SAMPLES - 1 - full) * WINDOW_S
        return elapsed

    def rate(self, now: float) -> float:
        return sum(s[1] for s in self.samples if s[0] > now - SAMPLES * WINDOW_S) / self.span(now)


def _precedence(user: str, client: str) -> tuple[tuple[Entity, str, str], ...]:
    """(entity, user dimension, client dimension) in Kafka's order of precedence."""
    return (
        (((CLIENT_ID, client), (USER, user)), user, client),
        (((CLIENT_ID, None), (USER, user)), user, client),
        (((USER, user),), user, ""),
        (((CLIENT_ID, client), (USER, None)), user, client),
        (((CLIENT_ID, None), (USER, None)), user, client),
        (((USER, None),), user, ""),
        (((CLIENT_ID, client),), "", client),
        (((CLIENT_ID, None),), "", client),
    )


class ClientQuotas:
    """The quotas in force and the rates measured against them (event loop only)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._config: dict[Entity, QuotaValues] = {}
        self.keys: frozenset[str] = frozenset()  # quota keys some entity sets: nothing else is measured
        self._bounds: dict[tuple[str, str, str], tuple[float, tuple[str, str, str]] | None] = {}
        self._rates: dict[tuple[str, str, str], _Rate] = {}

    def configure(self, config: Mapping[Entity, QuotaValues]) -> None:
        """Enforce ``config`` from now on (rates measured so far are kept, as Kafka keeps its sensors)."""
        self._config = {entity: dict(values) for entity, values in config.items()}
        self.keys = frozenset(k for values in self._config.values() for k in values)
        self._bounds.clear()

    def _bound(self, key: str, principal: str, client: str) -> tuple[float, tuple[str, str, str]] | None:
        """The bound on ``key`` for this principal and client id and the rate it is measured in, or None."""
        memo = (key, principal, client)
        if memo in self._bounds:
            return self._bounds[memo]
        user = principal[len(_USER_PREFIX):] if principal.startswith(_USER_PREFIX) else principal
        found = None
        for entity, user_dim, client_dim in _precedence(user, client):
            value = self._config.get(entity, {}).get(key)
            if value is not None:
                found = value, (key, user_dim, client_dim)
                break
        if len(self._bounds) >= _MAX_SENSORS:
            self._bounds.clear()
        self._bounds[memo] = found
        return found

    def _record(self, key: str, principal: str, client: str, value: float, *, cap_ms: float | None = None,
                undo_if_over: bool = False) -> int:
        if key not in self.keys:
            return 0
        bound = self._bound(key, principal, client or "")
        if bound is None:
            return 0
        limit, sensor = bound
        now = self._clock()
        rate = self._rates.get(sensor)
        if rate is None:
            if len(self._rates) >= _MAX_SENSORS:
                self._rates = {k: r for k, r in self._rates.items() if r.last > now - SAMPLES * WINDOW_S}
            rate = self._rates[sensor] = _Rate()
        rate.record(value, now)
        observed = rate.rate(now)
        if observed <= limit:
            return 0
        if undo_if_over:
            rate.unrecord(value)
        throttle = (observed - limit) / limit * rate.span(now) * 1000
        if cap_ms is not None:
            throttle = min(throttle, cap_ms)
        return max(round(throttle), 1)

    def produce(self, principal: str, client: str | None, nbytes: int) -> int:
        """Record a Produce of ``nbytes`` record bytes; the throttle time (ms, 0: within quota)."""
        return self._record(PRODUCE, principal, client or "", nbytes)

    def fetch(self, principal: str, client: str | None, nbytes: int) -> int:
        """Record a Fetch or ShareFetch answer of ``nbytes`` record bytes; the throttle time (ms). Over the quota,
        the bytes are not counted: the caller answers without records, as Kafka does."""
        return self._record(FETCH, principal, client or "", nbytes, undo_if_over=True)

    def fetch_window_bytes(self, principal: str, client: str | None) -> int | None:
        """The most record bytes one Fetch answer may carry: what the ``consumer_byte_rate`` allows over the
        measured span (Kafka's ``getMaxValueInQuotaWindow``), so a whole answer can fit the quota; None: no quota."""
        if FETCH not in self.keys:
            return None
        bound = self._bound(FETCH, principal, client or "")
        return None if bound is None else int(bound[0] * (SAMPLES - 1) * WINDOW_S)

    def request_time(self, api_key: int, principal: str, client: str | None, seconds: float) -> int:
        """Record ``seconds`` of handler time of a request; the throttle time (ms, at most one window)."""
        if api_key in _EXEMPT_APIS:
            return 0
        return self._record(REQUEST, principal, client or "", seconds * 100, cap_ms=WINDOW_S * 1000)
