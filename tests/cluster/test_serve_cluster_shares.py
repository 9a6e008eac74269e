"""Share groups (KIP-932) across cluster nodes (docs/cluster.md, "Share groups"): real ``walgate serve --cluster``
nodes over a real etcd (stopped by PID), ``offsets.topic.num.partitions=4``, a topic whose two partitions are on
both nodes, and the real Java ``KafkaShareConsumer`` (kafka-clients 4.3, compat-tests/java/ShareWorker.java and
ShareHolder.java).

The group's coordinator (node 2) answers its ShareGroupHeartbeat, node 1 NOT_COORDINATOR; each partition's node
answers ShareFetch / ShareAcknowledge for it, the other NOT_LEADER_OR_FOLLOWER with the leader (KIP-951). Two share
consumers bootstrapped on different nodes receive every record exactly once when they ACCEPT, a RELEASEd record is
delivered again (until the delivery limit archives it); after kill -9 and restart of node 1 (a partition's node, not
the group's coordinator) the records acknowledged there are not delivered again. The group's coordinator describes
and alters the start offsets of both partitions (node 1's through the share coordinator's state RPCs). A consumer
killed with a batch acquired: its records come back when their locks end, to another consumer, delivery count 2."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from etcd_cluster import EtcdCluster
from serve_support import JARS, JAVA_DIR, eventually, no_traceback, node, produce_to, setup_clients, wait_log
from test_serve_cluster_coordinators import COORDINATED, _find, _group_of, _placement, _request

from livewalgate import WalgateServer
from walgate.wire.errors import ErrorCode

TOPIC = "jobs"
LOCK_MS = 6000
SHARES = (*COORDINATED, "--override", f"group.share.record.lock.duration.ms={LOCK_MS}",
          "--override", "group.share.delivery.count.limit=3")
QUICK_SESSIONS = ("--override", "group.share.heartbeat.interval.ms=2000",
                  "--override", "group.share.session.timeout.ms=8000")  # a killed member leaves the group within 8 s


def _java(program: str, port: int, group: str, *args: str) -> subprocess.Popen[str]:
    """compat-tests/java/``program`` on the real kafka-clients 4.3 against ``TOPIC`` in share group ``group``,
    bootstrapped on the node at ``port`` (stopped by PID by the caller)."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is not installed (.ci/run installs it)")
    failed = setup_clients.setup(JARS)
    if failed is not None:
        pytest.fail(failed)
    return subprocess.Popen([java, "-Xmx256m", f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}", "-cp",
                             setup_clients.classpath(JARS), str(JAVA_DIR / program), f"127.0.0.1:{port}", TOPIC, group,
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _records(proc: subprocess.Popen[str], timeout: float = 180) -> list[dict[str, Any]]:
    """The records a ShareWorker printed; it must exit 0 within ``timeout`` seconds."""
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out[-2000:], err[-3000:])
    return [e for e in map(json.loads, (line for line in out.splitlines() if line.startswith("{")))
            if e["event"] == "record"]


def _cluster_topic(n1: WalgateServer, group: str) -> dict[int, int]:
    """``TOPIC`` (2 partitions) created through node 1, ``group`` reading from the earliest record; the node of
    each partition (one on each node)."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{n1.kafka_port}"})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    leaders = {p.id: p.leader for p in admin.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions.values()}
    assert sorted(leaders.values()) == [1, 2], leaders
    return leaders


def _values(port: int, prefix: str, count: int) -> set[str]:
    """``count`` records ``<prefix><p>-<i>`` produced to each partition through the node at ``port``; their values."""
    values = {p: [f"{prefix}{p}-{i}" for i in range(count)] for p in (0, 1)}
    acked = produce_to(port, TOPIC, {p: [v.encode() for v in vs] for p, vs in values.items()})
    assert {p: len(o) for p, o in acked.items()} == {0: count, 1: count}
    return {v for vs in values.values() for v in vs}


def test_share_consumers_on_two_nodes_share_a_topic_spread_over_both(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *SHARES) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *SHARES) as n2:
            wait_log(n1, "nodes 1,2")
            _find(n1.kafka_port, "first")  # places the coordinator partitions over both nodes
            group = _group_of(_placement(etcd1), 2, "workers")
            leaders = _cluster_topic(n1, group)
            on1 = next(p for p, n in leaders.items() if n == 1)  # node 1 leads it, node 2 coordinates the group
            workers = [_java("ShareWorker.java", port, group, "--idle", "5", "--timeout", "150",
                             "--release-value", "again") for port in (n1.kafka_port, n2.kafka_port)]
            try:
                # the first member is told both partitions; it learns that it has one only at its next heartbeat
                # after the second joined (KIP-932: no revocation), and until then it may take every record
                eventually("both consumers joined and each was told a partition of its own",
                           lambda: sorted(_assigned(n2, group)) == [(0,), (1,)])
                want = _values(n1.kafka_port, "v", 15)
                assert produce_to(n1.kafka_port, TOPIC, {on1: [b"again"]}) == {on1: [15]}
                each = [_records(w) for w in workers]
            finally:
                for w in workers:
                    if w.poll() is None:
                        w.kill()
                        w.wait()
            assert all(each), "both consumers received records"
            got = [r for records in each for r in records]
            accepted = Counter(r["value"] for r in got if r["value"] != "again")
            assert set(accepted) == want and set(accepted.values()) == {1}, "every record exactly once"
            assert sorted(r["delivery_count"] for r in got if r["value"] == "again") == [1, 2, 3], \
                "the RELEASEd record is delivered again until the delivery limit archives it"

            heartbeat = {"group_id": group, "member_id": str(uuid.uuid4()), "member_epoch": 0, "rack_id": None,
                         "subscribed_topic_names": [TOPIC]}
            assert _request(n1.kafka_port, 76, 1, heartbeat).error_code == ErrorCode.not_coordinator
            described = _request(n1.kafka_port, 77, 1, {"group_ids": [group], "include_authorized_operations": False})
            assert [g.error_code for g in described.groups] == [ErrorCode.not_coordinator]
            _not_leader(n1, n2, group, leaders)
            listed = {i: {g.group_id for g in _request(s.kafka_port, 16, 5, {"types_filter": ["share"]}).groups}
                      for i, s in ((1, n1), (2, n2))}
            assert listed == {1: set(), 2: {group}}, "the group's coordinator lists it"
            _admin(n1, n2, group, on1)

            port1, data1 = n1.kafka_port, n1.data_dir
            n1.proc.send_signal(signal.SIGKILL)  # the node of partition `on1`, acknowledged there
            n1.proc.wait(timeout=30)
            with node(etcd1, tmp_path, 1, *SHARES, data_dir=data1, kafka_port=port1) as again:
                after = _values(n2.kafka_port, "after", 5)
                late = _records(_java("ShareWorker.java", port1, group, "--idle", "5", "--timeout", "150"))
                assert sorted(r["value"] for r in late) == sorted(after), \
                    "nothing acknowledged before the kill is delivered again"
                no_traceback(again)
            no_traceback(n2)
        assert "Traceback" not in n1.log()


def _assigned(server: WalgateServer, group: str) -> list[tuple[int, ...]]:
    """The partitions of ``TOPIC`` each member of ``group`` was last told (ShareGroupDescribe through ``server``,
    its coordinator)."""
    described = _request(server.kafka_port, 77, 1, {"group_ids": [group], "include_authorized_operations": False})
    return [tuple(p for t in m.assignment.topic_partitions if t.topic_name == TOPIC for p in t.partitions)
            for m in described.groups[0].members]


def _admin(n1: WalgateServer, n2: WalgateServer, group: str, on1: int) -> None:
    """Share-group administration of the (now empty) group: NOT_COORDINATOR from node 1 (DeleteGroups too); its
    coordinator, node 2, answers for both partitions, reading and setting the state node 1 keeps of partition
    ``on1`` there (15 records and the RELEASEd one, archived: start offset 16) beside its own (15 records: 15). The
    alter sets each where it is, so the late consumer below sees nothing acknowledged again
    (tests/cluster/test_serve_cluster_share_admin.py changes and deletes them)."""
    on2 = 1 - on1
    asked = {"groups": [{"group_id": group, "topics": [{"topic_name": TOPIC, "partitions": [0, 1]}]}]}
    assert [g.error_code for g in _request(n1.kafka_port, 90, 1, asked).groups] == [ErrorCode.not_coordinator]

    def described() -> dict[int, tuple[int, int]]:
        return {p.partition_index: (p.error_code, p.start_offset) for g in _request(n2.kafka_port, 90, 1, asked).groups
                for t in g.topics for p in t.partitions}

    assert described() == {on2: (ErrorCode.none, 15), on1: (ErrorCode.none, 16)}
    alter = {"group_id": group, "topics": [{"topic_name": TOPIC, "partitions": [
        {"partition_index": p, "start_offset": 15 + (p == on1)} for p in (0, 1)]}]}
    assert _request(n1.kafka_port, 91, 0, alter).error_code == ErrorCode.not_coordinator
    altered = _request(n2.kafka_port, 91, 0, alter)
    assert {p.partition_index: p.error_code for t in altered.responses for p in t.partitions} == {
        on2: ErrorCode.none, on1: ErrorCode.none}
    assert described() == {on2: (ErrorCode.none, 15), on1: (ErrorCode.none, 16)}
    deleted = _request(n1.kafka_port, 92, 0, {"group_id": group, "topics": [{"topic_name": TOPIC}]})
    assert deleted.error_code == ErrorCode.not_coordinator
    assert [(r.group_id, r.error_code) for r in _request(n1.kafka_port, 42, 2, {"groups_names": [group]}).results] == [
        (group, ErrorCode.not_coordinator)], "node 1 keeps partition on1's state (the late consumer below shows it)"


def _not_leader(n1: WalgateServer, n2: WalgateServer, group: str, leaders: dict[int, int]) -> None:
    """A ShareFetch naming both partitions through node 1 (a new member's session: node 1 does not coordinate the
    group) answers node 2's NOT_LEADER_OR_FOLLOWER with node 2 as its leader and endpoint; ShareAcknowledge too."""
    tid = _request(n1.kafka_port, 3, 12, {"topics": [{"name": TOPIC}]}).topics[0].topic_id
    member = str(uuid.uuid4())
    parts = [{"partition_index": p, "acknowledgement_batches": []} for p in (0, 1)]
    fetched = _request(n1.kafka_port, 78, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
        "topics": [{"topic_id": tid, "partitions": parts}], "forgotten_topics_data": []})
    assert fetched.error_code == ErrorCode.none, fetched
    answers = {p.partition_index: (p.error_code, p.current_leader.leader_id) for t in fetched.responses
               for p in t.partitions}
    elsewhere = next(p for p, n in leaders.items() if n == 2)
    assert answers[elsewhere] == (ErrorCode.not_leader_or_follower, 2)
    assert answers[1 - elsewhere] == (ErrorCode.none, 1)
    assert [(e.node_id, e.port) for e in fetched.node_endpoints] == [(2, n2.kafka_port)]
    acked = _request(n1.kafka_port, 79, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": -1, "topics": [
            {"topic_id": tid, "partitions": [{"partition_index": elsewhere, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]})
    assert [(p.error_code, p.current_leader.leader_id) for t in acked.responses for p in t.partitions] == [
        (ErrorCode.not_leader_or_follower, 2)]


def test_records_a_killed_share_consumer_held_come_back_after_their_lock(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *SHARES, *QUICK_SESSIONS) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *SHARES, *QUICK_SESSIONS) as n2:
            wait_log(n1, "nodes 1,2")
            _find(n1.kafka_port, "first")
            group = _group_of(_placement(etcd1), 1, "held")
            _cluster_topic(n1, group)
            want = _values(n2.kafka_port, "h", 10)
            holder = _java("ShareHolder.java", n2.kafka_port, group, "--hold", "120", "--timeout", "120")
            held: list[dict[str, Any]] = []
            try:
                assert holder.stdout is not None
                for line in holder.stdout:  # bounded: the holder prints "holding" or exits at its --timeout
                    event = json.loads(line) if line.startswith("{") else {}
                    if event.get("event") == "record":
                        held.append(event)
                    if event.get("event") in ("holding", "error"):
                        break
            finally:
                holder.send_signal(signal.SIGKILL)  # dies holding its batch, unacknowledged
                holder.communicate(timeout=30)
            assert held and {r["delivery_count"] for r in held} == {1}, held
            got = _records(_java("ShareWorker.java", n1.kafka_port, group, "--idle", str(LOCK_MS / 1000 + 4),
                                 "--timeout", "150"))
            assert Counter(r["value"] for r in got) == Counter(want), "each record once, the held ones again"
            assert all(r["delivery_count"] >= 2 for r in got if r["value"] in {h["value"] for h in held}), \
                "the killed consumer's records came back when their locks ended"
            no_traceback(n2)
        no_traceback(n1)
