"""The server assignor of consumer groups: ``uniform``, TDengine's even split of each topic's partitions.

For each subscribed topic, its n partitions (a database's vgroups) are split over the k members subscribed to it:
every member gets n // k and n % k of them one more, so 4 partitions and 3 members give 2, 1, 1 and a fifth member
idles. The split is sticky: a member keeps what its previous target gave it as far as its quota allows, so a
membership change moves as few partitions as it can. It is a pure function of the members (in join order), the
partition counts and the previous target: the same inputs always give the same assignment.

The name is that of Kafka's default server assignor (``UniformAssignor``), whose placement differs in detail;
Kafka's other one, ``range``, is not offered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from walgate.coordinator.consumer_model import (
    Assignment,
    ConsumerGroupMember,
    clean_assignment,
)

__all__ = ["UNIFORM_ASSIGNOR", "uniform_assignment"]

UNIFORM_ASSIGNOR: Final = "uniform"
"""The one server assignor (ConsumerGroupHeartbeat's ``server_assignor``; any other is UNSUPPORTED_ASSIGNOR)."""


def uniform_assignment(
    members: Sequence[ConsumerGroupMember],
    partition_counts: Mapping[str, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment: per topic, an even split over the members subscribed to it, sticky.

    Members are taken in *members* order (join order). For a topic of n
    partitions and k subscribed members every member gets n // k partitions
    and n % k of them one more: those that held the most of the topic in
    *previous* (the last target), then those with the fewest partitions so far
    (balance across topics), then join order. Each member keeps as many of its
    previous partitions as its quota allows (lowest ids first); the rest is
    dealt out in partition order.
    """
    result: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in members}
    totals = {m.member_id: 0 for m in members}
    for topic in sorted(partition_counts):
        n = partition_counts[topic]
        subscribers = [m for m in members if topic in m.subscribed_topic_names]
        if n <= 0 or not subscribers:
            continue
        k = len(subscribers)
        base, extra = divmod(n, k)
        held = {
            m.member_id: sorted(p for p in previous.get(m.member_id, {}).get(topic, ()) if p < n) for m in subscribers
        }
        order = {m.member_id: i for i, m in enumerate(subscribers)}
        ranked = sorted(subscribers, key=lambda m: (-len(held[m.member_id]), totals[m.member_id], order[m.member_id]))
        quota = {m.member_id: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
        taken: set[int] = set()
        chosen: dict[str, list[int]] = {}
        for m in subscribers:
            keep = held[m.member_id][: quota[m.member_id]]
            chosen[m.member_id] = keep
            taken.update(keep)
        free = iter(p for p in range(n) if p not in taken)
        for m in subscribers:
            mine = chosen[m.member_id]
            while len(mine) < quota[m.member_id]:
                mine.append(next(free))
            if mine:
                result[m.member_id][topic] = sorted(mine)
                totals[m.member_id] += len(mine)
    return {mid: clean_assignment(a) for mid, a in result.items()}
