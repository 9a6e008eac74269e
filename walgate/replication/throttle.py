"""Replication throttles (KIP-73): a node's byte-rate quota on the WAL entries it sends or copies for throttled
replicas, as Kafka's ``ReplicationQuotaManager`` keeps one for the leader side and one for the follower side.

Which replicas are throttled is a topic's lists (Kafka's ``ThrottledReplicaListValidator`` values, checked when set:
:mod:`walgate.storage.topic_configs`): ``leader.replication.throttled.replicas`` names the partitions whose leader
on broker ``b`` throttles what it sends (``p:b``), ``follower.replication.throttled.replicas`` those whose follower
on ``b`` throttles what it copies; ``*`` every partition on every broker. :func:`throttled` reads one list for one
node, as Kafka's ``TopicConfigHandler.parseThrottledPartitions`` keeps only the entries naming its own broker id.

The rate (``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate``, bytes/s, dynamic broker
configs; unlimited by default) bounds a :class:`ReplicationQuota`, Kafka's ``SimpleRate`` sensor: the bytes recorded
in the last :data:`SAMPLES` windows of :data:`WINDOW_S` seconds (Kafka's ``replication.quota.window.num`` /
``replication.quota.window.size.seconds`` defaults) over the time since the oldest window kept began, at least one
window. Every throttled replica's bytes are recorded, in sync or not (so replication traffic as a whole stays under
the rate); only a replica that is not in sync is held back while the rate is above the bound (Kafka's
``shouldLeaderThrottle`` and ``shouldFollowerThrottle``): the leader answers its fetch without entries, the follower
leaves it out of its next fetches for :meth:`ReplicationQuota.delay`.

Pure: the time is passed in (seconds on any monotonic clock).
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["SAMPLES", "UNLIMITED", "WINDOW_S", "ReplicationQuota", "rate_in_force", "throttled"]

SAMPLES = 11  # Kafka's replication.quota.window.num
WINDOW_S = 1.0  # Kafka's replication.quota.window.size.seconds
UNLIMITED = math.inf  # the rate configs' default, Long.MAX_VALUE bytes/s


def throttled(value: str, partition: int, node_id: int) -> bool:
    """Whether the throttled-replica list ``value`` (``""``, ``*`` or ``p:b,...``) throttles partition ``partition``
    on node ``node_id``."""
    items = [x.strip() for x in value.split(",") if x.strip()]
    if items == ["*"]:
        return True
    pairs = (x.split(":") for x in items)
    return any(len(pair) == 2 and pair[0].isdigit() and pair[1].isdigit() and (int(pair[0]), int(pair[1])) == (
        partition, node_id) for pair in pairs)


def rate_in_force(own: str | None, cluster: str | None) -> float:
    """A rate config's bound in bytes/s: this node's own dynamic value, else the cluster default, else unlimited (the
    values are validated LONGs, at least 0, when set)."""
    value = own if own is not None else cluster
    return UNLIMITED if value is None else float(value)


class ReplicationQuota:
    """One side's byte rate against its bound (``bound`` bytes/s; :data:`UNLIMITED`: never exceeded).

    Invariant: ``samples`` holds the windows begun within the last ``SAMPLES * WINDOW_S`` seconds of the latest time
    seen, oldest first, each ``[start, bytes recorded in it]``; ``total`` is every byte ever recorded."""

    def __init__(self, bound: float = UNLIMITED) -> None:
        self.bound = bound
        self.samples: deque[list[float]] = deque()
        self.total = 0

    def _purge(self, now: float) -> None:
        while self.samples and self.samples[0][0] <= now - SAMPLES * WINDOW_S:
            self.samples.popleft()

    def record(self, size: int, now: float) -> None:
        """Count ``size`` bytes sent or copied at ``now``, whatever the bound (Kafka records without checking)."""
        self._purge(now)
        if not self.samples or now >= self.samples[-1][0] + WINDOW_S:
            self.samples.append([now, 0.0])
        self.samples[-1][1] += size
        self.total += size

    def _span(self, now: float) -> float:
        """Seconds the rate is measured over (Kafka's ``SimpleRate.windowSize``): since the oldest window began, at
        least one window."""
        return max(now - self.samples[0][0], WINDOW_S) if self.samples else WINDOW_S

    def rate(self, now: float) -> float:
        """Bytes/s recorded over the windows kept (Kafka's ``byte-rate`` metric)."""
        self._purge(now)
        return sum(s[1] for s in self.samples) / self._span(now)

    def exceeded(self, now: float) -> bool:
        """Whether the rate is above the bound (Kafka's ``isQuotaExceeded``: ``checkQuotas`` on the sensor)."""
        return self.bound != UNLIMITED and self.rate(now) > self.bound

    def delay(self, now: float) -> float:
        """Seconds until the rate, with nothing more recorded and no window expiring meanwhile, is back at the bound,
        at most one window: how long a follower leaves a throttled replica out of its fetches before it checks again
        (0 when not exceeded). An estimate: an old window expiring shortens the span the rate is measured over, which
        may keep it above the bound then (found by the property test), so the caller checks again."""
        if not self.exceeded(now):
            return 0.0
        if self.bound <= 0:
            return WINDOW_S
        kept = sum(s[1] for s in self.samples)  # (purged by exceeded)
        return min(WINDOW_S, kept / self.bound - (now - self.samples[0][0]))
