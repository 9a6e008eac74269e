"""Replicated databases in ``walgate serve`` (issue 25, docs/plans/replication-wiring.md): three real ``walgate serve
--cluster`` nodes over a real etcd (stopped by PID), SQL through their HTTP APIs.

``CREATE DATABASE ... REPLICA 3`` places each vgroup on the three nodes; every node opens every vnode it holds a
replica of, the controller's Reconciler creates each vgroup's partition state, each node's replica manager leads or
follows it, and SQL INSERTs (sent to any node, written on each vgroup's leader) are answered only once the in-sync
replicas hold them (acks=all): as the last one is answered the followers' WALs are byte for byte the leader's, and
the rows are read back whole through each node (from the vgroups' leaders), and every replica keeps the vgroup's high
watermark in its checkpoint file (written every 5 s where it changed). Metadata, through any node, names each
partition of a TDengine topic over it with its partition state's leader, three replicas and ISR; a consumer
bootstrapped on a node reads every row from the leaders; a follower asked directly answers Fetch and ListOffsets
NOT_LEADER_OR_FOLLOWER, a leader asked with a newer leader epoch UNKNOWN_LEADER_EPOCH (KIP-320).
"""

from __future__ import annotations

import datetime
import signal
import threading
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from etcd_cluster import EtcdCluster
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.list_offsets.v7 import request as list_offsets_v7
from serve_support import all_ready, eventually, leader_of, no_traceback, node, poll_until, sql, wait_log
from test_serve_cluster_sql import db_id

from livewalgate import WalgateServer
from tests.gateway.gateway_helpers import KafkaConnection
from walgate.storage import hw_checkpoint
from walgate.storage.vnode import vnode_of
from walgate.wire.errors import ErrorCode

ROWS = 12  # over 7 tables: both vgroups written (each INSERT waits ~0.3 s for acks=all)
ENABLED = ("--override", "replication.enable=true")  # replicas are off by default (config.py)
SESSION = ("--override", "broker.session.timeout.ms=8000", *ENABLED)  # a 1.5 s SIGSTOP keeps its registration and ISR seat
PAUSE_S = 1.5
LAG = ("--override", "replica.lag.time.max.ms=2000", *ENABLED)  # ISR changes proposed every second
VGROUPS = 2


def wal_bytes(server: WalgateServer, database_id: str, vgroup: int) -> bytes:
    """Every WAL segment of the vnode on ``server``'s data dir, in order (the segment boundaries are each WAL's own)."""
    wal = server.data_dir / "db" / database_id / f"vnode{vgroup}" / "wal"
    return b"".join(p.read_bytes() for p in sorted(wal.glob("*.log")))


def errors(server: WalgateServer, partition: int, epoch: int = -1) -> tuple[int, int]:
    """The error codes of Fetch v12 and ListOffsets v7 of topic ``tr``'s partition ``partition`` asked of ``server``
    with current leader epoch ``epoch``."""
    fetch = fetch_v12.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, topics=(fetch_v12.FetchTopic(topic="tr", partitions=(
            fetch_v12.FetchPartition(partition=partition, current_leader_epoch=epoch, fetch_offset=0,
                                     partition_max_bytes=1 << 20),)),), forgotten_topics_data=())
    offsets = list_offsets_v7.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        list_offsets_v7.ListOffsetsTopic(name="tr", partitions=(list_offsets_v7.ListOffsetsPartition(
            partition_index=partition, current_leader_epoch=epoch, timestamp=-1),)),))
    with KafkaConnection(("127.0.0.1", server.kafka_port)) as conn:
        fetched = conn.request(fetch).responses[0].partitions[0].error_code
        listed = conn.request(offsets).topics[0].partitions[0].error_code
    return fetched, listed


def test_replica_3_database_copied_to_every_node(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        n1 = stack.enter_context(node(etcd1, tmp_path, 1, *SESSION))
        wait_log(n1, "node 1: controller")
        nodes = [n1, *(stack.enter_context(node(etcd1, tmp_path, i, *SESSION)) for i in (2, 3))]
        all_ready(nodes)
        sql(n1, f"CREATE DATABASE r VGROUPS {VGROUPS} REPLICA 3 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
        sql(n1, "CREATE STABLE r.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        rid = db_id(n1, "r")
        for server in nodes:  # every node opened every vnode: it holds a replica of each
            eventually(f"the vnodes of r on {server.http_url}", lambda s=server: all(
                (s.data_dir / "db" / rid / f"vnode{i}" / "wal").is_dir() for i in range(VGROUPS)))
        eventually("a leader for each vgroup", lambda: "".join(s.log() for s in nodes).count("leading epoch") == VGROUPS)
        for k in range(ROWS):
            sql(nodes[k % 3], f"INSERT INTO r.t{k % 7} USING r.st TAGS ({k % 7}) VALUES ({1_700_000_000_000 + k}, {k})")

        def equal() -> bool:
            for i in range(VGROUPS):
                raws = [wal_bytes(s, rid, i) for s in nodes]
                if not raws[0] or any(r != raws[0] for r in raws):
                    return False
            return True

        assert equal(), "every write was answered once the in-sync replicas held it (acks=all): no WAL lags"
        leader0 = next(s for s in nodes if "vnode 0 of database r: leading" in s.log())
        followers = [s for s in nodes if s is not leader0]
        name = next(f"p{k}" for k in range(100) if vnode_of("r", f"p{k}", VGROUPS) == 0)
        answers: list[object] = []
        for s in followers:
            s.proc.send_signal(signal.SIGSTOP)
        try:  # acks=all: a write is not answered while no other ISR member can fetch it
            writer = threading.Thread(target=lambda: answers.append(sql(
                leader0, f"INSERT INTO r.{name} USING r.st TAGS (99) VALUES ({1_700_000_001_000}, 1)")))
            writer.start()
            writer.join(PAUSE_S)
            assert writer.is_alive() and not answers
        finally:
            for s in followers:
                s.proc.send_signal(signal.SIGCONT)
        writer.join(30)
        assert answers == [[[1]]]
        for server in nodes:  # every INSERT was answered once the high watermark passed it (acks=all)
            assert sql(server, "SELECT COUNT(*) FROM r.st") == [[ROWS + 1]]  # (and the row of the pause)
        sql(n1, "CREATE TOPIC tr AS STABLE r.st")
        leaders = {}
        for server in nodes:
            described = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"}).list_topics(
                "tr", timeout=30).topics["tr"]
            assert described.error is None and sorted(described.partitions) == list(range(VGROUPS))
            for p, part in described.partitions.items():
                assert sorted(part.replicas) == [1, 2, 3] and sorted(part.isrs) == [1, 2, 3], part
                assert leaders.setdefault(p, part.leader) == part.leader in (1, 2, 3)
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{n1.kafka_port}", "group.id": "g",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("tr", p, 0) for p in range(VGROUPS)])
            got: dict[int, list[bytes]] = defaultdict(list)
            poll_until(consumer, got, ROWS + 1)
            assert sum(map(len, got.values())) == ROWS + 1
        finally:
            consumer.close()
        leader = nodes[leaders[0] - 1]
        assert errors(leader, 0) == (ErrorCode.none, ErrorCode.none)
        for follower in (s for s in nodes if s is not leader):
            # a follower serves a consumer's Fetch v11+ (KIP-392), ListOffsets stays the leader's
            assert errors(follower, 0) == (ErrorCode.none, ErrorCode.not_leader_or_follower)
        led = leader_of(nodes, "r", 0)
        assert led is not None and led[1] is leader
        epoch = led[0]  # (the etcd revision the Reconciler made the state at: above 0)
        assert errors(leader, 0, epoch) == (ErrorCode.none, ErrorCode.none)
        assert errors(leader, 0, epoch + 1) == (ErrorCode.unknown_leader_epoch,) * 2
        assert errors(leader, 0, epoch - 1) == (ErrorCode.fenced_leader_epoch,) * 2

        def checkpointed(vgroup: int) -> set[int | None]:
            return {hw_checkpoint.read(s.data_dir / "db" / rid / f"vnode{vgroup}") for s in nodes}

        for i in range(VGROUPS):  # serve's replica manager writes each replica's high watermark checkpoint
            eventually(f"vgroup {i}'s high watermark checkpointed alike on every replica",
                       lambda i=i: len(hw := checkpointed(i)) == 1 and (hw.pop() or 0) > 0)
        for server in nodes:
            no_traceback(server)
        assert "leading epoch" in "".join(s.log() for s in nodes)


def one_vgroup_on_three(stack: ExitStack, etcd: EtcdCluster, tmp_path: Path, db: str, rows: int, *args: str
                        ) -> tuple[list[WalgateServer], WalgateServer]:
    """Nodes 1-3 (``args``: their flags; node 1 the controller) entered on ``stack``, database ``db`` (``VGROUPS 1
    REPLICA 3``, every write durable before it is answered) with supertable ``st`` and ``rows`` rows written through
    the three in turn; the nodes and the leader of its vgroup."""
    n1 = stack.enter_context(node(etcd, tmp_path, 1, *args))
    wait_log(n1, "node 1: controller")
    nodes = [n1, *(stack.enter_context(node(etcd, tmp_path, i, *args)) for i in (2, 3))]
    all_ready(nodes)
    sql(n1, f"CREATE DATABASE {db} VGROUPS 1 REPLICA 3 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
    sql(n1, f"CREATE STABLE {db}.st (ts TIMESTAMP, v INT) TAGS (site INT)")
    eventually("a leader", lambda: leader_of(nodes, db, 0) is not None)
    for k in range(rows):
        sql(nodes[k % 3], f"INSERT INTO {db}.t{k % 3} USING {db}.st TAGS ({k % 3}) VALUES ({1_700_000_000_000 + k}, {k})")
    return nodes, leader_of(nodes, db, 0)[1]  # type: ignore[index]


def test_a_killed_leader_is_replaced_within_the_lease(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """kill -9 of a vgroup's leader: within the lease TTL (2 s) and a few seconds the controller elects another
    replica of the ISR (in the next epoch), Metadata names it and the dead node out of the ISR, the survivors' WALs are equal,
    and a consumer bootstrapped on a survivor reads every row from the new leader; the dead node restarted on its
    data dir (a new broker epoch) follows the new leader and rejoins the ISR (``replica.lag.time.max.ms`` 2 s).
    SQL INSERTs and SELECTs through either survivor go to the new leader."""
    with ExitStack() as stack:
        nodes, dead = one_vgroup_on_three(stack, etcd1, tmp_path, "f", 10, *LAG)
        sql(nodes[0], "CREATE TOPIC tf AS STABLE f.st")
        dead_id = nodes.index(dead) + 1
        survivors = [s for s in nodes if s is not dead]
        dead.proc.kill()
        dead.proc.wait(timeout=30)
        killed = time.monotonic()
        eventually("a new leader", lambda: leader_of(survivors, "f", 0) is not None)
        failover_s = time.monotonic() - killed
        assert failover_s < 2 + 5, failover_s
        raws = [wal_bytes(s, db_id(survivors[0], "f"), 0) for s in survivors]
        assert raws[0] and raws[0] == raws[1]
        part = AdminClient({"bootstrap.servers": f"127.0.0.1:{survivors[0].kafka_port}"}).list_topics(
            "tf", timeout=30).topics["tf"].partitions[0]
        assert part.leader in {nodes.index(s) + 1 for s in survivors} and dead_id not in part.isrs, part
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{survivors[1].kafka_port}", "group.id": "g",
                             "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("tf", 0, 0)])
            got: dict[int, list[bytes]] = defaultdict(list)
            poll_until(consumer, got, 10)
            assert len(got[0]) == 10
        finally:
            consumer.close()
        for k, server in enumerate(survivors):  # written on the new leader, read from it through either survivor
            sql(server, f"INSERT INTO f.t{k} USING f.st TAGS ({k}) VALUES ({1_700_000_001_000 + k}, {k})")
        for server in survivors:
            assert sql(server, "SELECT COUNT(*) FROM f.st") == [[12]]
        back = stack.enter_context(node(etcd1, tmp_path, dead_id, *LAG))

        def isr() -> list[int]:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{survivors[0].kafka_port}"})
            return sorted(admin.list_topics("tf", timeout=30).topics["tf"].partitions[0].isrs)

        eventually("the restarted node back in the ISR", lambda: isr() == [1, 2, 3])
        for server in [*survivors, back]:
            no_traceback(server)


def test_a_stopped_leader_hands_its_vgroups_over_before_it_stops(etcd1: EtcdCluster, tmp_path: Path) -> None:
    """Controlled shutdown (Kafka's ``controlled.shutdown.enable``): SIGTERM to a vgroup's leader, whose lease would
    keep it registered for 30 s after a crash: it marks its registration shutting down (KIP-631: still registered),
    the controller elects another in-sync replica at once, and the node deregisters and stops only once it leads
    nothing (its log says so), long before its lease would have expired; the survivors take writes and hold every
    row."""
    long_lease = ("--override", "broker.session.timeout.ms=30000", *LAG)
    with ExitStack() as stack:
        nodes, leader = one_vgroup_on_three(stack, etcd1, tmp_path, "h", 6, *long_lease)
        survivors = [s for s in nodes if s is not leader]
        stopping = time.monotonic()
        leader.proc.send_signal(signal.SIGTERM)
        leader.proc.wait(timeout=60)
        stopped_s = time.monotonic() - stopping
        assert "controlled shutdown: leadership of 1 vgroups moved to other replicas" in leader.log(), leader.log()[-3000:]
        assert stopped_s < 30, stopped_s  # (it did not wait for its lease: that is 30 s)
        eventually("a survivor leads", lambda: leader_of(survivors, "h", 0) is not None)
        for k, server in enumerate(survivors):
            sql(server, f"INSERT INTO h.t{k} USING h.st TAGS ({k}) VALUES ({1_700_000_001_000 + k}, {k})")
        for server in survivors:
            assert sql(server, "SELECT COUNT(*) FROM h.st") == [[8]]
        for server in nodes:
            no_traceback(server)


def test_the_local_part_of_an_insert_spanning_nodes_waits_for_its_high_watermark(etcd1: EtcdCluster,
                                                                                  tmp_path: Path) -> None:
    """rv3 F4, four nodes: node L leads vgroup a of ``REPLICA 3`` database s, one of whose other replicas, F, is paused
    (1.5 s: still in the ISR), and another node leads vgroup b (F holds no replica of it). An INSERT into both sent
    to L (refused there for b's row: split, b's part sent to b's leader) is answered only once F holds L's part
    too, after F resumes: L's own part waits for its high watermark like any write (before the fix it was answered
    as soon as b's part was, with F paused)."""
    with ExitStack() as stack:
        n1 = stack.enter_context(node(etcd1, tmp_path, 1, *SESSION))
        wait_log(n1, "node 1: controller")
        nodes = [n1, *(stack.enter_context(node(etcd1, tmp_path, i, *SESSION)) for i in (2, 3, 4))]
        eventually("four live nodes", lambda: len(sql(n1, "SHOW DNODES")) == 4)
        sql(n1, "CREATE DATABASE s VGROUPS 2 REPLICA 3 WAL_LEVEL 2 WAL_FSYNC_PERIOD 0")
        sql(n1, "CREATE STABLE s.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        sid = db_id(n1, "s")
        eventually("a leader for each vgroup", lambda: "".join(s.log() for s in nodes).count("leading epoch") == 2)
        replicas = [{k + 1 for k, s in enumerate(nodes) if (s.data_dir / "db" / sid / f"vnode{i}").is_dir()}
                    for i in range(2)]
        leaders = [next(k + 1 for k, s in enumerate(nodes) if f"vnode {i} of database s: leading" in s.log())
                   for i in range(2)]
        a = next(i for i in range(2) if leaders[i] != leaders[1 - i] and replicas[i] - {leaders[i]} - replicas[1 - i])
        leader, paused = nodes[leaders[a] - 1], nodes[min(replicas[a] - {leaders[a]} - replicas[1 - a]) - 1]
        names = [next(f"t{k}" for k in range(100) if vnode_of("s", f"t{k}", 2) == i) for i in (a, 1 - a)]
        for k, name in enumerate(names):  # (the tables made first: the INSERT below writes rows only)
            sql(nodes[leaders[(a + k) % 2] - 1], f"INSERT INTO s.{name} USING s.st TAGS ({k}) VALUES (1700000000000, 0)")
        answers: list[object] = []
        paused.proc.send_signal(signal.SIGSTOP)
        try:
            writer = threading.Thread(target=lambda: answers.append(sql(
                leader, f"INSERT INTO s.{names[0]} VALUES (1700000000001, 1) s.{names[1]} VALUES (1700000000001, 1)")))
            writer.start()
            writer.join(PAUSE_S)
            assert writer.is_alive() and not answers, "answered while the ISR member holding L's part was paused"
        finally:
            paused.proc.send_signal(signal.SIGCONT)
        writer.join(30)
        assert answers == [[[2]]]
        assert wal_bytes(paused, sid, a) == wal_bytes(leader, sid, a)  # at the answer, F held L's part
        for server in nodes:
            no_traceback(server)
