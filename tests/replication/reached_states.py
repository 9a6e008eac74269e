"""Partition states the rules reach, drawn from a seeded ``random.Random``: what the seeded tests of elections and of
the partition-state codec run their checks over (tests/replication/test_elections.py,
tests/cluster/test_partition_states.py)."""

from __future__ import annotations

import random

from walgate.replication.partition import AlterIsr, IsrMember, PartitionState, alter_partition, initial_state, reconcile


def registrations(rng: random.Random, epochs: dict[int, int]) -> dict[int, int]:
    """Node -> broker epoch of the nodes of ``epochs`` registered now: each with probability 0.7, one in five of them
    restarted since (its epoch one higher)."""
    return {n: e + (rng.random() < 0.2) for n, e in epochs.items() if rng.random() < 0.7}


def reached_state(rng: random.Random) -> tuple[PartitionState, dict[int, int], dict[int, int]]:
    """A state the rules reach: an initial state of 1-5 replicas, then up to six steps of new registrations, each
    the controller's reconciliation (fencing, elections) or the leader's ISR change admitting every live replica.
    Returns the state, each replica's first broker epoch, and the registrations of the last step (the first epochs
    when there was none)."""
    nodes = rng.sample(range(1, 9), rng.randint(1, 5))
    epochs = {n: rng.randint(1, 50) for n in nodes}
    state = initial_state(tuple(nodes), {n: e for n, e in epochs.items() if rng.random() < 0.8},
                          rng.randint(1, len(nodes)), rng.random() < 0.3)
    live = dict(epochs)
    for _ in range(rng.randint(0, 6)):
        live = registrations(rng, epochs)
        mine = tuple(m for m in state.isr if m.replica == state.leader)
        joiners = tuple(IsrMember(n, e) for n, e in live.items() if n != state.leader)
        new = reconcile(state, live) if rng.random() < 0.6 else alter_partition(state, AlterIsr(
            state.leader, state.leader_epoch, state.partition_epoch, tuple(sorted(mine + joiners)),
            mine[0].broker_epoch if mine else 0), live)
        state = new if isinstance(new, PartitionState) else state
    return state, epochs, live
