"""The Jepsen-style workload on a replicated database (issue 25): three real ``walgate serve --cluster`` nodes over a
real etcd, faults injected by the test, the history checked by tests/cluster/history.py.

:class:`Nodes` runs nodes 1-3 (``replication.enable=true``, a 2 s lease) as processes it can kill -9, pause
(SIGSTOP/SIGCONT), power-cut (tests/cluster/power_cut.py, when started with its environment) and restart on their
data dir or on an empty one, each on the Kafka port it had (every incarnation logs to a directory of its own, so a
traceback in any of them is found); given a :class:`~netns.Network`, node i runs in host ``n<i>`` and listens on
its address, and the test process reaches every node as the network's observer. :func:`replicated_database`
makes database ``r`` (``REPLICA 3``, :data:`VGROUPS` vgroups, WAL_LEVEL 2 and fsync period 0 unless a scenario
asks for another: an acknowledgement means on disk) and topic ``jt AS DATABASE r`` (partition = vgroup).

:class:`Workload` runs, until stopped:

- writers (threads), each writing unique integer values through a node it draws (seeded) among the running ones
  not paused nor :attr:`Workload.avoided` (a fault's own writers, :meth:`Workload.writing_through`, send there):
  a SQL ``INSERT`` over HTTP (``/rest/sql``) into a subtable of ``r.st``, or a line-protocol line (``/influxdb/v1/
  write``) into measurement ``lp``; each value's partition is its subtable's vgroup. 200 (204) with the row counted
  is ``ok``, a 4xx ``fail`` (the API's word: refused, nothing written), anything else (5xx, a timeout, a refused
  connection) ``info`` (unknown);
- two stock consumers, confluent-kafka and kafka-python, each assigned every partition of ``jt`` from offset 0,
  bootstrapped on all three nodes, recording every (offset, value) they read (a reset confluent-kafka reports as
  ``_AUTO_OFFSET_RESET`` is an Assign: its next read is not compared with its last, as is a reset kafka-python's
  fetcher logs; a client going back on its own, as on a truncation it detected (KIP-320), is the checker's
  non-monotonic poll).

:func:`final_history` then reads every partition in full through each node in turn (a consumer bootstrapped on that
node alone, up to the end ListOffsets gives), stops the nodes (SIGTERM), and reads each replica's WAL entry by entry
(a copy of it opened offline) with the high watermark its checkpoint holds: the whole history for ``check``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, PartitionMetadata
from etcd_cluster import EtcdCluster
from history import Assign, FinalRead, Op, Poll, Send, Write, check
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from netns import Network
from power_cut import power_cut
from prometheus_client.parser import text_string_to_metric_families
from replica_copies import replica_copies
from serve_support import WAIT_S, cluster_args, eventually, readyz, sql
from test_serve_cluster_sql import db_id

from livewalgate import WalgateServer, free_port, running_walgate, walgate_env
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import ControlPlaneError, Keys
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.partition_states import PartitionStates
from walgate.replication.partition import PartitionState
from walgate.storage.lineproto import child_table_name
from walgate.storage.vnode import vnode_of

__all__ = ["LONG", "SEEDS", "ACKS", "KEYS", "VGROUPS", "TOPIC", "Nodes", "Workload", "three_ready", "ready_nodes",
           "controller",
           "replicated_database", "partition_states", "metric_sum", "final_reads", "final_history",
           "wait_until", "checked", "new_leader", "restart", "started", "no_traceback"]

KEYS = Keys("walgate")  # the cluster walgate serve joins by default
VGROUPS = 2
TOPIC = "jt"
ARGS = ("--override", "replication.enable=true", "--override", "replica.lag.time.max.ms=2000")
BASE_TS = 1_700_000_000_000
HTTP_TIMEOUT_S = 10.0
LONG = os.environ.get("WALGATE_JEPSEN") == "1"
SEEDS = range(1, 11) if LONG else range(1, 2)  # the seeds of every scenario
ACKS = 40 if LONG else 6  # acknowledged writes between faults
CONFLUENT, KAFKA_PYTHON = 100, 101  # the consumers' process numbers in the history
STOP_S = 60.0  # the longest wait for a SIGTERMed node to exit: its controlled shutdown's hand-over (at most 10 s) and
# its close, on a loaded machine
FINAL = 200  # + node id: the final read through that node
ACCOUNT_LINES = 40  # of each node's log, in a failure's message (Nodes.account)
_ACCOUNTED = re.compile(r" (WARNING|ERROR|CRITICAL) | walgate\.(replication|cluster|groups): ")


def host_of(node_id: int) -> str:
    """Node ``node_id``'s host in a :class:`Network`."""
    return f"n{node_id}"


def wait_until(what: str, check: Callable[[], bool]) -> None:
    """Until ``check()`` holds (a Kafka client's error while asking counts as not yet), at most 60 s."""
    eventually(what, lambda: _holds(check))


def _holds(check: Callable[[], bool]) -> bool:
    try:
        return check()
    except KafkaException:
        return False


class Nodes:
    """The nodes of one cluster (1-3, and any the test adds), each started, killed, paused and restarted by the test
    (stopped by PID at the end: :meth:`close`)."""

    def __init__(self, etcd: EtcdCluster, workdir: Path, env: dict[int, dict[str, str]] | None = None,
                 net: Network | None = None) -> None:
        self.etcd = etcd
        self.workdir = workdir
        self.env = env or {}  # node id -> more environment for each of its processes (a faked clock)
        self.args: dict[int, tuple[str, ...]] = {}  # node id -> more flags of each of its processes (its listeners)
        self.net = net  # when given, node i runs in its host n<i> (netns.py) and listens on that host's address
        self.ports = {i: free_port() for i in (1, 2, 3)}  # (a node started later gets one then)
        self.servers: dict[int, WalgateServer] = {}
        self.paused: set[int] = set()
        self.stopped: dict[int, int | None] = {}  # node id -> the exit code :meth:`close` saw (None: SIGKILLed)
        self._stacks: dict[int, ExitStack] = {}
        self._lives = 0  # incarnations started: each logs in a directory of its own
        self._lock = threading.Lock()  # (nodes start at once: start_all)

    def data_dir(self, node_id: int) -> Path:
        return self.workdir / f"data{node_id}"

    def start(self, node_id: int, *, empty: bool = False) -> WalgateServer:
        """Node ``node_id`` on its data dir (``empty``: emptied first) and Kafka port."""
        if empty:
            shutil.rmtree(self.data_dir(node_id), ignore_errors=True)
        with self._lock:
            self._lives += 1
            life = self.workdir / f"life{self._lives}"
            port = self.ports.setdefault(node_id, free_port())
        stack = ExitStack()
        server = stack.enter_context(running_walgate(
            # (a namespace's address is not loopback: the test network, 198.18.0.0/15, is never routed)
            life / f"node{node_id}", *cluster_args(self.etcd, node_id), *ARGS,
            *(() if self.net is None else ("--allow-insecure",)), *self.args.get(node_id, ()),
            data_dir=self.data_dir(node_id),
            kafka_port=port, env={**walgate_env(), **self.env.get(node_id, {})}, host=self.host(node_id),
            prefix=() if self.net is None else self.net.command(host_of(node_id))))
        with self._lock:
            self.servers[node_id] = server
            self._stacks[node_id] = stack
        return server

    def start_all(self, node_ids: tuple[int, ...]) -> None:
        """Nodes ``node_ids`` started at once (each start waits for its ready line; a failed one fails the test)."""
        with ThreadPoolExecutor(len(node_ids)) as pool:
            for started in [pool.submit(self.start, i) for i in node_ids]:
                started.result()

    def kill(self, node_id: int) -> None:
        """kill -9 (by PID), and wait for it."""
        server = self.servers.pop(node_id)
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(30)
        self._stacks.pop(node_id).close()

    def stop(self, node_id: int) -> int:
        """SIGTERM (by PID: a controlled shutdown), and wait for it (at most :data:`STOP_S`); its exit code."""
        server = self.servers.pop(node_id)
        server.proc.terminate()
        code = server.proc.wait(STOP_S)
        self._stacks.pop(node_id).close()
        return code

    def power_cut(self, node_id: int) -> str:
        """Node ``node_id`` (started with :func:`power_cut.environment`) loses every byte it did not fsync and dies
        (tests/cluster/power_cut.py); the line its cut logged (how many files and bytes it took back)."""
        server = self.servers.pop(node_id)
        power_cut(server.proc)
        self._stacks.pop(node_id).close()
        return next(line for line in server.log().splitlines() if line.startswith("power cut:"))

    def pause(self, node_id: int) -> None:
        self.servers[node_id].proc.send_signal(signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        self.servers[node_id].proc.send_signal(signal.SIGCONT)
        self.paused.discard(node_id)

    def running(self) -> dict[int, WalgateServer]:
        return dict(self.servers)

    def answering(self, but: int = 0) -> int:
        """A running node that is not paused (nor ``but``)."""
        return min(i for i in self.servers if i not in self.paused and i != but)

    def host(self, node_id: int) -> str:
        """The address node ``node_id`` listens on."""
        return "127.0.0.1" if self.net is None else self.net.address(host_of(node_id))

    def kafka(self, node_id: int) -> str:
        """Node ``node_id``'s Kafka listener, ``host:port``."""
        return f"{self.host(node_id)}:{self.ports[node_id]}"

    def bootstrap(self) -> str:
        return ",".join(self.kafka(i) for i in self.ports)

    def _described(self, partition: int, via: int) -> PartitionMetadata | None:
        admin = AdminClient({"bootstrap.servers": self.kafka(via)})
        return admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions.get(partition)

    def leader(self, partition: int, via: int) -> int:
        """The leader Metadata names for ``partition`` of the topic, asked of node ``via`` (-1: none)."""
        part = self._described(partition, via)
        return -1 if part is None else int(part.leader)

    def current_leader(self, partition: int) -> int:
        """The leader of ``partition`` that an answering node names, once one does."""
        named: list[int] = []

        def running_leader() -> bool:
            named.append(self.leader(partition, self.answering()))
            return named[-1] in self.servers

        wait_until(f"a leader of partition {partition}", running_leader)
        return named[-1]

    def isr(self, partition: int, via: int) -> list[int]:
        """The ISR Metadata names for ``partition``, asked of node ``via``, sorted."""
        part = self._described(partition, via)
        return [] if part is None else sorted(part.isrs)

    def close(self) -> None:
        """Every node stopped by PID: all SIGTERMed at once, then each waited for, at most :data:`STOP_S` (then
        SIGKILLed); :attr:`stopped` says which exited by themselves."""
        for node_id in list(self.paused):
            self.resume(node_id)
        for server in self.servers.values():
            if server.proc.poll() is None:
                server.proc.terminate()
        deadline = time.monotonic() + STOP_S
        for node_id, server in self.servers.items():
            try:
                self.stopped[node_id] = server.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stopped[node_id] = None
        for node_id in sorted(self._stacks, reverse=True):
            self._stacks.pop(node_id).close()
        self.servers.clear()

    def logs(self) -> list[Path]:
        return sorted(self.workdir.glob("life*/node*/walgate.log"))

    def states_in_etcd(self) -> list[tuple[str, int, int, int, list[int]]] | str:
        """Every partition state etcd holds now, read directly (not through a node, whose watch may lag): (database
        id, vgroup, leader, leader epoch, ISR), for a failure's message; why not when etcd did not answer."""
        try:
            states = every_partition_state(self.etcd)
        except ControlPlaneError as e:  # (etcd without a majority: the reason stands in for the states)
            return f"not read: {e}"
        return [(pid.db_id, pid.vgroup, s.leader, s.leader_epoch, sorted(s.isr_ids)) for pid, s in sorted(
            states.items(), key=lambda item: (item[0].db_id, item[0].vgroup))]

    def account(self, lines: int = ACCOUNT_LINES) -> str:
        """The running nodes' own account of what went on, for a failure's message: the last ``lines`` lines of
        each one's log that are warnings or errors or tell of replication (ISR changes, leadership, truncation) or
        of its cluster membership (its lease, the controller)."""
        told = []
        for node_id, server in sorted(self.servers.items()):
            kept = [line for line in server.log().splitlines() if _ACCOUNTED.search(line)]
            told.append(f"--- node {node_id}'s log ({len(kept)} such lines, the last {lines}) ---\n"
                        + "\n".join(kept[-lines:]))
        return "\n".join(told)


def three_ready(nodes: Nodes) -> None:
    """Until every node lists three ready nodes. (Three rows are not enough: a node listed but not yet registered is
    "offline", and placing REPLICA 3 then answers 400 "Out of dnodes" (the final run of 4120237 failed so), a
    CreateTopics of replication factor 3 INVALID_REPLICATION_FACTOR. Node 1's view is not enough either: each node
    learns registrations from its own etcd watch, and a CreateTopics sent to another node once saw two.)"""
    wait_until("three ready nodes", lambda: all([r[2] for r in sql(server, "SHOW DNODES")] == ["ready"] * 3
                                                for server in nodes.servers.values()))


@contextmanager
def ready_nodes(etcd: EtcdCluster, workdir: Path) -> Iterator[Nodes]:
    """Nodes 1-3 over ``etcd`` (``workdir``: their data dirs and logs), every one ready (``/readyz``) and listed
    ready (:func:`three_ready`); all stopped by PID at the end, and then no incarnation's log may hold a
    traceback."""
    nodes = Nodes(etcd, workdir)
    try:
        nodes.start_all((1, 2, 3))
        wait_until("every node ready", lambda: all(readyz(s).get("status") == "ready" for s in nodes.servers.values()))
        three_ready(nodes)
        yield nodes
    finally:
        nodes.close()
    no_traceback(nodes)


def replicated_database(nodes: Nodes, fsync_ms: int = 0) -> str:
    """Database ``r`` (REPLICA 3, WAL_LEVEL 2, WAL_FSYNC_PERIOD ``fsync_ms``) with stable ``st``, measurement ``lp``
    and topic ``jt``, led in every vgroup; its id."""
    n1 = nodes.servers[1]
    three_ready(nodes)
    sql(n1, f"CREATE DATABASE r VGROUPS {VGROUPS} REPLICA 3 WAL_LEVEL 2 WAL_FSYNC_PERIOD {fsync_ms}")
    sql(n1, "CREATE STABLE r.st (ts TIMESTAMP, v BIGINT) TAGS (writer INT)")
    sql(n1, f"CREATE TOPIC {TOPIC} AS DATABASE r")
    wait_until("a leader for each vgroup", lambda: all(nodes.leader(p, 1) in (1, 2, 3) for p in range(VGROUPS)))
    return db_id(n1, "r")


def _slot_key(sql: bool, writer: int, slot: int) -> str:
    """The partition of writer ``writer``'s table ``slot``: ``r.w<writer>_<slot>`` (SQL) or line protocol's child
    table of ``lp`` with tags slot and writer."""
    table = f"w{writer}_{slot}" if sql else child_table_name("lp", (("slot", str(slot)), ("writer", str(writer))))
    return f"p{vnode_of('r', table, VGROUPS)}"


class Workload:
    """Writers and consumers over the nodes (see the module docstring), recording the history as they go."""

    def __init__(self, nodes: Nodes, seed: int, writers: int = 2, consumers: bool = True) -> None:
        self.nodes = nodes
        self.seed = seed
        self.writers = writers
        self.history: list[Op] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.acked = 0
        self.answers: dict[str, int] = {}  # each kind of answer (status or error), counted
        self.sent: dict[int, str] = {}  # value -> how it was sent and answered (to explain a violation)
        self.started = time.monotonic()
        self.events: list[str] = []  # the faults, timed as ``sent``
        self.avoided: set[int] = set()  # nodes the writers do not draw (a fault's own writers send to them)
        self.threads = [threading.Thread(target=self._write, args=(w,), daemon=True) for w in range(writers)]
        if consumers:  # (without them the writers send no Kafka request: a test may count a client's own)
            self.threads += [threading.Thread(target=self._consume_confluent, daemon=True),
                             threading.Thread(target=self._consume_kafka_python, daemon=True)]

    def __enter__(self) -> Workload:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(HTTP_TIMEOUT_S + 30)

    def record(self, op: Op) -> None:
        with self.lock:
            self.history.append(op)
            if isinstance(op, Send) and op.outcome == "ok":
                self.acked += 1

    def wait_acked(self, more: int, what: str) -> None:
        """Until ``more`` more writes than now were acknowledged."""
        target = self.acked + more
        wait_until(f"{more} more acknowledged writes ({what}; answers so far {self.answers})",
                   lambda: self.acked >= target)

    def _write(self, writer: int) -> None:
        rng = random.Random(self.seed * 100 + writer)
        for n in range(10_000_000):
            if self.stop.is_set():
                return
            running = [(i, s) for i, s in sorted(self.nodes.running().items())
                       if i not in self.nodes.paused and i not in self.avoided]
            if running:  # (a client that timed out on a paused node moves on: none is sent there)
                self.send(rng.choice(running)[1], writer, n, rng)
            else:
                time.sleep(0.05)

    @contextmanager
    def writing_through(self, server: WalgateServer, writers: tuple[int, ...], partition: int = 0) -> Iterator[None]:
        """For the block, each of ``writers`` (numbers the workload's own writers do not use) sends values of
        ``partition`` through ``server`` alone, one after another; at its end each finishes the write it is in."""
        stop = threading.Event()

        def write(writer: int) -> None:
            rng = random.Random(self.seed * 100 + writer)
            for n in range(10_000_000):
                if stop.is_set():
                    return
                self.send(server, writer, n, rng, partition)

        threads = [threading.Thread(target=write, args=(w,), daemon=True) for w in writers]
        for t in threads:
            t.start()
        try:
            yield
        finally:
            stop.set()
            for t in threads:
                t.join(HTTP_TIMEOUT_S + 30)

    def sends(self, writer: int) -> list[Send]:
        """Writer ``writer``'s writes so far, as answered."""
        with self.lock:
            return [op for op in self.history if isinstance(op, Send) and op.process == writer]

    def send(self, server: WalgateServer, writer: int, n: int, rng: random.Random, partition: int | None = None
             ) -> None:
        """Writer ``writer``'s ``n``-th value (below 10,000,000) written through ``server``, by SQL or line protocol
        (``rng`` draws which) into one of the writer's tables (``partition``: one in that partition), and recorded
        with its outcome."""
        value = writer * 10_000_000 + n
        sql = rng.random() < 0.5
        slots = [k for k in range(16) if partition is None or _slot_key(sql, writer, k) == f"p{partition}"][:4]
        slot = slots[n % len(slots)]
        key = _slot_key(sql, writer, slot)
        if sql:
            url, body = server.http_url + "/rest/sql", (
                f"INSERT INTO r.w{writer}_{slot} USING r.st TAGS ({writer}) VALUES ({BASE_TS + value}, {value})")
        else:
            url, body = server.http_url + "/influxdb/v1/write?db=r&precision=ms", (
                f"lp,slot={slot},writer={writer} v={value}i {BASE_TS + value}")
        sent = time.monotonic() - self.started
        outcome, answer = _post(url, body)
        with self.lock:
            self.answers[answer] = self.answers.get(answer, 0) + 1
            self.sent[value] = (f"{url.split('/')[3]} to {server.http_url} at {sent:.2f} s, answered {answer} at"
                                f" {time.monotonic() - self.started:.2f} s")
        self.record(Send(writer, (Write(key, value),), outcome))

    def note(self, event: str) -> None:
        """``event`` (a fault), timed for :meth:`explain`."""
        self.events.append(f"{event} at {time.monotonic() - self.started:.2f} s")

    def explain(self, values: tuple[object, ...]) -> list[str]:
        """The faults, then how each of ``values`` was sent and answered."""
        return self.events + [f"{v}: {self.sent.get(v, 'not sent by a writer')}" for v in values if isinstance(v, int)]

    def _consume_confluent(self) -> None:
        process = CONFLUENT
        consumer = Consumer({"bootstrap.servers": self.nodes.bootstrap(), "group.id": "jepsen-ck",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "reconnect.backoff.max.ms": 200, "topic.metadata.refresh.interval.ms": 1000})
        try:
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(VGROUPS)])
            self.record(Assign(process))
            while not self.stop.is_set():
                m = consumer.poll(0.2)
                if m is None:
                    continue
                if m.error() is not None:
                    if m.error().code() == KafkaError._AUTO_OFFSET_RESET:
                        self.record(Assign(process))
                    continue
                self.record(Poll(process, {f"p{m.partition()}": [(m.offset(), _value(m.value()))]}))
        finally:
            consumer.close()

    def _consume_kafka_python(self) -> None:
        process = KAFKA_PYTHON
        resets = _Resets(self)
        fetcher = logging.getLogger("kafka.consumer.fetcher")
        level = fetcher.level
        fetcher.setLevel(logging.INFO)
        fetcher.addHandler(resets)
        consumer = KafkaConsumer(bootstrap_servers=self.nodes.bootstrap().split(","), enable_auto_commit=False,
                                 auto_offset_reset="earliest", group_id=None, reconnect_backoff_max_ms=200,
                                 metadata_max_age_ms=1000, request_timeout_ms=15000)
        try:
            consumer.assign([KpTopicPartition(TOPIC, p) for p in range(VGROUPS)])
            consumer.seek_to_beginning()
            self.record(Assign(process))
            while not self.stop.is_set():
                for tp, records in consumer.poll(timeout_ms=200).items():
                    self.record(Poll(process, {f"p{tp.partition}": [(r.offset, _value(r.value)) for r in records]}))
        finally:
            consumer.close()
            fetcher.removeHandler(resets)
            fetcher.setLevel(level)


class _Resets(logging.Handler):
    """kafka-python's offset resets, each an :class:`Assign` of its consumer in the history, as confluent-kafka's
    ``_AUTO_OFFSET_RESET`` is: its fetcher logs each one (OFFSET_OUT_OF_RANGE answered, ``auto_offset_reset``
    applied) before it seeks, so the reads after it are not compared with the ones before. (A deposed leader cut off
    from etcd still names itself leader at its old epoch; kafka-python 3.0 takes a Metadata answer's partitions as
    they are, where Java's client keeps the newer leader epoch (KIP-320), fetches from it past its log end, and is
    sent back to offset 0 by its own reset policy.)"""

    def __init__(self, workload: Workload) -> None:
        super().__init__(logging.INFO)
        self.workload = workload

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Resetting offset for partition"):
            self.workload.record(Assign(KAFKA_PYTHON))


def _value(raw: bytes) -> int:
    return int(json.loads(raw)["v"])


def _post(url: str, body: str) -> tuple[str, str]:
    """(outcome, answer) of one write of one row: ``ok`` (2xx with one row counted: ``[[1]]`` from SQL, the
    ``X-Walgate-Rows`` header from line protocol), ``fail`` (4xx), ``info`` (anything else: no answer, 5xx)."""
    request = urllib.request.Request(url, data=body.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as r:
            counted = r.headers.get("X-Walgate-Rows") if r.status == 204 else json.load(r).get("data")
            return ("ok" if counted in ("1", [[1]]) else "info"), f"{r.status} {counted}"
    except urllib.error.HTTPError as e:
        return ("fail" if e.code < 500 else "info"), str(e.code)
    except (urllib.error.URLError, OSError) as e:
        return "info", type(e).__name__


def every_partition_state(etcd: EtcdCluster) -> dict[PartitionId, PartitionState]:
    """Every partition state etcd holds now (read from etcd, not through a node, whose watch may lag)."""
    async def read() -> dict[PartitionId, PartitionState]:
        session = EtcdSession(etcd.endpoints)
        try:
            return await PartitionStates(session, KEYS).read_all()
        finally:
            await session.close()

    return asyncio.run(read())


def partition_states(etcd: EtcdCluster, database_id: str) -> dict[int, PartitionState]:
    """Vgroup -> the partition state etcd holds for it now, of database ``database_id`` (no Kafka request)."""
    return {pid.vgroup: s for pid, s in every_partition_state(etcd).items() if pid.db_id == database_id}


def metric_sum(server: WalgateServer, name: str, **labels: str) -> float:
    """The sum of the samples ``name`` on ``server``'s ``/metrics`` whose labels include ``labels``."""
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and labels.items() <= s.labels.items())


def final_reads(nodes: Nodes) -> list[Op]:
    """Every partition read in full through each running node (a consumer bootstrapped on it alone)."""
    ops: list[Op] = []
    for node_id in sorted(nodes.running()):
        consumer = Consumer({"bootstrap.servers": nodes.kafka(node_id), "group.id": f"final{node_id}",
                             "enable.auto.commit": False})
        try:
            for p in range(VGROUPS):
                end = _end(nodes, node_id, p)
                consumer.assign([TopicPartition(TOPIC, p, 0)])
                pairs: list[tuple[int, int]] = []
                deadline = time.monotonic() + WAIT_S
                while (pairs[-1][0] + 1 if pairs else 0) < end:
                    assert time.monotonic() < deadline, f"node {node_id}: partition {p} read to {pairs[-1:]}, not {end}"
                    m = consumer.poll(0.5)
                    if m is not None and m.error() is None and m.partition() == p:
                        pairs.append((m.offset(), _value(m.value())))
                ops.append(FinalRead(FINAL + node_id, f"p{p}", pairs))
        finally:
            consumer.close()
    return ops


def _end(nodes: Nodes, node_id: int, partition: int) -> int:
    """The end offset of ``partition`` through node ``node_id``, asked by a new client each time (at most
    :data:`WAIT_S`) while it answers an error: librdkafka keeps a topic's partition count from its first Metadata
    answer, and a node just healed from a partition may give one without the topic's partitions yet."""
    deadline = time.monotonic() + WAIT_S
    while True:
        consumer = Consumer({"bootstrap.servers": nodes.kafka(node_id), "group.id": f"end{node_id}"})
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=10)[1])
        except KafkaException as e:
            assert time.monotonic() < deadline, f"node {node_id}: no end of partition {partition} in {WAIT_S:g} s: {e}"
        finally:
            consumer.close()
        time.sleep(0.1)


def final_history(nodes: Nodes, workload: Workload, database_id: str, scratch: Path,
                  replicas: tuple[int, ...] = (1, 2, 3)) -> list[Op]:
    """The workload's history, the final reads through every node (the nodes ``replicas`` started where they are
    not running, and all of them in the ISR), then (the nodes stopped) each replica's WAL; no incarnation's log may
    hold a traceback."""
    for node_id in replicas:
        if node_id not in nodes.servers:
            nodes.start(node_id)
    for p in range(VGROUPS):
        wait_until(f"partition {p} led with nodes {replicas} in the ISR", lambda p=p: nodes.leader(
            p, replicas[0]) in replicas and nodes.isr(p, replicas[0]) == sorted(replicas))
    history = workload.history + final_reads(nodes)
    nodes.close()
    unclean = {n: code for n, code in nodes.stopped.items() if code != 0}
    assert not unclean, (f"nodes that did not stop cleanly within {STOP_S:g} s of their SIGTERM (exit code; None: "
                         f"SIGKILLed): {unclean}; the last lines of each incarnation's log: "
                         + "".join(f"\n{log}: {log.read_text(errors='replace')[-2000:]}" for log in nodes.logs()))
    copies = replica_copies({n: nodes.data_dir(n) for n in replicas}, database_id, VGROUPS, scratch)
    assert all(c.hw > 0 for c in copies), f"a replica without a high watermark checkpoint: {copies}"
    assert any(c.index for c in copies), "the replicas' offset indexes of the topic are compared"
    history += copies
    no_traceback(nodes)
    return history


def no_traceback(nodes: Nodes) -> None:
    """No incarnation's log holds a traceback (the end of the first that does is shown)."""
    for log in nodes.logs():
        text = log.read_text(errors="replace")
        assert "Traceback" not in text, f"{log}:\n{text[-3000:]}"


def checked(history: list[Op], load: Workload, seed: int) -> None:
    """No violation in ``history``; acknowledged writes lost are named with how each was sent."""
    found = check(history)
    lost = sorted({value for v in found if v.kind == "lost-write" for value in v.values}, key=str)
    assert not lost, (f"seed {seed}: {len(lost)} acknowledged writes lost: {load.explain(tuple(lost))}"
                      f"; the answers: {load.answers}")
    assert found == [], f"seed {seed}: {len(found)} violations, the first: {found[:10]}"


def new_leader(nodes: Nodes, partition: int, old: int) -> None:
    """Until a node answering (not ``old``) names a leader other than ``old`` for ``partition``."""
    via = nodes.answering(but=old)
    wait_until(f"a new leader of partition {partition} (not {old})", lambda: nodes.leader(partition, via) not in (-1, old))


def restart(nodes: Nodes, load: Workload, node_id: int) -> None:
    """Node ``node_id`` started again on its data dir, then :data:`ACKS` more acknowledged writes."""
    nodes.start(node_id)
    load.note(f"node {node_id} restarted")
    load.wait_acked(ACKS, f"after node {node_id} restarted")


def started(etcd: EtcdCluster, tmp_path: Path, env: dict[int, dict[str, str]] | None = None,
            net: Network | None = None, fsync_ms: int = 0) -> tuple[Nodes, str]:
    """Nodes 1-3 running (``env``: more environment of each; ``net``: each in its host there) with database ``r``
    (:func:`replicated_database`) led in every vgroup, and its id."""
    nodes = Nodes(etcd, tmp_path, env, net)
    nodes.start_all((1, 2, 3))
    return nodes, replicated_database(nodes, fsync_ms)


def controller(etcd: EtcdCluster) -> tuple[int, int]:
    """(node id, controller epoch) of the elected controller: the candidate of the smallest ``create_revision``
    (walgate/cluster/election.py; Metadata's controller id is any live node, as KRaft's, KIP-590), (-1, 0) when
    there is none."""
    async def read() -> tuple[int, int]:
        session = EtcdSession(etcd.endpoints)
        try:
            _, kvs = await session.get_prefix(KEYS.candidates)
            first = min(kvs, key=lambda kv: kv.create_revision, default=None)
            return (-1, 0) if first is None else (int(first.value.split()[0]), first.create_revision)
        finally:
            await session.close()

    return asyncio.run(read())
