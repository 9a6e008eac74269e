"""What a follower costs and what it serves (issue 25, "Measured"): the CPU a follower spends per replicated MB, and
the rate at which a follower serves a consumer whose ``client.rack`` is its ``broker.rack`` (KIP-392) against the
same read from the leader.

Three ``walgate serve --cluster`` nodes over one etcd member (:func:`bench.cluster.cluster`) with
``replication.enable=true``, node ``i`` in ``broker.rack`` ``r<i>`` and ``replica.selector.class`` Kafka's
RackAwareReplicaSelector; a Kafka-native topic of one partition, replication factor 3, ``min.insync.replicas=2``.

* **Follower CPU**: each node's CPU-seconds (utime + stime from /proc/<pid>/stat) over :data:`IDLE_S` seconds with
  no client (the idle cost: heartbeats, lease keep-alives, the followers' empty fetches), then while one C producer
  (bench/cproduce.c: acks=all, idempotent, linger.ms=5, batch.size=1 MiB) writes ``megabytes`` MB of
  :data:`VALUE`-byte values to the partition. Rows: the followers' mean CPU-milliseconds per MB written (the value
  bytes, each of which every follower copies), against the leader's, and the same less each node's idle CPU over the
  same seconds; the MB the followers copied (their ``replicationbytesin``: WAL entries, framing included).
* **Follower reads**: a C consumer (bench/cconsume.c) reads the whole partition from offset 0, with ``client.rack``
  the rack of a follower, then of the leader, in turns (``repeat`` reads of each). The node that served each read is
  checked by each node's ``kafka_server_brokertopicmetrics_bytesout`` (record bytes served by Fetch) over the read:
  the follower must have served at least 90 % of the bytes read with its rack, else the run stops. Rows: MB/s read
  from the follower against from the leader (medians; the clock starts at the first record), and the
  CPU-milliseconds per MB served of the serving node in each case.

``python -m bench --only follower`` (``--quick``: 20 MB, 3 s idle and one read of each instead of :data:`MEGABYTES` MB
and :data:`IDLE_S` s). Without a C compiler or librdkafka's header (bench/cclient.py) there are no rows, with a
message.
"""

from __future__ import annotations

import statistics
import time

from confluent_kafka.admin import AdminClient, NewTopic

from bench import cclient
from bench.cluster import cluster
from bench.failover import settled
from bench.reassign import metric
from bench.report import Row
from bench.servers import cpu_seconds
from walgate.gateway.cluster_up import LocalCluster
from walgate.replication.read_replica import RACK_AWARE_SELECTOR

ENABLED = ("--override", "replication.enable=true", "--override", f"replica.selector.class={RACK_AWARE_SELECTOR}")
RACKS = {i: ("--override", f"broker.rack=r{i}") for i in (1, 2, 3)}
TOPIC = "follow"
VALUE = 1024
MEGABYTES = 200
IDLE_S = 10.0
SERVED = "kafka_server_brokertopicmetrics_bytesout"
COPIED = "kafka_server_brokertopicmetrics_replicationbytesin_total"


def _cpu(running: LocalCluster) -> dict[int, float]:
    pids = running.pids()
    return {n.node_id: cpu_seconds(pids[f"node{n.node_id}"]) for n in running.plan.nodes}


def _served(running: LocalCluster) -> dict[int, float]:
    return {n.node_id: metric(running, n.node_id, SERVED + "_total") for n in running.plan.nodes}


def run(*, quick: bool, repeat: int) -> list[Row]:
    """The rows of the module docstring."""
    megabytes, reads, idle_for = (20, 1, 3.0) if quick else (MEGABYTES, repeat, IDLE_S)
    producer, consumer = cclient.build("cproduce"), cclient.build()
    if producer is None or consumer is None:
        return []
    count = megabytes * 1_000_000 // VALUE
    with cluster(3, *ENABLED, each_node=RACKS) as running:
        bootstrap = running.plan.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})],
                            request_timeout=120)[TOPIC].result(timeout=180)
        leader = settled(running, admin, TOPIC)
        followers = [n.node_id for n in running.plan.nodes if n.node_id != leader]
        before, start = _cpu(running), time.perf_counter()
        time.sleep(idle_for)
        idle_after, idle_s = _cpu(running), time.perf_counter() - start
        idle = {n: (idle_after[n] - before[n]) / idle_s for n in before}  # CPU-s per second
        copied = {n: metric(running, n, COPIED) for n in followers}
        start = time.perf_counter()
        written = cclient.produce(producer, bootstrap, TOPIC, 1, 1, count, VALUE, "all", running.pids()["node1"])
        after, produce_s = _cpu(running), time.perf_counter() - start
        if written.count < count:
            raise RuntimeError(f"{TOPIC}: {written.count} of {count} records acknowledged")
        copied = {n: metric(running, n, COPIED) - copied[n] for n in followers}
        mb = written.count * VALUE / 1e6
        spent = {n: after[n] - idle_after[n] for n in after}
        print(f"bench: follower: leader node {leader}; {mb:.1f} MB written in {produce_s:.2f} s "
              f"({mb / produce_s:.1f} MB/s); CPU-s while writing {spent}, idle CPU-s per second {idle}; "
              f"MB copied by each follower {({n: round(b / 1e6, 1) for n, b in copied.items()})}", flush=True)
        by_rack: dict[str, list[tuple[float, float]]] = {"follower": [], "leader": []}
        for i in range(reads):
            for who, node in (("follower", followers[0]), ("leader", leader)):
                served, cpu = _served(running), _cpu(running)
                records, value_bytes, seconds, _ = cclient.consume(consumer, bootstrap, TOPIC, [[0]], written.count,
                                                                   {"client.rack": f"r{node}"})
                served = {n: b - served[n] for n, b in _served(running).items()}
                cpu_spent = _cpu(running)[node] - cpu[node]
                if records < written.count:
                    raise RuntimeError(f"a read with client.rack r{node}: {records} of {written.count} records")
                if served[node] < 0.9 * value_bytes:
                    raise RuntimeError(f"a read with client.rack r{node} ({who}): node {node} served "
                                       f"{served[node] / 1e6:.1f} of {value_bytes / 1e6:.1f} MB (each node's: "
                                       f"{served})")
                by_rack[who].append((value_bytes / 1e6 / seconds, cpu_spent / (value_bytes / 1e6)))
                print(f"bench: follower read {i + 1}, client.rack r{node} ({who}): {value_bytes / 1e6 / seconds:.1f} "
                      f"MB/s; MB served by each node {({n: round(b / 1e6, 1) for n, b in served.items()})}; "
                      f"serving node's CPU-s {cpu_spent:.2f}", flush=True)
    ms = 1e3
    per_mb = {n: spent[n] / mb * ms for n in spent}
    net = {n: (spent[n] - idle[n] * produce_s) / mb * ms for n in spent}
    return [
        Row(f"follower: CPU-milliseconds per MB written to a factor-3 partition ({VALUE} B values, acks=all), "
            "the followers' mean", statistics.mean(per_mb[n] for n in followers), "CPU-ms/MB", "the leader",
            per_mb[leader]),
        Row("  the same, less each node's idle CPU over those seconds", statistics.mean(net[n] for n in followers),
            "CPU-ms/MB", "the leader", net[leader]),
        Row("  MB each follower copied (replicationbytesin) per MB written",
            statistics.mean(copied.values()) / 1e6 / mb, "MB/MB"),
        Row("follower reads: MB/s a follower serves to a consumer of its client.rack (from offset 0)",
            statistics.median(r for r, _ in by_rack["follower"]), "MB/s", "the leader, to one of its rack",
            statistics.median(r for r, _ in by_rack["leader"])),
        Row("  serving node's CPU-milliseconds per MB served",
            statistics.median(c for _, c in by_rack["follower"]) * ms, "CPU-ms/MB", "the leader", statistics.median(c for _, c in by_rack["leader"]) * ms),
    ]
