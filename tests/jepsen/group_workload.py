"""A consumer group's workload on a replicated cluster (issue 25, "coordinator killed mid-rebalance and mid-commit"):
real clients recording what they completed as group_history.py's history, on replicated_workload.py's nodes.

:class:`GroupWorkload` runs, until stopped:

- a producer (confluent-kafka, idempotent, acks=all) writing unique integers round-robin to the partitions of topic
  :data:`TOPIC` (replication factor 3), each acknowledged one a :class:`Produced`;
- the members of group :data:`GROUP` (:meth:`GroupWorkload.join`), stock confluent-kafka consumers subscribed to
  the topic (the classic protocol, eager range assignment): their rebalance callbacks are :class:`Assigned` and
  :class:`Revoked`, each record read a :class:`Read`; after every poll a member commits synchronously the next
  offset of each partition it read in its current assignment (a tight loop of OffsetCommits, with or without new
  records), each one a :class:`Commit`, ``ok`` when answered without error, else ``info``;
- a monitor asking the group's committed offsets (OffsetFetch) every :data:`FETCH_EVERY_S`, each answer a
  :class:`Fetched` placed in the history where its request was sent (commits acknowledged while it was in flight
  come after it).

:meth:`GroupWorkload.finish` stops the producer (every record answered), waits until the members have read every
acknowledged record, stops them (LeaveGroup) and the monitor, and reads the group's committed offsets through a
new client: the ``final`` of :func:`group_history.check`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from group_history import Assigned, Commit, Fetched, GroupOp, Produced, Read, Revoked
from replicated_workload import Nodes, wait_until

from tests.gateway.gateway_helpers import KafkaConnection, build, kio_classes
from walgate.wire.errors import ErrorCode

__all__ = ["GROUP", "TOPIC", "PARTITIONS", "GroupWorkload"]

GROUP, TOPIC, PARTITIONS = "jepsen-g", "gt", 3
FETCH_EVERY_S = 0.2
PRODUCE_EVERY_S = 0.01
ASK_TIMEOUT_S = 5  # the test's own requests (DescribeGroups, OffsetFetch)
REQUEST_TIMEOUT_MS = 10_000  # the members': an OffsetCommit in flight to a paused coordinator holds its heartbeats
# back (librdkafka sends one request at a time to the coordinator) until it times out, 60 s by default
JOIN_TIMEOUT_S = 60.0  # a member's thread, and the producer's flush, end within this once stopped


class GroupWorkload:
    """The producer, members and monitor of the module docstring over ``nodes``, recording :attr:`history`."""

    def __init__(self, nodes: Nodes, seed: int, heartbeat_ms: int = 1000) -> None:
        self.nodes = nodes
        self.seed = seed
        self.heartbeat_ms = heartbeat_ms
        self.history: list[GroupOp] = []
        self.lock = threading.Lock()
        self.stop_producing = threading.Event()
        self.stop_monitor = threading.Event()
        self.members: dict[str, _Member] = {}
        self.events: list[str] = []
        self.started = time.monotonic()
        self._offsets = _offsets_client(nodes)
        self._producer = threading.Thread(target=self._produce, daemon=True)
        self._monitor = threading.Thread(target=self._fetch_loop, daemon=True)
        self._producer.start()
        self._monitor.start()

    def __enter__(self) -> GroupWorkload:
        return self

    def __exit__(self, *_: object) -> None:
        """Every client stopped, whatever :meth:`finish` did (a failed test's)."""
        self.stop_producing.set()
        self.stop_monitor.set()
        for member in self.members.values():
            member.stopping.set()
        for name in list(self.members):
            self.leave(name)
        self._producer.join(JOIN_TIMEOUT_S)
        self._monitor.join(JOIN_TIMEOUT_S)

    def coordinator(self) -> int:
        """The node FindCoordinator (v4) names for :data:`GROUP`, asked of a running node that is not paused (-1:
        none, an error answered). (Not librdkafka's Admin client: see :meth:`described`.)"""
        node_id = self.nodes.answering()
        with KafkaConnection((self.nodes.host(node_id), self.nodes.ports[node_id]), timeout=ASK_TIMEOUT_S) as conn:
            [answer] = conn.request(build(kio_classes(10, 4)[0], {"key_type": 0, "coordinator_keys": [GROUP]})
                                    ).coordinators
        return int(answer.node_id) if answer.error_code == ErrorCode.none else -1

    def described(self) -> dict[str, frozenset[int]] | str:
        """Client id -> the partitions DescribeGroups assigns it, once the group is stable (its state before).

        Through a new Admin client each time, never while a node is paused: librdkafka 2.16's Admin client keeps a
        group's coordinator cached while it is asked again within the cache's TTL, answer NOT_COORDINATOR or not
        (seen for 60 s after a coordinator moved); and it aborts the process ("rd_kafka_enq_once_del_source_return:
        Assertion `eonce->refcnt > 0' failed") when a request's ApiVersion to a paused node times out, or when it is
        destroyed with a request to a paused node in flight."""
        assert not self.nodes.paused, "the Admin client is not asked while a node is paused"
        admin = AdminClient({"bootstrap.servers": self.nodes.bootstrap(), "reconnect.backoff.max.ms": 200})
        [future] = admin.describe_consumer_groups([GROUP], request_timeout=ASK_TIMEOUT_S).values()
        group = future.result(ASK_TIMEOUT_S + 5)
        if group.state.name != "STABLE":
            return group.state.name
        return {m.client_id: frozenset(tp.partition for tp in m.assignment.topic_partitions) for m in group.members}

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
        wait_until(f"{more} more {kind.__name__} ({what}; {self.events})", lambda: self.count(kind, outcome) >= target)

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
        answer, or the error instead: :attr:`last_described`)."""
        try:
            described = self.described()
        except KafkaException as e:
            self.last_described: object = e
            return False
        self.last_described = described
        return described == self.assignments()

    def finish(self) -> dict[int, int]:
        """The producer stopped, every acknowledged record read, the members and the monitor stopped; the group's
        committed offsets read through a new client (partitions with none left out)."""
        self.stop_producing.set()
        self._producer.join(JOIN_TIMEOUT_S)
        assert not self._producer.is_alive(), "the producer's flush did not end"
        with self.lock:
            produced = {(op.partition, op.offset) for op in self.history if isinstance(op, Produced)}

        def all_read() -> bool:
            with self.lock:
                return produced <= {(op.partition, op.offset) for op in self.history if isinstance(op, Read)}

        wait_until(f"every acknowledged record read ({self.events})", all_read)
        self.__exit__()  # (the members all at once: each LeaveGroup would start a rebalance of the rest)
        self._offsets.close()
        final: dict[int, int] = {}
        consumer = _offsets_client(self.nodes)
        try:
            wait_until("the group's committed offsets read at the end",
                       lambda: final.update(_committed(consumer)) is None)
        finally:
            consumer.close()
        self.record(Fetched(dict(final)))
        return final

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
        while not self.stop_monitor.wait(FETCH_EVERY_S):  # (its client is closed by finish, after this ends)
            with self.lock:
                at = len(self.history)
            try:
                offsets = _committed(self._offsets)
            except KafkaException:
                continue
            with self.lock:
                self.history.insert(at, Fetched(offsets))


def _offsets_client(nodes: Nodes) -> Consumer:
    """A client of :data:`GROUP` that is no member: for OffsetFetch."""
    return Consumer({"bootstrap.servers": nodes.bootstrap(), "group.id": GROUP, "enable.auto.commit": False,
                     "reconnect.backoff.max.ms": 200, "socket.timeout.ms": ASK_TIMEOUT_S * 1000})


def _committed(consumer: Consumer) -> dict[int, int]:
    """The group's committed offsets, partitions with none left out (KafkaException when not answered)."""
    answered = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=ASK_TIMEOUT_S)
    for tp in answered:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return {tp.partition: tp.offset for tp in answered if tp.offset >= 0}


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
        consumer = Consumer({"bootstrap.servers": self.load.nodes.bootstrap(), "group.id": GROUP,
                             "client.id": self.name, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "partition.assignment.strategy": "range", "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": self.load.heartbeat_ms, "reconnect.backoff.max.ms": 200,
                             "socket.timeout.ms": REQUEST_TIMEOUT_MS,
                             "topic.metadata.refresh.interval.ms": 1000})
        consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._revoked)
        try:
            while not self.stopping.is_set():
                msg = consumer.poll(0.05)
                if msg is not None and msg.error() is None:
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
