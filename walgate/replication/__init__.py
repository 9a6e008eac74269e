"""Kafka's replication rules for one vgroup (partition), as a pure and synchronous core.

The core the replication work of issue 25 builds on; not yet wired to the server. Nothing here does I/O, reads a
clock or starts a task: the data plane (and, today, the deterministic simulation in ``tests/replication/``) hands
these functions what it observed and carries out what they return.

* :mod:`~walgate.replication.epochs`: a replica's leader-epoch cache and the follower's truncation by epoch
  (KIP-101, KIP-279).
* :mod:`~walgate.replication.partition`: the partition state kept in the control plane (leader, epochs, ISR with
  broker epochs, ELR), the changes the leader proposes and the compare-and-swap that applies them (KIP-497,
  KIP-903), the controller's fencing and election (KIP-841, KIP-966), leader-epoch fencing of requests (KIP-320).
* :mod:`~walgate.replication.leader`: the leader's view of its followers: fetch validation, ISR shrink and
  expansion, the high watermark over durable positions, acks=all.

``docs/replication.md`` describes the rules and the simulation that checks them.
"""
