"""A deterministic simulation of one replicated partition running walgate's replication core.

Everything is simulated and driven by one seeded RNG and one event queue: N replicas with logs (entries of leader
epoch and value; a durable prefix and an unsynced tail lost on a crash), a network that delays, drops and reorders
messages and can be cut between any two parties, a clock, an etcd-like register holding registrations on leases
and the partition state (compare-and-swap on the partition epoch), a controller beside it that fences and elects,
and producers sending acks=all writes of unique values. What the replicas decide comes from
:mod:`walgate.replication` (called through its modules, so that a test can replace one rule by a broken one).

A run injects faults for ``fault_ms`` (one scenario per seed, see :data:`SCENARIOS`, plus random background faults),
then heals every link, resumes and restarts every node and lets the partition settle. :class:`Checker` records
what must hold while it runs and at the end:

* no acknowledged write lost: after settling, the leader holds every acknowledged value at the offset it was
  acknowledged with, below its high watermark;
* no duplicate: no value at two offsets;
* one value per offset: every replica's entries below its high watermark are the values first seen committed there,
  so the logs are identical below each replica's high watermark;
* a replica move (KIP-455, the ``replica_moves`` scenario: a fourth node starts outside the replicas, with an empty
  log) is complete once settled, and its new replicas hold every acknowledged value;
* the high watermark never decreases on a leader within its epoch;
* writes of one leader epoch are acknowledged by one leader only;
* after settling, every replica is back in the ISR (none left refusing its leader's entries for good).

A follower refuses fetched entries of an epoch older than its cache's latest, as a vnode does
(:meth:`walgate.storage.vnode.Vnode.append_replicated`), and its truncation at its log's end drops an epoch starting
there, as :func:`walgate.storage.truncation.truncate_vnode` does.

``python tests/replication/replication_sim.py --seed N`` reruns one seed and prints its violations and trace;
``--seeds N`` runs seeds 0..N-1.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from walgate.replication import epochs, leader, partition, reassignment
from walgate.replication.epochs import EpochEnd, LeaderEpochCache
from walgate.replication.partition import NO_LEADER, AlterIsr, PartitionState
from walgate.wire.errors import ErrorCode

ETCD = -1
PRODUCER = 100


@dataclass(frozen=True)
class Config:
    """Times in simulated milliseconds (Kafka's defaults scaled down by about 100)."""

    nodes: int = 3
    spares: int = 0  # the last nodes, outside the replicas at first (a move's adding replicas, empty logs)
    min_isr: int = 2
    producers: int = 4
    fault_ms: int = 1200
    settle_ms: int = 900
    tick_ms: int = 5
    lease_ttl_ms: int = 90
    keepalive_ms: int = 30
    lag_max_ms: int = 100
    metadata_ms: int = 15
    fetch_max: int = 20
    fsync_chance: float = 0.3
    produce_timeout_ms: int = 120
    client_timeout_ms: int = 150
    delay_ms: tuple[int, int] = (1, 12)
    drop_chance: float = 0.02


@dataclass
class Entry:
    epoch: int
    value: int


@dataclass
class Registration:
    broker_epoch: int
    incarnation: int
    expiry_ms: int


class Node:
    """One replica's process and disk."""

    def __init__(self, node_id: int) -> None:
        self.id = node_id
        self.up = True
        self.paused = False
        self.session = 0
        self.incarnation = node_id
        self.broker_epoch: int | None = None
        self.log: list[Entry] = []
        self.durable = 0
        self.cache = LeaderEpochCache()
        self.hw = 0
        self.deferred: list[tuple[Callable[..., None], tuple[Any, ...]]] = []
        self.reset_process()

    def reset_process(self) -> None:
        """What a process holds in memory only (lost on a crash)."""
        self.broker_epoch = None
        self.process_epoch: int | None = None  # this process's broker epoch, from its first registration on
        self.view: PartitionState | None = None
        self.registered: dict[int, int] = {}
        self.lead: leader.LeaderView | None = None
        self.following: tuple[int, int] | None = None
        self.truncated = False
        self.ofle_sent = -10_000
        self.fetch_id = 0
        self.fetch_sent = -10_000
        self.fetch_inflight = False
        self.keepalive_sent = -10_000
        self.register_sent = -10_000
        self.metadata_sent = -10_000
        self.alter_inflight = False
        self.alter_sent = -10_000
        self.pending: dict[int, tuple[int, int, int, int]] = {}
        self.deferred = []


class Checker:
    """The invariants observed while the simulation runs; :meth:`final` adds the end-state ones."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.committed: dict[int, int] = {}
        self.hw_seen: dict[tuple[int, int], int] = {}
        self.ack_leaders: dict[int, set[int]] = {}
        self.acks: list[tuple[int, int, int, int]] = []

    def commit(self, who: str, log: list[Entry], old: int, new: int) -> None:
        for offset in range(old, new):
            value = log[offset].value
            first = self.committed.setdefault(offset, value)
            if first != value:
                self.violations.append(f"{who}: offset {offset} committed as {value}, first committed as {first}")

    def leader_hw(self, node: int, epoch: int, hw: int) -> None:
        last = self.hw_seen.get((node, epoch), hw)
        if hw < last:
            self.violations.append(f"leader {node} epoch {epoch}: high watermark went back from {last} to {hw}")
        self.hw_seen[(node, epoch)] = max(hw, last)

    def ack(self, value: int, offset: int, epoch: int, node: int) -> None:
        self.acks.append((value, offset, epoch, node))
        leaders = self.ack_leaders.setdefault(epoch, set())
        leaders.add(node)
        if len(leaders) > 1:
            self.violations.append(f"epoch {epoch}: writes acknowledged by leaders {sorted(leaders)}")

    def final(self, nodes: list[Node], state: PartitionState) -> None:
        for node in nodes:
            values = [e.value for e in node.log]
            if len(values) != len(set(values)):
                dup = sorted({v for v in values if values.count(v) > 1})[:5]
                self.violations.append(f"node {node.id}: duplicate values {dup}")
            for offset in range(node.hw):
                first = self.committed.get(offset)
                if first is not None and node.log[offset].value != first:
                    self.violations.append(f"node {node.id}: offset {offset} holds {node.log[offset].value} below "
                                           f"its high watermark {node.hw}, committed as {first}")
                    break
        for a in nodes:
            for b in nodes:
                common = min(a.hw, b.hw)
                if a.id < b.id and [e.value for e in a.log[:common]] != [e.value for e in b.log[:common]]:
                    self.violations.append(f"nodes {a.id} and {b.id} differ below high watermark {common}")
        serving = nodes[state.leader].lead if state.leader != NO_LEADER else None
        if serving is None or serving.leader_epoch != state.leader_epoch:
            self.violations.append(f"no serving leader after settling: {state}")
            return
        if state.moving:
            self.violations.append(f"a replica move still in progress after settling: {state}")
        out = [n.id for n in nodes if n.id in state.replicas and n.id not in state.isr_ids]
        if out:
            self.violations.append(f"replicas {out} out of the ISR after settling: {state}")
        final = nodes[state.leader]
        for value, offset, epoch, node in self.acks:
            if offset >= final.hw or final.log[offset].value != value:
                held = final.log[offset].value if offset < len(final.log) else None
                self.violations.append(f"acknowledged value {value} at offset {offset} (epoch {epoch}, leader {node}) "
                                       f"lost: final leader {final.id} holds {held}, high watermark {final.hw}")


class Simulation:
    """One seeded run; :meth:`run` returns the checker's violations."""

    def __init__(self, seed: int, config: Config | None = None, scenario: str | None = None) -> None:
        self.seed = seed
        self.cfg = config or Config()
        self.rng = random.Random(seed)
        self.scenario = scenario or SCENARIO_NAMES[seed % len(SCENARIO_NAMES)]
        self.now = 0
        self.queue: list[tuple[int, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = 0
        self.cut: set[frozenset[int]] = set()
        self.nodes = [Node(i) for i in range(self.cfg.nodes)]
        self.registrations: dict[int, Registration] = {}
        self.revision = 0
        self.known_incarnation: dict[int, int] = {}
        self.check = Checker()
        self.trace: list[str] = []
        self.next_value = 0
        self.request_id = 0
        self.inflight: dict[int, int] = {}
        self.wiped_once = False
        self.isr_changes = 0
        self.producer_view: PartitionState | None = None
        for node in self.nodes:
            node.broker_epoch = node.process_epoch = self._register(node, None)
        live = self._live()
        self.state = partition.initial_state(tuple(range(self.cfg.nodes - self.cfg.spares)), live, self.cfg.min_isr)
        self.known_incarnation = {n.id: n.incarnation for n in self.nodes}

    # -- the event queue and the network ------------------------------------------------------------------------

    def at(self, delay: int, fn: Callable[..., None], *args: Any) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (self.now + delay, self.seq, fn, args))

    def log(self, text: str) -> None:
        self.trace.append(f"{self.now:5d} {text}")

    def send(self, src: int, dst: int, fn: Callable[..., None], *args: Any) -> None:
        """Deliver ``fn(*args)`` at ``dst`` after a random delay, unless the link is cut or the message dropped (only
    during the fault phase: once settling, the network delays but loses nothing)."""
        if frozenset((src, dst)) in self.cut or (self.now < self.cfg.fault_ms and self.rng.random() < self.cfg.drop_chance):
            return
        self.at(self.rng.randint(*self.cfg.delay_ms), self._deliver, src, dst, fn, args)

    def _deliver(self, src: int, dst: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if frozenset((src, dst)) in self.cut:
            return
        fn(*args)

    def to_node(self, src: int, node: Node, fn: Callable[..., None], *args: Any) -> None:
        """A message for ``node``'s current process: lost if it crashed meanwhile, held while it is paused."""
        self.send(src, node.id, self._at_node, node, node.session, fn, args)

    def _at_node(self, node: Node, session: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        if not node.up or node.session != session:
            return
        if node.paused:
            node.deferred.append((fn, args))
            return
        fn(*args)

    # -- etcd: registrations on leases, the partition state, the controller ---------------------------------------

    def _register(self, node: Node, process_epoch: int | None) -> int:
        """A registration (a new revision): under ``process_epoch`` when the process registered before (its lease
        lost, not restarted: walgate's registry keeps the epoch, KIP-903), else under the new revision."""
        self.revision += 1
        epoch = self.revision if process_epoch is None else process_epoch
        self.registrations[node.id] = Registration(epoch, node.incarnation, self.now + self.cfg.lease_ttl_ms)
        return epoch

    def _live(self) -> dict[int, int]:
        return {n: r.broker_epoch for n, r in self.registrations.items() if r.expiry_ms > self.now}

    def etcd_register(self, node: Node, session: int, process_epoch: int | None) -> None:
        epoch = self._register(node, process_epoch)
        self.log(f"node {node.id} registers: broker epoch {epoch}")
        self.to_node(ETCD, node, self.on_registered, node, session, epoch)

    def etcd_keepalive(self, node: Node, broker_epoch: int) -> None:
        reg = self.registrations.get(node.id)
        alive = reg is not None and reg.broker_epoch == broker_epoch and reg.expiry_ms > self.now
        if alive and reg is not None:
            reg.expiry_ms = self.now + self.cfg.lease_ttl_ms
        self.to_node(ETCD, node, self.on_keepalive, node, broker_epoch, alive)

    def etcd_read(self, node: Node) -> None:
        self.to_node(ETCD, node, self.on_metadata, node, self.state, self._live())

    def etcd_alter(self, node: Node, proposal: AlterIsr) -> None:
        result = partition.alter_partition(self.state, proposal, self._live())
        if isinstance(result, PartitionState):
            self.log(f"AlterPartition by {node.id}: isr {[m.replica for m in result.isr]} elr {result.elr}")
            self.isr_changes += 1
            self.state = result
        self.to_node(ETCD, node, self.on_altered, node, result, self.state, self._live())

    def controller_tick(self) -> None:
        live = self._live()
        wiped = frozenset(n for n in live if self.registrations[n].incarnation != self.known_incarnation[n])
        new = partition.reconcile(self.state, live, wiped)
        for n in live:
            self.known_incarnation[n] = self.registrations[n].incarnation
        if new is not None:
            self.log(f"controller: leader {new.leader} epoch {new.leader_epoch} isr {[m.replica for m in new.isr]} "
                     f"elr {new.elr}")
            self.state = new
        self.at(20, self.controller_tick)

    def etcd_reassign(self, target: tuple[int, ...] | None) -> None:
        """A reassignment (``target``) or its cancellation (None), as the controller serves it."""
        live = self._live()
        new = (reassignment.cancel(self.state, live) if target is None
               else reassignment.reassign(self.state, target, live))
        if isinstance(new, reassignment.Refusal):
            self.log(f"controller: {'cancel' if target is None else f'move to {list(target)}'} refused: {new.message}")
            return
        self.log(f"controller: {'cancel' if target is None else f'move to {list(target)}'}: replicas "
                 f"{list(new.replicas)} adding {list(new.adding)} removing {list(new.removing)} leader {new.leader} "
                 f"epoch {new.leader_epoch}")
        self.state = new

    # -- a node's process ---------------------------------------------------------------------------------------

    def tick(self, node: Node, session: int) -> None:
        if not node.up or node.session != session:
            return
        self.at(self.cfg.tick_ms, self.tick, node, session)
        if node.paused:
            return
        if node.durable < len(node.log) and self.rng.random() < self.cfg.fsync_chance:
            node.durable = len(node.log)
        if node.broker_epoch is None:
            if self.now - node.register_sent >= 50:
                node.register_sent = self.now
                self.send(node.id, ETCD, self.etcd_register, node, node.session, node.process_epoch)
            return
        if self.now - node.keepalive_sent >= self.cfg.keepalive_ms:
            node.keepalive_sent = self.now
            self.send(node.id, ETCD, self.etcd_keepalive, node, node.broker_epoch)
        if self.now - node.metadata_sent >= self.cfg.metadata_ms:
            node.metadata_sent = self.now
            self.send(node.id, ETCD, self.etcd_read, node)
        if node.lead is not None:
            self.leader_work(node)
        elif node.following is not None:
            self.follower_work(node)

    def on_registered(self, node: Node, session: int, epoch: int) -> None:
        if node.session == session and node.broker_epoch is None:
            node.broker_epoch = node.process_epoch = epoch
            node.keepalive_sent = self.now

    def on_keepalive(self, node: Node, broker_epoch: int, alive: bool) -> None:
        if not alive and node.broker_epoch == broker_epoch:
            self.log(f"node {node.id}: lease of broker epoch {broker_epoch} expired")
            node.broker_epoch = None
            node.register_sent = -10_000

    def on_metadata(self, node: Node, state: PartitionState, live: dict[int, int]) -> None:
        node.registered = live
        if node.view is not None and state.partition_epoch < node.view.partition_epoch:
            return
        node.view = state
        if node.lead is not None:
            node.lead.on_state(state)
            if node.lead.deposed or state.leader_epoch != node.lead.leader_epoch:
                self.resign(node)
        if node.lead is None and node.broker_epoch is not None and partition.leads(state, node.id, node.broker_epoch):
            self.become_leader(node, state)
        elif node.id not in state.replicas:  # not a replica (yet, or any more): it neither leads nor follows
            node.following = None
        elif state.leader not in (NO_LEADER, node.id) and node.following != (state.leader, state.leader_epoch):
            node.following = (state.leader, state.leader_epoch)
            node.truncated = False
            node.ofle_sent = -10_000
            node.fetch_inflight = False

    def on_altered(self, node: Node, result: PartitionState | ErrorCode, state: PartitionState,
                   live: dict[int, int]) -> None:
        node.alter_inflight = False
        if node.lead is not None and isinstance(result, ErrorCode):
            node.lead.on_refused()
        self.on_metadata(node, state, live)

    def become_leader(self, node: Node, state: PartitionState) -> None:
        node.following = None
        node.cache.assign(state.leader_epoch, len(node.log))
        node.hw = min(node.hw, len(node.log))
        assert node.broker_epoch is not None
        node.lead = leader.LeaderView(node.id, node.broker_epoch, state, len(node.log), node.hw, self.now,
                                      self.cfg.lag_max_ms)
        self.log(f"node {node.id} leads epoch {state.leader_epoch} from offset {len(node.log)} (hw {node.hw})")

    def resign(self, node: Node) -> None:
        assert node.lead is not None
        self.log(f"node {node.id} stops leading epoch {node.lead.leader_epoch}")
        for _offset, (producer, request, _value, _deadline) in sorted(node.pending.items()):
            self.reply_produce(node, producer, request, ErrorCode.not_leader_or_follower)
        node.pending.clear()
        node.lead = None
        node.alter_inflight = False

    def set_hw(self, node: Node, hw: int) -> None:
        if hw > node.hw:
            self.check.commit(f"node {node.id}", node.log, node.hw, hw)
        node.hw = hw

    # -- the leader ---------------------------------------------------------------------------------------------

    def leader_work(self, node: Node) -> None:
        lead = node.lead
        assert lead is not None
        self.advance_hw(node)
        for offset, (producer, request, _value, deadline) in sorted(node.pending.items()):
            if deadline <= self.now:
                del node.pending[offset]
                self.reply_produce(node, producer, request, ErrorCode.request_timed_out)
        if node.alter_inflight and self.now - node.alter_sent > 100:
            node.alter_inflight = False  # no answer (lost): the write's outcome is read back from the state
            lead.on_refused()
        if not node.alter_inflight:
            proposal = lead.propose(self.now, node.registered)
            if proposal is not None:
                node.alter_inflight, node.alter_sent = True, self.now
                self.send(node.id, ETCD, self.etcd_alter, node, proposal)

    def advance_hw(self, node: Node) -> None:
        lead = node.lead
        assert lead is not None
        hw = lead.update_hw(len(node.log), node.durable)
        self.check.leader_hw(node.id, lead.leader_epoch, hw)
        self.set_hw(node, min(hw, len(node.log)))
        for offset, (producer, request, value, _deadline) in sorted(node.pending.items()):
            status = leader.ack_status(lead.hw, offset, len(lead.state.isr), lead.state.min_isr)
            if status is not None:
                del node.pending[offset]
                if status == ErrorCode.none:
                    self.check.ack(value, offset, lead.leader_epoch, node.id)
                self.reply_produce(node, producer, request, status)

    def on_produce(self, node: Node, producer: int, request: int, value: int) -> None:
        if node.lead is None:
            self.reply_produce(node, producer, request, ErrorCode.not_leader_or_follower)
            return
        error = node.lead.check_produce()
        if error is not None:
            self.reply_produce(node, producer, request, error)
            return
        node.log.append(Entry(node.lead.leader_epoch, value))
        node.pending[len(node.log) - 1] = (producer, request, value, self.now + self.cfg.produce_timeout_ms)

    def reply_produce(self, node: Node, producer: int, request: int, error: ErrorCode) -> None:
        self.send(node.id, PRODUCER + producer, self.on_produced, producer, request, error)

    def on_ofle(self, node: Node, follower: Node, session: int, leader_epoch: int, epoch: int) -> None:
        error = (ErrorCode.not_leader_or_follower if node.lead is None
                 else partition.check_leader_epoch(node.lead.leader_epoch, leader_epoch))
        answer = node.cache.end_offset_for(epoch, len(node.log)) if error is None else None
        self.send(node.id, follower.id, self._at_node, follower, session, self.on_ofle_answer,
                  (follower, leader_epoch, error, answer))

    def on_fetch(self, node: Node, follower: Node, session: int, broker_epoch: int, leader_epoch: int,
                 fetch_offset: int, durable: int, fetch_id: int) -> None:
        lead = node.lead
        if lead is None:
            error: ErrorCode | None = ErrorCode.not_leader_or_follower
        else:
            error = lead.on_fetch(follower.id, broker_epoch, node.registered.get(follower.id), leader_epoch,
                                  fetch_offset, durable, len(node.log), self.now)
        entries: list[Entry] = []
        if lead is not None and error is None:
            entries = [Entry(e.epoch, e.value) for e in node.log[fetch_offset:fetch_offset + self.cfg.fetch_max]]
            self.leader_work(node)
        self.send(node.id, follower.id, self._at_node, follower, session, self.on_fetched,
                  (follower, fetch_id, leader_epoch, fetch_offset, error, entries, node.hw))

    # -- the follower -------------------------------------------------------------------------------------------

    def follower_work(self, node: Node) -> None:
        assert node.following is not None
        leader_id, leader_epoch = node.following
        target = self.nodes[leader_id]
        if not node.truncated:
            if self.now - node.ofle_sent >= 40:
                node.ofle_sent = self.now
                self.to_node(node.id, target, self.on_ofle, target, node, node.session, leader_epoch,
                             node.cache.latest_epoch)
            return
        if node.fetch_inflight and self.now - node.fetch_sent < 60:
            return
        assert node.broker_epoch is not None
        node.fetch_id += 1
        node.fetch_inflight, node.fetch_sent = True, self.now
        self.to_node(node.id, target, self.on_fetch, target, node, node.session, node.broker_epoch, leader_epoch,
                     len(node.log), node.durable, node.fetch_id)

    def on_ofle_answer(self, node: Node, leader_epoch: int, error: ErrorCode | None,
                       answer: EpochEnd | None) -> None:
        if node.following is None or node.following[1] != leader_epoch or node.truncated:
            return
        if error is not None or answer is None:
            return
        step = epochs.follower_truncation(node.cache, len(node.log), answer)
        self.truncate(node, step.offset)
        if step.done:
            node.truncated = True
        else:
            node.ofle_sent = -10_000

    def truncate(self, node: Node, offset: int) -> None:
        """A cut at the log's end too drops the epochs starting there (one a brief leader began and wrote nothing
        in), as :func:`walgate.storage.truncation.truncate_vnode` and Kafka's ``UnifiedLog.truncateTo`` do."""
        if offset < len(node.log):
            self.log(f"node {node.id} truncates {len(node.log)} -> {offset}")
            del node.log[offset:]
            node.durable = min(node.durable, offset)
            node.hw = min(node.hw, offset)
        node.cache.truncate_from_end(min(offset, len(node.log)))

    def on_fetched(self, node: Node, fetch_id: int, leader_epoch: int, fetch_offset: int, error: ErrorCode | None,
                   entries: list[Entry], leader_hw: int) -> None:
        if fetch_id != node.fetch_id or node.following is None or node.following[1] != leader_epoch:
            return
        node.fetch_inflight = False
        if error == ErrorCode.offset_out_of_range:
            node.truncated = False
            return
        if error is not None or fetch_offset != len(node.log):
            return
        if entries and entries[0].epoch < node.cache.latest_epoch:  # refused, as Vnode.append_replicated refuses
            self.log(f"node {node.id} refuses entries of epoch {entries[0].epoch}, older than its latest epoch "
                     f"{node.cache.latest_epoch}")
            return
        for entry in entries:
            if entry.epoch != node.cache.latest_epoch:
                node.cache.assign(entry.epoch, len(node.log))
            node.log.append(entry)
        self.set_hw(node, min(leader_hw, len(node.log)))

    # -- producers ----------------------------------------------------------------------------------------------

    def produce(self, producer: int) -> None:
        if self.now >= self.cfg.fault_ms:
            return
        if self.producer_view is None or self.rng.random() < 0.2:
            self.producer_view = self.state
        target = self.producer_view.leader
        if target == NO_LEADER:
            self.at(10, self.produce, producer)
            return
        self.next_value += 1
        self.request_id += 1
        self.inflight[producer] = self.request_id
        self.to_node(PRODUCER + producer, self.nodes[target], self.on_produce, self.nodes[target], producer,
                     self.request_id, self.next_value)
        self.at(self.cfg.client_timeout_ms, self.on_produced, producer, self.request_id, ErrorCode.request_timed_out)

    def on_produced(self, producer: int, request: int, error: ErrorCode) -> None:
        if self.inflight.get(producer) != request:
            return
        self.inflight[producer] = -1
        if error != ErrorCode.none:
            self.producer_view = None
        self.at(self.rng.randint(1, 6), self.produce, producer)

    # -- faults -------------------------------------------------------------------------------------------------

    def crash(self, node: Node) -> None:
        if not node.up:
            return
        self.log(f"crash node {node.id} (durable {node.durable} of {len(node.log)})")
        node.up = False
        node.paused = False
        del node.log[node.durable:]
        node.cache.truncate_from_end(node.durable)
        node.hw = min(node.hw, node.durable)
        node.reset_process()

    def restart(self, node: Node, empty: bool = False) -> None:
        if node.up:
            return
        if empty:
            self.log(f"node {node.id} restarts with an empty disk")
            node.log, node.durable, node.cache, node.hw = [], 0, LeaderEpochCache(), 0
            node.incarnation += 1000
        else:
            self.log(f"node {node.id} restarts")
        node.up = True
        node.session += 1
        node.reset_process()
        self.at(0, self.tick, node, node.session)

    def pause(self, node: Node) -> None:
        if node.up and not node.paused:
            self.log(f"pause node {node.id}")
            node.paused = True

    def resume(self, node: Node) -> None:
        if node.up and node.paused:
            self.log(f"resume node {node.id}")
            node.paused = False
            for fn, args in node.deferred:
                self.at(0, fn, *args)
            node.deferred = []

    def isolate(self, node: Node, from_etcd: bool, from_nodes: bool) -> None:
        self.log(f"isolate node {node.id} (etcd {from_etcd}, nodes {from_nodes})")
        if from_etcd:
            self.cut.add(frozenset((node.id, ETCD)))
        if from_nodes:
            for other in self.nodes:
                if other is not node:
                    self.cut.add(frozenset((node.id, other.id)))

    def reconnect(self, node: Node, other: int) -> None:
        self.log(f"reconnect node {node.id} to {other}")
        self.cut.discard(frozenset((node.id, other)))

    def heal(self) -> None:
        self.log("heal")
        self.cut.clear()

    def leader_node(self) -> Node:
        leader_id = self.state.leader
        return self.nodes[leader_id] if leader_id != NO_LEADER else self.rng.choice(self.nodes)

    def settle(self) -> None:
        self.heal()
        for node in self.nodes:
            self.resume(node)
            self.restart(node)

    # -- a run --------------------------------------------------------------------------------------------------

    def run(self) -> list[str]:
        for node in self.nodes:
            self.at(self.rng.randint(0, 4), self.tick, node, node.session)
        self.at(0, self.controller_tick)
        for producer in range(self.cfg.producers):
            self.at(self.rng.randint(20, 40), self.produce, producer)
        SCENARIOS[self.scenario](self)
        background_faults(self, self.rng.randint(0, 3))
        self.at(self.cfg.fault_ms, self.settle)
        end = self.cfg.fault_ms + self.cfg.settle_ms
        while self.queue and self.queue[0][0] <= end:
            self.now, _, fn, args = heapq.heappop(self.queue)
            fn(*args)
        self.check.final(self.nodes, self.state)
        return self.check.violations


def leader_kill_loop(sim: Simulation) -> None:
    """Crash whoever leads every 200-400 ms and restart it 30-150 ms later."""
    t = 100
    while t < sim.cfg.fault_ms - 200:
        def kill() -> None:
            victim = sim.leader_node()
            sim.crash(victim)
            sim.at(sim.rng.randint(30, 150), sim.restart, victim)
        sim.at(t, kill)
        t += sim.rng.randint(200, 400)


def fast_double_failover(sim: Simulation) -> None:
    """Crash the leader; as soon as another is elected, crash it too (its unsynced tail, written in the new epoch,
    goes with it); restart both (KIP-279's case)."""
    def first() -> None:
        victim = sim.leader_node()
        sim.crash(victim)

        def second() -> None:
            if sim.state.leader in (NO_LEADER, victim.id):
                sim.at(5, second)
                return
            other = sim.leader_node()
            sim.at(sim.rng.randint(0, 30), sim.crash, other)
            sim.at(sim.rng.randint(40, 120), sim.restart, victim)
            sim.at(sim.rng.randint(100, 250), sim.restart, other)
        sim.at(5, second)
    for t in (sim.rng.randint(100, 300), sim.rng.randint(600, 800)):
        sim.at(t, first)


def empty_disk(sim: Simulation) -> None:
    """A follower crashes and comes back with an empty disk (KIP-903); soon after, the leader crashes."""
    def go() -> None:
        follower = sim.rng.choice([n for n in sim.nodes if n.id != sim.state.leader])
        sim.crash(follower)
        sim.at(sim.rng.randint(1, 60), wipe_restart, sim, follower)
        sim.at(sim.rng.randint(60, 300), lambda: sim.crash(sim.leader_node()))
    sim.at(sim.rng.randint(100, 500), go)


def wipe_restart(sim: Simulation, node: Node) -> None:
    if not sim.wiped_once:
        sim.wiped_once = True
        sim.restart(node, empty=True)
    else:
        sim.restart(node)


def zombie_leader(sim: Simulation) -> None:
    """Pause the leader past its lease (another is elected meanwhile), then resume it."""
    def go() -> None:
        victim = sim.leader_node()
        sim.pause(victim)
        sim.at(sim.rng.randint(100, 300), sim.resume, victim)
    for t in (sim.rng.randint(100, 300), sim.rng.randint(600, 800)):
        sim.at(t, go)


def lagging_follower(sim: Simulation) -> None:
    """Pause a follower past replica.lag.time.max.ms but within its lease: the ISR shrinks, then expands."""
    def go() -> None:
        victim = sim.rng.choice([n for n in sim.nodes if n.id != sim.state.leader])
        sim.pause(victim)
        sim.at(sim.rng.randint(sim.cfg.lag_max_ms + 10, sim.cfg.lease_ttl_ms * 2), sim.resume, victim)
    t = 100
    while t < sim.cfg.fault_ms - 200:
        sim.at(t, go)
        t += sim.rng.randint(150, 300)


def partitioned_leader(sim: Simulation) -> None:
    """Cut the leader off from the other replicas (and perhaps etcd), then heal."""
    def go() -> None:
        sim.isolate(sim.leader_node(), from_etcd=sim.rng.random() < 0.5, from_nodes=True)
        sim.at(sim.rng.randint(50, 300), sim.heal)
    for t in (sim.rng.randint(100, 300), sim.rng.randint(600, 800)):
        sim.at(t, go)


def lone_leader(sim: Simulation) -> None:
    """Cut the leader off from the other replicas but not from etcd, past replica.lag.time.max.ms (the ISR shrinks
    to the leader alone, Jepsen's 2013 Kafka case), then crash it: a replica that never got its last writes is
    elected."""
    def go() -> None:
        victim = sim.leader_node()
        sim.isolate(victim, from_etcd=False, from_nodes=True)
        down = sim.rng.randint(sim.cfg.lag_max_ms + 60, sim.cfg.lag_max_ms + 250)
        sim.at(down, sim.crash, victim)
        sim.at(down + 1, sim.heal)
        sim.at(down + sim.rng.randint(50, 200), sim.restart, victim)
    for t in (sim.rng.randint(100, 250), sim.rng.randint(650, 800)):
        sim.at(t, go)


def power_loss(sim: Simulation) -> None:
    """Every node crashes within a few milliseconds (each loses its unsynced tail) and comes back."""
    def go() -> None:
        for node in sim.nodes:
            sim.at(sim.rng.randint(0, 5), sim.crash, node)
            sim.at(sim.rng.randint(20, 150), sim.restart, node)
    for t in (sim.rng.randint(100, 400), sim.rng.randint(600, 900)):
        sim.at(t, go)


def lease_storm(sim: Simulation) -> None:
    """Every node loses etcd at once past its lease (a loaded machine: issue 25), then gets it back one by one, so
    that the controller elects from the first ones back (a leadership that may write nothing before it is lost
    again); twice."""
    def go() -> None:
        for node in sim.nodes:
            sim.isolate(node, from_etcd=True, from_nodes=False)
        back = sim.cfg.lease_ttl_ms + sim.rng.randint(20, 100)
        for node in sim.rng.sample(sim.nodes, len(sim.nodes)):
            sim.at(back, sim.reconnect, node, ETCD)
            back += sim.rng.randint(0, 60)
    for t in (sim.rng.randint(100, 250), sim.rng.randint(600, 750)):
        sim.at(t, go)


def background_faults(sim: Simulation, count: int) -> None:
    """``count`` random faults anywhere in the fault phase: crash and restart, pause and resume, isolate and heal."""
    for _ in range(count):
        t = sim.rng.randint(50, sim.cfg.fault_ms - 100)
        node = sim.rng.choice(sim.nodes)
        kind = sim.rng.choice(["crash", "pause", "isolate"])
        back = t + sim.rng.randint(10, 250)
        if kind == "crash":
            sim.at(t, sim.crash, node)
            sim.at(back, sim.restart, node)
        elif kind == "pause":
            sim.at(t, sim.pause, node)
            sim.at(back, sim.resume, node)
        else:
            sim.at(t, sim.isolate, node, sim.rng.random() < 0.5, True)
            sim.at(back, sim.heal)


def replica_moves(sim: Simulation) -> None:
    """Move the replicas to 3 of the 4 nodes, in a random order, two or three times (one in three cancelled soon
    after), the last one well before the faults end; the default background faults go on meanwhile."""
    t = 0
    for _ in range(sim.rng.randint(2, 3)):
        t += sim.rng.randint(100, 300)
        target = sim.rng.sample(range(sim.cfg.nodes), 3)
        sim.at(t, sim.etcd_reassign, tuple(target))
        if sim.rng.random() < 1 / 3:
            sim.at(t + sim.rng.randint(5, 60), sim.etcd_reassign, None)


SCENARIOS: dict[str, Callable[[Simulation], None]] = {
    "leader_kill_loop": leader_kill_loop,
    "fast_double_failover": fast_double_failover,
    "empty_disk": empty_disk,
    "zombie_leader": zombie_leader,
    "lagging_follower": lagging_follower,
    "partitioned_leader": partitioned_leader,
    "power_loss": power_loss,
    "lone_leader": lone_leader,
    "lease_storm": lease_storm,
    "replica_moves": replica_moves,
}
SCENARIO_NAMES = list(SCENARIOS)
SCENARIO_CONFIGS = {"replica_moves": Config(nodes=4, spares=1)}


def run_seed(seed: int, scenario: str | None = None) -> Simulation:
    """Run seed ``seed`` (its scenario is the seed's by default) and return the finished simulation."""
    name = scenario or SCENARIO_NAMES[seed % len(SCENARIO_NAMES)]
    sim = Simulation(seed, SCENARIO_CONFIGS.get(name), scenario=name)
    sim.run()
    return sim


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="run one seed and print its trace")
    parser.add_argument("--seeds", type=int, default=200, help="run seeds 0..N-1")
    parser.add_argument("--scenario", choices=SCENARIO_NAMES)
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else list(range(args.seeds))
    failed = 0
    for seed in seeds:
        sim = run_seed(seed, args.scenario)
        if args.seed is not None:
            print("\n".join(sim.trace))
        if sim.check.violations:
            failed += 1
            print(f"seed {seed} ({sim.scenario}): " + "; ".join(sim.check.violations[:5]))
    print(f"{len(seeds) - failed} of {len(seeds)} seeds without violations")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
