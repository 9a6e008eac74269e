"""A consumer group's workload on a replicated cluster (issue 25, "coordinator killed mid-rebalance and mid-commit"):
real clients recording what they completed as group_history.py's history, on replicated_workload.py's nodes.

:class:`GroupWorkload` runs, until stopped:

- a producer (confluent-kafka, idempotent, acks=all) writing unique integers round-robin to the partitions of topic
  :data:`TOPIC` (replication factor 3), each acknowledged one a :class:`Produced`;
- the members of group :data:`GROUP` (:meth:`GroupWorkload.join`), stock confluent-kafka consumers subscribed to
  the topic (the classic protocol, eager range assignment; or KIP-848's, ``group.protocol=consumer``): their rebalance callbacks are :class:`Assigned` and
  :class:`Revoked`, each record read a :class:`Read`; after every poll (of up to :data:`POLL_MAX` records) a
  member commits synchronously the next offset of each partition it read in its current assignment (a tight loop
  of OffsetCommits, with or without new records), each one a :class:`Commit`, ``ok`` when answered without error,
  else ``info``;
- a monitor asking the group's committed offsets (OffsetFetch, of the node FindCoordinator names) every
  :data:`FETCH_EVERY_S`, each answer a :class:`Fetched` placed in the history where its request was sent (commits
  acknowledged while it was in flight come after it).

The test's own questions (FindCoordinator, DescribeGroups, OffsetFetch, Metadata) are raw requests to a node it
chooses (tests/gateway/gateway_helpers.py's ``KafkaConnection``), not librdkafka's Admin client: librdkafka 2.16's
keeps a group's coordinator cached while it is asked again within the cache's TTL, answer NOT_COORDINATOR or not
(seen for 60 s after a coordinator moved), and twice the process aborted ("rd_kafka_enq_once_del_source_return:
Assertion `eonce->refcnt > 0' failed") while Admin clients made for one call were asked or dropped as a node was
paused or killed (none since).

:meth:`GroupWorkload.finish` stops the producer (every record answered), waits until the members have read every
acknowledged record, stops them (LeaveGroup) and the monitor, and asks the group's coordinator for its committed
offsets: the ``final`` of :func:`group_history.check`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from group_history import Assigned, Commit, Fetched, GroupOp, Produced, Read, Revoked
from replicated_workload import Nodes, wait_until

from tests.gateway.gateway_helpers import KafkaConnection, build, kio_classes
from walgate.coordinator.consumer_protocol import assigned_partitions
from walgate.wire.errors import ErrorCode

__all__ = ["GROUP", "TOPIC", "PARTITIONS", "GroupWorkload"]

GROUP, TOPIC, PARTITIONS = "jepsen-g", "gt", 3
OFFSETS_TOPIC = "__consumer_offsets"  # (offsets.topic.num.partitions is 1: every group is in its partition 0)
FETCH_EVERY_S = 0.2
PRODUCE_EVERY_S = 0.01
ASK_TIMEOUT_S = 5  # the test's own requests (module docstring)
REQUEST_TIMEOUT_MS = 10_000  # the members': an OffsetCommit in flight to a paused coordinator holds its heartbeats
# back (librdkafka sends one request at a time to the coordinator) until it times out, 60 s by default
POLL_MAX = 100  # records a member reads between two commits (one a record falls behind the producer)
JOIN_TIMEOUT_S = 60.0  # a member's thread, and the producer's flush, end within this once stopped


class GroupWorkload:
    """The producer, members and monitor of the module docstring over ``nodes``, recording :attr:`history`."""

    def __init__(self, nodes: Nodes, seed: int, heartbeat_ms: int = 1000, protocol: str = "classic") -> None:
        self.nodes = nodes
        self.seed = seed
        self.heartbeat_ms = heartbeat_ms  # (classic members': a KIP-848 member heartbeats as the server tells it)
        self.protocol = protocol  # the members' group.protocol: classic, or consumer (KIP-848)
        self.history: list[GroupOp] = []
        self.lock = threading.Lock()
        self.stop_producing = threading.Event()
        self.stop_monitor = threading.Event()
        self.members: dict[str, _Member] = {}
        self.last_described: dict[str, frozenset[int]] | str = "not asked"
        self.events: list[str] = []
        self.started = time.monotonic()
        self._producer = threading.Thread(target=self._produce, daemon=True)
        self._monitor = threading.Thread(target=self._fetch_loop, daemon=True)
        self._producer.start()
        self._monitor.start()

    def __enter__(self) -> GroupWorkload:
        return self

    def __exit__(self, *_: object) -> None:
        """Every client told to stop and waited for (at most :data:`JOIN_TIMEOUT_S` each: a failed test's may hang on
        a cluster without a coordinator), whatever :meth:`finish` did."""
        self.stop_producing.set()
        self.stop_monitor.set()
        for member in self.members.values():
            member.stopping.set()
        for member in self.members.values():
            member.thread.join(JOIN_TIMEOUT_S)
        self._producer.join(JOIN_TIMEOUT_S)
        self._monitor.join(JOIN_TIMEOUT_S)

    def coordinator(self) -> int:
        """The node FindCoordinator (v4) names for :data:`GROUP`, asked of a running node that is not paused (-1:
        none: an error answered, or no answer)."""
        try:
            [answer] = self._ask(self.nodes.answering(), 10, 4, {"key_type": 0, "coordinator_keys": [GROUP]}
                                 ).coordinators
        except OSError:
            return -1
        return int(answer.node_id) if answer.error_code == ErrorCode.none else -1

    def described(self) -> dict[str, frozenset[int]] | str:
        """Client id -> the partitions the coordinator assigns it (DescribeGroups v5; ConsumerGroupDescribe v0 for a
        KIP-848 group), once the group is stable; before, what stands in the way (the group's state, an error, no
        coordinator)."""
        node_id = self.coordinator()
        if node_id not in self.nodes.servers or node_id in self.nodes.paused:
            return f"coordinator {node_id}"
        try:
            if self.protocol == "consumer":
                [group] = self._ask(node_id, 69, 0, {"group_ids": [GROUP]}).groups
            else:
                [group] = self._ask(node_id, 15, 5, {"groups": [GROUP]}).groups
        except OSError as e:
            return f"node {node_id}: {e!r}"
        if group.error_code != ErrorCode.none:
            return group.error_code.name
        if group.group_state != "Stable":
            return group.group_state
        if self.protocol == "consumer":
            return {m.client_id: frozenset(p for t in m.assignment.topic_partitions if t.topic_name == TOPIC
                                           for p in t.partitions) for m in group.members}
        return {m.client_id: frozenset(assigned_partitions(m.member_assignment).get(TOPIC, ())) for m in group.members}

    def offsets_partition(self, via: int | None = None) -> tuple[int, list[int]] | None:
        """The leader and ISR (sorted) of the group's ``__consumer_offsets`` partition (0: the cluster's one), as
        Metadata (v12) asked of node ``via`` (default: a running node that is not paused) names them (None: no
        answer, or no partition)."""
        try:
            answer = self._ask(self.nodes.answering() if via is None else via, 3, 12, {
                "topics": [{"name": OFFSETS_TOPIC}], "allow_auto_topic_creation": False})
        except OSError:
            return None
        parts = [p for t in answer.topics for p in t.partitions if p.partition_index == 0]
        return (int(parts[0].leader_id), sorted(parts[0].isr_nodes)) if parts else None

    def offsets_in_sync(self) -> bool:
        """Every running node is in the ISR of the group's partition. (A fault is injected only then: under load a
        node's 2 s lease may lapse with no fault, and the controller takes it out of the ISR until it has caught up
        again; a coordinator killed while it is the only in-sync replica has no successor, rightly, until it is
        back.)"""
        described = self.offsets_partition()
        return described is not None and described[1] == sorted(self.nodes.servers)

    def wait(self, what: str, check: Callable[[], bool]) -> None:
        """:func:`wait_until`, its failure saying what the cluster looked like then (the faults, the coordinator,
        the group partition's leader and ISR)."""
        try:
            wait_until(what, check)
        except pytest.fail.Exception as e:
            views = {n: self.offsets_partition(n) for n in sorted(self.nodes.servers) if n not in self.nodes.paused}
            raise AssertionError(f"{e}; faults: {self.events}; FindCoordinator names {self.coordinator()};"
                                 f" {OFFSETS_TOPIC}-0 (leader, ISR) by node: {views}; the partition states etcd"
                                 f" holds: {self.nodes.states_in_etcd()}\n{self.nodes.account()}") from e

    def committed(self) -> dict[int, int] | None:
        """The group's committed offsets as OffsetFetch (v7) asked of its coordinator answers them, partitions with
        none left out (None: no coordinator, no answer, or an error answered)."""
        node_id = self.coordinator()
        if node_id not in self.nodes.servers or node_id in self.nodes.paused:
            return None
        try:
            answer = self._ask(node_id, 9, 7, {"group_id": GROUP, "topics": [
                {"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})
        except OSError:
            return None
        parts = [p for t in answer.topics for p in t.partitions]
        if answer.error_code != ErrorCode.none or any(p.error_code != ErrorCode.none for p in parts):
            return None
        return {int(p.partition_index): int(p.committed_offset) for p in parts if p.committed_offset >= 0}

    def _ask(self, node_id: int, api_key: int, version: int, fields: dict[str, Any]) -> Any:
        """kio's decoding of the answer of node ``node_id`` to one request of ``fields`` (OSError: none within
        :data:`ASK_TIMEOUT_S`)."""
        with KafkaConnection((self.nodes.host(node_id), self.nodes.ports[node_id]), timeout=ASK_TIMEOUT_S) as conn:
            return conn.request(build(kio_classes(api_key, version)[0], fields))

    def record(self, op: GroupOp) -> None:
        with self.lock:
            self.history.append(op)

    def note(self, event: str) -> None:
        """``event`` (a fault), timed, for a failure's message."""
        self.events.append(f"{event} at {time.monotonic() - self.started:.2f} s")

    def count(self, kind: type, outcome: str | None = None) -> int:
        """The ops of ``kind`` recorded so far (commits: with ``outcome``, when given)."""
        with self.lock:
            return sum(1 for op in self.history if isinstance(op, kind)
                       and (outcome is None or getattr(op, "outcome", None) == outcome))

    def wait_more(self, kind: type, more: int, what: str, outcome: str | None = None) -> None:
        """Until ``more`` more ops of ``kind`` (and ``outcome``) than now are recorded."""
        target = self.count(kind, outcome) + more
        self.wait(f"{more} more {kind.__name__} ({what})", lambda: self.count(kind, outcome) >= target)

    def join(self, name: str) -> None:
        """A new member ``name`` (its client id), started."""
        self.members[name] = _Member(self, name)

    def leave(self, name: str) -> None:
        """Member ``name`` closed (its revocation, then LeaveGroup)."""
        self.members.pop(name).stop()

    def assignments(self) -> dict[str, frozenset[int]]:
        """Member -> the partitions its callbacks hold now."""
        with self.lock:
            return {name: m.owned for name, m in self.members.items()}

    def settled(self) -> bool:
        """The group is stable with every member, and each member holds what DescribeGroups assigns it (the last
        answer: :attr:`last_described`)."""
        self.last_described = self.described()
        return self.last_described == self.assignments()

    def finish(self) -> dict[int, int]:
        """The producer stopped, every acknowledged record read, the members and the monitor stopped; the group's
        committed offsets as its coordinator answers them (partitions with none left out)."""
        self.stop_producing.set()
        self._producer.join(JOIN_TIMEOUT_S)
        assert not self._producer.is_alive(), "the producer's flush did not end"
        with self.lock:
            produced = {(op.partition, op.offset) for op in self.history if isinstance(op, Produced)}

        def all_read() -> bool:
            with self.lock:
                return produced <= {(op.partition, op.offset) for op in self.history if isinstance(op, Read)}

        self.note("the producer stopped")
        self.wait("every acknowledged record read", all_read)
        self.note("every acknowledged record read")
        for member in self.members.values():  # (all at once: each LeaveGroup would start a rebalance of the rest)
            member.stopping.set()
        for name in list(self.members):
            self.leave(name)
        self.stop_monitor.set()
        self._monitor.join(JOIN_TIMEOUT_S)
        final: list[dict[int, int]] = []
        self.wait("the group's committed offsets read at the end",
                   lambda: final.append(self.committed()) is None and final[-1] is not None)
        self.record(Fetched(final[-1]))
        self.note("the group's offsets read")
        return final[-1]

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.nodes.bootstrap(), "enable.idempotence": True,
                             "acks": "all", "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 200})

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self.record(Produced(msg.partition(), msg.offset(), int(msg.value())))

        n = 0
        while not self.stop_producing.is_set():
            producer.produce(TOPIC, b"%d" % (self.seed * 10_000_000 + n), partition=n % PARTITIONS,
                             on_delivery=report)
            n += 1
            producer.poll(PRODUCE_EVERY_S)
        producer.flush(JOIN_TIMEOUT_S - 5)

    def _fetch_loop(self) -> None:
        while not self.stop_monitor.wait(FETCH_EVERY_S):
            with self.lock:
                at = len(self.history)
            offsets = self.committed()
            if offsets is None:
                continue
            with self.lock:
                self.history.insert(at, Fetched(offsets))


class _Member:
    """One member's thread: poll, record, commit (module docstring); :meth:`stop` closes it."""

    def __init__(self, load: GroupWorkload, name: str) -> None:
        self.load = load
        self.name = name
        self.owned: frozenset[int] = frozenset()
        self.next: dict[int, int] = {}  # partition -> the next offset to read, of those read in this assignment
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(JOIN_TIMEOUT_S)
        assert not self.thread.is_alive(), f"member {self.name} did not stop"

    def _assigned(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._own(self.owned | {tp.partition for tp in partitions}, Assigned)

    def _revoked(self, _: Consumer, partitions: list[TopicPartition]) -> None:
        self._own(self.owned - {tp.partition for tp in partitions}, Revoked)

    def _own(self, owned: frozenset[int], change: Callable[[str, frozenset[int]], GroupOp]) -> None:
        changed = self.owned ^ owned
        with self.load.lock:  # (assignments() reads ``owned`` under it)
            self.owned = owned
            self.load.history.append(change(self.name, changed))
        for p in changed:
            self.next.pop(p, None)

    def _run(self) -> None:
        protocol: dict[str, str | int] = {"group.protocol": "consumer"} if self.load.protocol == "consumer" else {
            "partition.assignment.strategy": "range", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": self.load.heartbeat_ms}
        consumer = Consumer({"bootstrap.servers": self.load.nodes.bootstrap(), "group.id": GROUP,
                             "client.id": self.name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "reconnect.backoff.max.ms": 200, "socket.timeout.ms": REQUEST_TIMEOUT_MS,
                             "topic.metadata.refresh.interval.ms": 1000, **protocol})
        consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        try:
            while not self.stopping.is_set():
                for msg in consumer.consume(POLL_MAX, 0.05):
                    if msg.error() is None:
                        self.load.record(Read(self.name, msg.partition(), msg.offset(), int(msg.value())))
                        self.next[msg.partition()] = msg.offset() + 1
                self._commit(consumer)
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer) -> None:
        """The next offset of each partition read in this assignment, committed synchronously and recorded."""
        if not self.next:
            return
        offsets = dict(self.next)
        try:
            answered = consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                                       asynchronous=False)
            failed = {tp.partition for tp in answered or () if tp.error is not None}
        except KafkaException:
            failed = set(offsets)
        with self.load.lock:
            self.load.history += [Commit(self.name, p, o, "info" if p in failed else "ok") for p, o in offsets.items()]
