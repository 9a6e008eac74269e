"""Cluster benchmarks: clusters of ``walgate serve --cluster`` nodes, each over one etcd member, started as
``walgate cluster up`` starts them (:class:`walgate.gateway.cluster_up.LocalCluster`, on loopback addresses of their
own). The scenarios below measure issue 24's cluster, one copy of each vgroup (:data:`ONE_COPY`); the replicated
cluster's are bench/replicated.py, bench/failover.py and the others that start :func:`cluster` with replication on.

* **Scale-out** (issue 24: 2 nodes against 1, C clients): a 1-node and a 2-node cluster run at once and are measured
  in turns (1, 2, 1, 2, ...: both see the same minutes of this shared machine). Each sample creates a fresh topic of
  :data:`PARTITIONS` partitions (placed over the cluster's nodes: two on each of two nodes, all four on the one node
  of a 1-node cluster; the run fails when they are not spread), then one C producer (bench/cproduce.c) sends
  ``count`` 1 KiB values round-robin over the partitions with acks=1, linger.ms=5 and batch.size=1 MiB (full
  batches of ~1,000 records a partition, as a high-throughput Kafka producer is tuned; one process, because two or
  four were no faster on either cluster: bench/RESULTS.md), and one C consumer (bench/cconsume.c) assigned every
  partition reads them all back from offset 0; then the topic is deleted. Rows: aggregate produce and fetch
  records/s and MB/s of 2 nodes against 1 (median of the samples); in the median sample, the CPU-seconds per million
  records of every process (each node, etcd, the client) and of the whole machine (other users' processes too), and
  the machine's busy cores, so that a ratio can be explained; and the 1-minute load average before the samples.
* **Routing cost** (3 nodes, started after the scale-out samples): a producer bootstrapped on node 1 writing to a
  partition on node 2 (Metadata names node 2; the client connects there) against one bootstrapped on node 2: the
  time from a new producer to its first acknowledged record (the redirect: one more connection), and the p50 of
  one-record produce round trips once connected; issue 24's "produce/fetch p50 on a 3-node cluster within 10 % of one
  node": that produce p50 against a producer's on the 1-node cluster, and the p50 of one Fetch from offset 0,
  answered at once (its first batch alone; aiokafka's client, to the leader it learned from Metadata), of the
  partition on node 2 (bootstrapped on node 1) against the same on the 1-node cluster; Metadata p50 and p99
  (AdminClient ``list_topics``; the same topic on both) and FindCoordinator p99 (aiokafka's client, a group's
  coordinator) of the 3-node cluster against the 1-node one. Each op's samples follow :data:`WARMUP` rounds not
  counted: a new client's connections and a node's first answer of a kind (FindCoordinator's first reads the
  coordinators' placement from etcd) took 30-50 ms, three of the slowest ten of 1,000 samples, so a p99 measured
  the cold start.
* **Control-plane load** (3 nodes): CreateTopics of one-partition topics, ten a request, in turns through the
  controller (it appends the records itself), through another node (a proposal the controller appends) and, for
  the baseline, on a single node without a cluster, a third of the topics each: topics (catalog records appended
  through the record stream) per second against the single node's, and etcd's revisions (one per etcd write) per
  topic; then the keys and bytes (keys + values) under the cluster's prefix per 1,000 topics (the controller folds
  records into ``catalog/snapshot`` every 1000). At steady state (the C producer writing, no DDL): etcd revisions
  per second, which are the control plane's writes (lease keep-alives write none).

``python -m bench --only cluster`` runs it (``--quick``: 50,000 records a sample instead of 1,000,000, 150 topics
instead of 1,500). Without a C compiler or librdkafka's header (bench/cclient.py) the scale-out rows and the
steady-state row are left out with a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import statistics
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench import cclient
from bench.report import Row, Target, median_run
from bench.servers import cpu_seconds, walgate
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import parse_endpoints
from walgate.gateway.cluster_up import LocalCluster, free_loopback_block, loopback_hosts, plan

ONE_COPY = ("--override", "replication.enable=false")
"""Issue 24's cluster: one copy of each vgroup, the group coordinators on the coordinator vgroups' nodes (with
replicas, the default, a 1- or 2-node cluster has no group coordinator until ``offsets.topic.replication.factor`` is
set to its size, as Kafka's)."""
PARTITIONS = 4
VALUE = 1024
PORTS = (9092, 6041, 2379, 2380)
WARMUP = 50
"""Rounds of each routing op before its samples (:func:`interleaved`)."""
CLUSTER_PREFIX = b"/walgate/walgate/"  # cluster.name's default


@contextlib.contextmanager
def cluster(nodes: int, *node_args: str, each_node: Mapping[int, tuple[str, ...]] | None = None
            ) -> Iterator[LocalCluster]:
    """``nodes`` nodes (``node_args``: more flags of each; ``each_node``: more flags of the node of that id) and one
    etcd member on a free loopback block, data in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="walgate-bench-cluster-") as tmp:
        first = free_loopback_block(nodes, PORTS, random.Random(os.getpid() ^ time.time_ns()))
        layout = plan(nodes, 1, loopback_hosts(first, nodes), kafka_port=9092, http_port=6041, etcd_port=2379)
        with LocalCluster(layout, Path(tmp), node_args, each_node) as running:
            yield running


def create(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics], request_timeout=120).values():
        future.result(timeout=180)


def delete(bootstrap: str, topic: str) -> None:
    """Delete ``topic`` (a sample's records would otherwise fill this machine's small disk)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], request_timeout=120)[topic].result(timeout=180)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {p.id: p.leader for p in meta.topics[topic].partitions.values()}


MACHINE = "the machine (every process)"


def machine_cpu() -> float:
    """CPU-seconds every process on the machine has used so far (/proc/stat: all but idle and iowait)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    """One scale-out sample: records and value bytes produced and fetched, the seconds of each (from the go line to
    the last acknowledgement; from the first record fetched to the last), the CPU-seconds over each phase of every
    process (the cluster's by name, ``producer`` or ``consumer``, and :data:`MACHINE`: with other users' processes)
    the wall-clock seconds of each phase's whole client run (``*_wall``, over which the CPU-seconds are counted) and
    the 1-minute load average before it."""

    produced: int
    produce_seconds: float
    fetched: int
    fetched_bytes: int
    fetch_seconds: float
    produce_cpu: dict[str, float]
    fetch_cpu: dict[str, float]
    produce_wall: float
    fetch_wall: float
    load: float

    @property
    def produce_rate(self) -> float:
        return self.produced / self.produce_seconds

    @property
    def fetch_rate(self) -> float:
        return self.fetched / self.fetch_seconds


def scale_sample(producer: Path, consumer: Path, running: LocalCluster, topic: str, count: int) -> Sample:
    """Create ``topic`` over the cluster's nodes, produce ``count`` records into it, read them all back, delete it.
    The CPU-seconds are counted over each client's whole run (its start-up included)."""
    bootstrap, pids = running.plan.bootstrap, running.pids()
    load = os.getloadavg()[0]
    create(bootstrap, [topic], PARTITIONS)
    placed = set(leaders(bootstrap, topic).values())
    if len(placed) != len(running.plan.nodes):
        raise RuntimeError(f"{topic}'s partitions are on nodes {sorted(placed)}, not spread over every node")

    def cpu() -> dict[str, float]:
        return {**{name: cpu_seconds(pid) for name, pid in pids.items()}, "client": cclient.children_cpu(),
                MACHINE: machine_cpu()}

    def spent(start: dict[str, float], end: dict[str, float], client: str) -> dict[str, float]:
        return {client if name == "client" else name: end[name] - start[name] for name in start}

    before, start = cpu(), time.perf_counter()
    tally = cclient.produce(producer, bootstrap, topic, PARTITIONS, 1, count, VALUE, "1", pids["node1"])
    middle, switch = cpu(), time.perf_counter()
    fetched, fetched_bytes, fetch_seconds, _ = cclient.consume(consumer, bootstrap, topic, [list(range(PARTITIONS))],
                                                               tally.count)
    after, end = cpu(), time.perf_counter()
    delete(bootstrap, topic)
    if tally.count < count or fetched < tally.count:
        raise RuntimeError(f"{topic}: {tally.count} of {count} records acknowledged, {fetched} fetched back")
    return Sample(tally.count, tally.seconds, fetched, fetched_bytes, fetch_seconds,
                  spent(before, middle, "producer"), spent(middle, after, "consumer"),
                  switch - start, end - switch, load)


def scale_out(repeat: int, count: int, clusters: dict[int, LocalCluster]) -> dict[int, list[Sample]]:
    """``repeat`` samples of each cluster, taken in turns (1, 2, 1, 2, ...); each printed as it is taken."""
    producer, consumer = cclient.build("cproduce"), cclient.build()
    samples: dict[int, list[Sample]] = {n: [] for n in clusters}
    if producer is None or consumer is None:
        return samples
    for i in range(repeat):
        for n, running in clusters.items():
            s = scale_sample(producer, consumer, running, f"scale-{i}", count)
            samples[n].append(s)
            print(f"bench: cluster scale-out, {n} node(s), sample {i + 1}: load {s.load:.2f}; produce "
                  f"{s.produce_rate:,.0f} records/s, CPU-s over {s.produce_wall:.2f} s: {_cpu_text(s.produce_cpu)}; "
                  f"fetch {s.fetch_rate:,.0f} records/s, CPU-s over {s.fetch_wall:.2f} s: {_cpu_text(s.fetch_cpu)}",
                  flush=True)
    return samples


def _cpu_text(cpu: dict[str, float]) -> str:
    return " ".join(f"{name} {seconds:.2f}" for name, seconds in cpu.items())


def _scale_rows(samples: dict[int, list[Sample]]) -> list[Row]:
    """Aggregate produce and fetch of 2 nodes against 1 (medians), each process's and the machine's CPU-seconds per
    million records and the machine's busy cores in the median sample, the load average; none without samples."""
    if not samples[1]:
        return []
    mb = 1e6
    rate: dict[str, dict[int, float]] = {
        "produce records/s": {n: statistics.median(s.produce_rate for s in ss) for n, ss in samples.items()},
        "produce MB/s": {n: statistics.median(s.produced * VALUE / s.produce_seconds / mb for s in ss)
                         for n, ss in samples.items()},
        "fetch records/s": {n: statistics.median(s.fetch_rate for s in ss) for n, ss in samples.items()},
        "fetch MB/s": {n: statistics.median(s.fetched_bytes / s.fetch_seconds / mb for s in ss)
                       for n, ss in samples.items()},
    }
    label = {"produce": f"1 C producer, 1 KiB acks=1 linger 5 ms, {PARTITIONS} partitions",
             "fetch": f"1 C consumer, {PARTITIONS} partitions from offset 0"}
    rows = []
    for key, by_nodes in rate.items():
        phase, unit = key.split(" ", 1)
        first = unit == "records/s"
        rows.append(Row(f"{'cluster scale-out: ' if first else '  '}{phase}, {label[phase] + ', ' if first else ''}"
                        f"2 nodes (2 cores)", by_nodes[2], unit, "1 node", by_nodes[1],
                        Target(1.5, of_limit=True) if first else None))
    for n, ss in samples.items():
        middle = median_run(ss, lambda s: s.produce_rate)
        rows += [Row(f"  CPU-seconds per million records produced, {n} node(s): {name}", seconds / middle.produced * 1e6,
                     "CPU-s") for name, seconds in middle.produce_cpu.items()]
        rows.append(Row(f"  busy cores of the machine while producing, {n} node(s)",
                        middle.produce_cpu[MACHINE] / middle.produce_wall, "cores", "the machine's",
                        os.cpu_count() or 1))
        middle = median_run(ss, lambda s: s.fetch_rate)
        rows += [Row(f"  CPU-seconds per million records fetched, {n} node(s): {name}", seconds / middle.fetched * 1e6,
                     "CPU-s") for name, seconds in middle.fetch_cpu.items()]
        rows.append(Row(f"  busy cores of the machine while fetching, {n} node(s)",
                        middle.fetch_cpu[MACHINE] / middle.fetch_wall, "cores", "the machine's", os.cpu_count() or 1))
    loads = [s.load for ss in samples.values() for s in ss]
    return rows + [Row("  1-minute load average before each scale-out sample, median", statistics.median(loads),
                       "load")]


def first_ack_seconds(bootstrap: str, topic: str, partition: int) -> float:
    """From a new producer to its first acknowledged record (Metadata, the leader's connection, the produce)."""
    start = time.perf_counter()
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    delivered(p, topic, partition, b"first")
    return time.perf_counter() - start


def delivered(p: Producer, topic: str, partition: int, value: bytes) -> None:
    """Produce ``value`` and wait for its acknowledgement; raises when it failed."""
    errors: list[object] = []
    p.produce(topic, value, partition=partition, on_delivery=lambda err, msg: err and errors.append(err))
    if p.flush(30) != 0 or errors:
        raise RuntimeError(f"produce to {topic}[{partition}] failed: {errors or 'not answered within 30 s'}")


def sends(producer: Producer, topic: str, partitions: int, until: threading.Event | float) -> list[float]:
    """The seconds of each acknowledged 100-byte send (one at a time, ``topic``'s partitions in turn) until ``until``
    is set (an event) or passed (a time.perf_counter() deadline)."""
    out: list[float] = []
    done = until.is_set if isinstance(until, threading.Event) else lambda: time.perf_counter() >= until
    while not done():
        begin = time.perf_counter()
        delivered(producer, topic, len(out) % partitions, b"x" * 100)
        out.append(time.perf_counter() - begin)
    return out


def interleaved(samples: int, *ops: Callable[[], object], warmup: int = 0) -> list[list[float]]:
    """Seconds of each of ``ops`` over ``samples`` rounds, taken in turns (ABAB...), so that a load change on the
    machine touches every one alike, after ``warmup`` rounds not counted (a client's first requests to each node
    open its connections, and a node's first answers of a kind read what it then keeps, such as the coordinators'
    placement: tens of ms, which would be a p99's samples)."""
    out: list[list[float]] = [[] for _ in ops]
    for _ in range(warmup):
        for op in ops:
            op()
    for _ in range(samples):
        for times, op in zip(out, ops):
            start = time.perf_counter()
            op()
            times.append(time.perf_counter() - start)
    return out


def connected(bootstrap: str, topic: str, partition: int) -> Callable[[], object]:
    """One acknowledged 100-byte record (acks=1) through a producer that is already connected."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    delivered(p, topic, partition, b"warm")
    return lambda: delivered(p, topic, partition, b"v" * 100)


@contextlib.contextmanager
def aiokafka_client(bootstrap: str) -> Iterator[tuple[asyncio.AbstractEventLoop, AIOKafkaClient]]:
    """aiokafka's client of ``bootstrap``, bootstrapped, with the event loop its calls run on (``loop
    .run_until_complete``); closed, and its loop too, on exit."""
    loop = asyncio.new_event_loop()

    async def connect() -> AIOKafkaClient:
        return AIOKafkaClient(bootstrap_servers=bootstrap)

    client = loop.run_until_complete(connect())  # aiokafka's client is made inside its loop
    try:
        loop.run_until_complete(client.bootstrap())
        yield loop, client
    finally:
        loop.run_until_complete(client.close())
        loop.close()


@contextlib.contextmanager
def fetched(bootstrap: str, topic: str, partition: int) -> Iterator[Callable[[], object]]:
    """One Fetch of ``topic``'s ``partition`` from offset 0 for 1 byte (its answer: the first batch alone, KIP-74, so
    that partitions holding different amounts are alike), answered at once, sent to the partition's leader through
    aiokafka's client (the version it picks), which learns the leader from Metadata (bootstrapped on ``bootstrap``)."""
    request = FetchRequest(0, 1, 1, 0, [(topic, [(partition, 0, 1)])])  # (KIP-74: the first batch, whatever its size)
    with aiokafka_client(bootstrap) as (loop, client):

        async def fetch(leader: int) -> None:
            answer = await client.send(leader, request)
            [(_, [answered])] = answer.topics
            error, records = answered[1], answered[-1]  # (the fields between differ by version)
            if error or not records:
                raise RuntimeError(f"a Fetch of {topic}[{partition}] from offset 0: error {error}, {len(records)} bytes")

        client.add_topic(topic)
        loop.run_until_complete(client.force_metadata_update())
        leader = client.cluster.leader_for_partition(AioTopicPartition(topic, partition))
        loop.run_until_complete(fetch(leader))
        yield lambda: loop.run_until_complete(fetch(leader))


def metadata(bootstrap: str) -> Callable[[], object]:
    """One Metadata request (all topics) through a connected AdminClient."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=30)
    return lambda: admin.list_topics(timeout=30)


@contextlib.contextmanager
def find_coordinator(bootstrap: str) -> Iterator[Callable[[], object]]:
    """One FindCoordinator request (a consumer group's, to the least loaded node) through aiokafka's client."""
    with aiokafka_client(bootstrap) as (loop, client):
        yield lambda: loop.run_until_complete(client.coordinator_lookup(CoordinationType.GROUP, "bench-routing"))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def etcd_state(running: LocalCluster) -> tuple[int, int, int]:
    """(etcd's revision, keys under the cluster's prefix, their keys' and values' bytes)."""
    async def read() -> tuple[int, int, int]:
        session = EtcdSession(parse_endpoints(running.plan.etcd_spec))
        try:
            revision, kvs = await session.get_prefix(CLUSTER_PREFIX)
            return revision, len(kvs), sum(len(kv.key) + len(kv.value) for kv in kvs)
        finally:
            await session.close()

    return asyncio.run(read())


def run(*, quick: bool, repeat: int) -> list[Row]:
    """Scale-out on a 1- and a 2-node cluster in turns, then routing and control-plane load on a 3-node cluster
    (module docstring)."""
    count = 50_000 if quick else 1_000_000
    with contextlib.ExitStack() as stack:
        clusters = {n: stack.enter_context(cluster(n, *ONE_COPY)) for n in (1, 2)}
        rows = _scale_rows(scale_out(repeat, count, clusters))
        three = stack.enter_context(cluster(3, *ONE_COPY))
        rows += _routing_rows(three, clusters[1], quick)
        single = stack.enter_context(walgate(Path(stack.enter_context(tempfile.TemporaryDirectory(
            prefix="walgate-bench-single-")))))
        rows += _control_plane_rows(three, single.bootstrap, 150 if quick else 1500, count)
    return rows


def _routing_rows(three: LocalCluster, one: LocalCluster, quick: bool) -> list[Row]:
    node1, node2 = (n.bootstrap for n in three.plan.nodes[:2])
    for running in (three, one):  # the same topics on both, so that their Metadata answers are alike
        create(running.plan.bootstrap, ["route"], 3)
    [partition] = [p for p, leader in leaders(node1, "route").items() if leader == 2]
    tries, samples = (5, 300) if quick else (11, 1000)
    routed, direct = interleaved(tries, lambda: first_ack_seconds(node1, "route", partition),
                                 lambda: first_ack_seconds(node2, "route", partition))
    routed_rt, direct_rt, one_rt = interleaved(samples, connected(node1, "route", partition),
                                               connected(node2, "route", partition),
                                               connected(one.plan.bootstrap, "route", partition), warmup=WARMUP)
    with fetched(node1, "route", partition) as fetch3, fetched(one.plan.bootstrap, "route", partition) as fetch1:
        fetch3_rt, fetch1_rt = interleaved(samples, fetch3, fetch1, warmup=WARMUP)
    meta3, meta1 = interleaved(samples, metadata(three.plan.bootstrap), metadata(one.plan.bootstrap), warmup=WARMUP)
    with find_coordinator(three.plan.bootstrap) as find3, find_coordinator(one.plan.bootstrap) as find1:
        coord3, coord1 = interleaved(samples, find3, find1, warmup=WARMUP)
    ms = 1e3
    return [
        Row("cluster routing: new producer to first ack, bootstrapped on node 1, partition on node 2",
            statistics.median(routed) * ms, "ms", "bootstrapped on node 2", statistics.median(direct) * ms),
        Row("cluster routing: produce p50 once connected, via node 1's Metadata", statistics.median(routed_rt) * ms,
            "ms", "bootstrapped on node 2", statistics.median(direct_rt) * ms, Target(1.1, at_most=True, of_limit=True)),
        Row("cluster routing: produce p50 once connected, 3 nodes (partition on node 2)",
            statistics.median(routed_rt) * ms, "ms", "1 node", statistics.median(one_rt) * ms,
            Target(1.1, at_most=True, of_limit=True)),
        Row("cluster routing: fetch p50 (a Fetch answered at once), 3 nodes (partition on node 2)",
            statistics.median(fetch3_rt) * ms, "ms", "1 node", statistics.median(fetch1_rt) * ms,
            Target(1.1, at_most=True, of_limit=True)),
        Row("cluster routing: Metadata p50, 3 nodes", statistics.median(meta3) * ms, "ms", "1 node",
            statistics.median(meta1) * ms),
        Row("cluster routing: Metadata p99, 3 nodes", quantile(meta3, 0.99) * ms, "ms", "1 node",
            quantile(meta1, 0.99) * ms, Target(1.1, at_most=True, of_limit=True)),
        Row("cluster routing: FindCoordinator p99, 3 nodes", quantile(coord3, 0.99) * ms, "ms", "1 node",
            quantile(coord1, 0.99) * ms, Target(1.1, at_most=True, of_limit=True)),
    ]


def controller(running: LocalCluster, via: int = 1) -> int:
    """The controller's node id, as node ``via``'s ``SHOW DNODES`` names it."""
    request = urllib.request.Request(running.plan.nodes[via - 1].http_url + "/rest/sql", data=b"SHOW DNODES",
                                     method="POST")
    with urllib.request.urlopen(request, timeout=30) as r:
        return next(row[0] for row in json.load(r)["data"] if row[3] == "controller")


def _control_plane_rows(running: LocalCluster, single: str, topics: int, count: int) -> list[Row]:
    """CreateTopics through the controller (appended directly), through another node (a proposal the controller
    appends) and, beside them, on a single node without a cluster (``single``: its bootstrap), a third of the topics
    each, ten a request, in turns; etcd's writes per topic on each cluster path, its keys and bytes per 1,000 topics,
    and its writes per second at steady state."""
    leader = controller(running)
    paths = {"the controller": next(n for n in running.plan.nodes if n.node_id == leader).bootstrap,
             "another node": next(n for n in running.plan.nodes if n.node_id != leader).bootstrap,
             "a single node (no cluster)": single}
    seconds, writes = dict.fromkeys(paths, 0.0), dict.fromkeys(paths, 0)
    first = etcd_state(running)
    per_path = topics // len(paths)
    for k in range(0, per_path, 10):
        for i, (path, bootstrap) in enumerate(paths.items()):
            revision = etcd_state(running)[0]
            start = time.perf_counter()
            create(bootstrap, [f"t{i}-{j:05d}" for j in range(k, min(k + 10, per_path))], 1)
            seconds[path] += time.perf_counter() - start
            writes[path] += etcd_state(running)[0] - revision
    last = etcd_state(running)
    per_k = 1000 / (2 * per_path)  # the topics the cluster holds
    steady = _steady_writes(running, count)
    baseline = per_path / seconds["a single node (no cluster)"]
    rows = [Row(f"cluster control plane: CreateTopics through {path}, 10 a request", per_path / seconds[path],
                "topics/s", "a single node (no cluster)", baseline) for path in list(paths)[:2]]
    rows += [Row(f"  etcd writes (revisions) per topic created through {path}", writes[path] / per_path, "writes")
             for path in list(paths)[:2]]
    rows += [
        Row("  etcd keys under the cluster's prefix per 1,000 topics", (last[1] - first[1]) * per_k, "keys"),
        Row("  etcd bytes (keys + values) per 1,000 topics", (last[2] - first[2]) * per_k / 1e3, "kB"),
    ]
    if steady is not None:
        rows.append(Row("  etcd writes per second while a C producer writes (no DDL)", steady, "writes/s"))
    return rows


def _steady_writes(running: LocalCluster, count: int) -> float | None:
    """etcd revisions per second while one C producer writes ``count`` records over the cluster's nodes (none
    without the C producer)."""
    producer = cclient.build("cproduce")
    if producer is None:
        return None
    create(running.plan.bootstrap, ["steady"], len(running.plan.nodes))
    start, revision = time.perf_counter(), etcd_state(running)[0]
    cclient.produce(producer, running.plan.bootstrap, "steady", len(running.plan.nodes), 1, count, VALUE, "1",
                    running.pids()["node1"])
    return (etcd_state(running)[0] - revision) / (time.perf_counter() - start)
