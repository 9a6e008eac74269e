"""Fetch from follower (KIP-392): which replica the leader tells a consumer to read a partition from.

A consumer's Fetch (v11+) names its rack (``client.rack``, the request's ``rack_id``). The leader, when a replica
selector is configured (``replica.selector.class``), answers a consumer fetch with ``preferred_read_replica`` set
and no records; the client then fetches that partition from that replica until it errs or its metadata ages out.
This module is Kafka's ``ReplicaManager.findPreferredReadReplica`` with its two selectors:

* the candidates are the leader and each follower in the ISR whose log already holds every record below the fetch
  offset (a follower may lag: one that does not hold the offset would answer OFFSET_OUT_OF_RANGE, sending the client
  back to the leader, which would send it on again) and whose fetch state belongs to the ISR member's broker
  epoch (KIP-903: a restarted follower is not that member until admitted anew);
* :data:`LEADER_SELECTOR` picks the leader; :data:`RACK_AWARE_SELECTOR` picks the leader when the client names no
  rack, when no candidate is in its rack, or when the leader is in it; otherwise the candidate of that rack with the
  highest log end, then the one caught up most recently, then the highest node id (Kafka's
  ``ReplicaView.comparator``);
* a follower with no endpoint on the client's listener is no candidate (Kafka names it ``Node.noNode()``, whose
  rack matches no client's); the leader picked is answered as no preference (-1): the leader serves the fetch.

Positions are WAL versions (log ends), as :class:`~walgate.replication.leader.LeaderView` keeps them. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import NamedTuple

from walgate.replication.leader import LeaderView
from walgate.replication.partition import same_incarnation

__all__ = ["LEADER_SELECTOR", "NO_PREFERENCE", "RACK_AWARE_SELECTOR", "REPLICA_SELECTORS", "Candidate",
           "preferred_read_replica", "rack_aware"]

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderReplicaSelector"
REPLICA_SELECTORS = (RACK_AWARE_SELECTOR, LEADER_SELECTOR)
"""The ``replica.selector.class`` values walgate takes: Kafka's two selectors (no setting: no selector)."""
NO_PREFERENCE = -1
"""``preferred_read_replica`` when the leader serves the fetch itself."""


class Candidate(NamedTuple):
    """An in-sync follower that may serve a consumer's fetch (Kafka's ``ReplicaView``): its node, rack (None: none),
    log end (a WAL version) and how long ago it was last caught up with the leader."""

    node: int
    rack: str | None
    log_end: int
    since_caught_up_ms: int


def rack_aware(client_rack: str | None, leader: int, leader_rack: str | None, followers: Collection[Candidate]) -> int:
    """Kafka's ``RackAwareReplicaSelector.select``: the ``leader`` unless the client names a rack that holds followers
    and not the leader; then the most caught-up follower of that rack."""
    if not client_rack or leader_rack == client_rack:
        return leader
    same = [c for c in followers if c.rack == client_rack]
    if not same:
        return leader
    return max(same, key=lambda c: (c.log_end, -c.since_caught_up_ms, c.node)).node


def preferred_read_replica(selector: str | None, client_rack: str | None, view: LeaderView, needed: int,
                           racks: Mapping[int, str | None], reachable: Collection[int], now_ms: int) -> int:
    """The ``preferred_read_replica`` the leader of ``view`` answers a consumer fetch with (the module docstring):
    :data:`NO_PREFERENCE` or the id of an in-sync follower in ``reachable`` (the nodes with an endpoint on the
    client's listener). ``needed``: the WAL version a replica's log must reach to hold every record below the fetch
    offset; ``racks``: node id -> ``broker.rack``; ``now_ms``: the clock of the view's fetch times."""
    if selector != RACK_AWARE_SELECTOR:  # no selector, or Kafka's LeaderReplicaSelector: the leader serves
        return NO_PREFERENCE
    followers = []
    for member in view.state.isr:
        known = view.followers.get(member.replica)
        if (member.replica != view.replica and member.replica in reachable and known is not None
                and same_incarnation(member.broker_epoch, known.broker_epoch) and known.fetched_end >= needed):
            followers.append(Candidate(member.replica, racks.get(member.replica), known.fetched_end,
                                       max(0, now_ms - known.last_caught_up_ms)))
    chosen = rack_aware(client_rack, view.replica, racks.get(view.replica), followers)
    return NO_PREFERENCE if chosen == view.replica else chosen
