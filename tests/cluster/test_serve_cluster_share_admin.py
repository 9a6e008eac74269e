"""Share-group administration across cluster nodes (docs/cluster.md, "Share groups"): real ``walgate serve
--cluster`` nodes over a real etcd (stopped by PID), a topic with a partition on each node, a share group
coordinated by node 2, the real Java Admin of kafka-clients 4.3 (compat-tests/java/ShareGroupOffsetsAdmin.java) and
``ShareWorker`` (``KafkaShareConsumer``).

The coordinator reaches the share-partition state node 1 keeps with the share coordinator's state RPCs
(ReadShareGroupStateSummary, InitializeShareGroupState, DeleteShareGroupState, KIP-932) and its high watermark with
ListOffsets: the Admin bootstrapped on either node describes (start offsets and lags), alters and deletes the group's
offsets on both partitions; DeleteGroups removes its state on both nodes (the next consumer starts again from
``share.auto.offset.reset=earliest``); a group that consumed only node 1's partition is altered and deleted through
node 2, which keeps none of its state; with node 1 killed, its partition answers COORDINATOR_NOT_AVAILABLE
(retriable) while node 2's is described, altered and deleted, and a group whose state only node 1 keeps answers
COORDINATOR_NOT_AVAILABLE to DeleteGroups, AlterShareGroupOffsets, DeleteShareGroupOffsets and ShareGroupDescribe
(not GROUP_ID_NOT_FOUND, which Java's Admin takes as final), while DeleteGroups deletes a consumer group of node 2's
without asking node 1. A group whose state only node 1 keeps is found through its coordinator (ShareGroupDescribe,
ListGroups) and its id refused to a consumer group; FindCoordinator key type 2 names each share-partition's node to
a cluster node only.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import random
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from etcd_cluster import EtcdCluster
from prometheus_client.parser import text_string_to_metric_families
from serve_support import JARS, JAVA_DIR, eventually, no_traceback, node, node_token, setup_clients, wait_log
from test_serve_cluster_coordinators import _find, _group_of, _placement, _request
from test_serve_cluster_node_auth import _authenticated
from test_serve_cluster_shares import SHARES, TOPIC, _cluster_topic, _java, _records, _values

from livewalgate import WalgateServer
from tests.gateway.gateway_helpers import build, kio_classes
from walgate.coordinator.share_partition_key import parse_share_key
from walgate.security.node_token import node_password
from walgate.wire.errors import ErrorCode


def _admin(port: int, *ops: list[str]) -> list[list[dict[str, Any]]]:
    """The results of each operation, run in order by one Java Admin bootstrapped on the node at ``port`` (one
    JVM: they take seconds to start); it must exit 0 within 90 s."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is not installed (.ci/run installs it)")
    failed = setup_clients.setup(JARS)
    if failed is not None:
        pytest.fail(failed)
    argv = [a for op in ops for a in ["--", *op]][1:]
    proc = subprocess.Popen([java, "-Xmx256m", f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}", "-cp",
                             setup_clients.classpath(JARS), str(JAVA_DIR / "ShareGroupOffsetsAdmin.java"),
                             f"127.0.0.1:{port}", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out[-2000:], err[-3000:])
    results: list[list[dict[str, Any]]] = []
    for line in (json.loads(x) for x in out.splitlines() if x.startswith("{")):
        if "op" in line:
            results.append([])
        else:
            results[-1].append(line)
    return results


def _starts(port: int, group: str) -> dict[int, tuple[int, int]]:
    """Partition -> (error code, start offset) of ``TOPIC``'s two partitions, DescribeShareGroupOffsets v1 through
    the node at ``port``."""
    asked = {"groups": [{"group_id": group, "topics": [{"topic_name": TOPIC, "partitions": [0, 1]}]}]}
    return {p.partition_index: (p.error_code, p.start_offset) for g in _request(port, 90, 1, asked).groups
            for t in g.topics for p in t.partitions}


def _consumed(leaders: dict[int, WalgateServer], group: str, coordinator: WalgateServer) -> None:
    """``group`` reads from the earliest record; its member ``m`` (joined through ``coordinator``) acquires and accepts
    the 3 records of each partition of ``TOPIC`` in ``leaders`` through its leader there, closes its share sessions
    and leaves: those share-partitions' start offset is 3 (a quicker consumer than a JVM's)."""
    for leader in leaders.values():  # answered once applied on that node
        answers: list[Any] = []

        def configured(port: int = leader.kafka_port) -> bool:  # asked again while it answers REQUEST_TIMED_OUT: on a
            answers.append(_request(port, 44, 1, {"validate_only": False, "resources": [  # loaded machine the 2 s
                {"resource_type": 32, "resource_name": group, "configs": [  # lease of the controller may lapse
                    {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}]}))
            return [r.error_code for r in answers[-1].responses] != [ErrorCode.request_timed_out]

        eventually(f"group {group}'s config set", configured)
        assert [r.error_code for r in answers[-1].responses] == [ErrorCode.none], answers[-1]
    tid = _request(coordinator.kafka_port, 3, 12, {"topics": [{"name": TOPIC}]}).topics[0].topic_id
    joined = _request(coordinator.kafka_port, 76, 1, {"group_id": group, "member_id": "m", "member_epoch": 0,
                                                       "rack_id": None, "subscribed_topic_names": [TOPIC]})
    assert joined.error_code == ErrorCode.none, joined
    for p, leader in leaders.items():
        fetched = _request(leader.kafka_port, 78, 1, {
            "group_id": group, "member_id": "m", "share_session_epoch": 0, "max_wait": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10, "forgotten_topics_data": [],
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": p, "acknowledgement_batches": []}]}]})
        assert [(a.first_offset, a.last_offset) for t in fetched.responses for q in t.partitions
                for a in q.acquired_records] == [(0, 2)], fetched
        acked = _request(leader.kafka_port, 79, 1, {
            "group_id": group, "member_id": "m", "share_session_epoch": -1, "topics": [
                {"topic_id": tid, "partitions": [{"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]}]}]}]})
        assert [q.error_code for t in acked.responses for q in t.partitions] == [ErrorCode.none], acked
    left = _request(coordinator.kafka_port, 76, 1, {"group_id": group, "member_id": "m", "member_epoch": -1,
                                                     "rack_id": None, "subscribed_topic_names": None})
    assert left.error_code == ErrorCode.none, left


def _answered(server: WalgateServer, api: str) -> float:
    """How many ``api`` requests ``server`` answered (its /metrics)."""
    with urllib.request.urlopen(f"{server.http_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "kafka_network_requestmetrics_requests_total" and s.labels.get("request") == api)


def _found_across_nodes(etcd: EtcdCluster, n1: WalgateServer, n2: WalgateServer, group: str, on1: int) -> None:
    """``group``, coordinated by node 2, without members, its state only on node 1 (partition ``on1``), is found
    through its coordinator as Kafka's coordinator finds a share group: ShareGroupDescribe answers it ``Empty``,
    ListGroups lists it there (and not on node 1), and a consumer group's first join of its id is refused (KIP-848:
    GROUP_ID_NOT_FOUND, classic: INCONSISTENT_GROUP_PROTOCOL). FindCoordinator key type 2 (KIP-932) names the node
    keeping each of its share-partitions' state to a cluster node, and refuses a client."""
    described = _request(n2.kafka_port, 77, 1, {"group_ids": [group], "include_authorized_operations": False})
    assert [(g.error_code, g.group_state, list(g.members)) for g in described.groups] == [(ErrorCode.none, "Empty", [])]
    listed = {n: {(g.group_id, g.group_state) for g in _request(port, 16, 5, {
        "states_filter": [], "types_filter": ["share"]}).groups} for n, port in ((1, n1.kafka_port), (2, n2.kafka_port))}
    assert (group, "Empty") in listed[2] and group not in {g for g, _ in listed[1]}, listed
    assert not {g for g, _ in listed[1]} & {g for g, _ in listed[2]}, "each group on its coordinator only"
    summaries_before = _answered(n1, "ReadShareGroupStateSummary")
    joined = _request(n2.kafka_port, 68, 1, {"group_id": group, "member_id": "c" * 22, "member_epoch": 0,
                                             "rebalance_timeout": 30_000, "subscribed_topic_names": [TOPIC],
                                             "topic_partitions": []})
    assert (joined.error_code, joined.error_message) == (ErrorCode.group_id_not_found,
                                                         f"Group {group} is not a consumer group.")
    classic = _request(n2.kafka_port, 11, 9, {"group_id": group, "session_timeout": 30_000,
                                              "rebalance_timeout": 30_000, "member_id": "", "group_instance_id": None,
                                              "protocol_type": "consumer", "protocols": [{"name": "range",
                                                                                          "metadata": b""}],
                                              "reason": None})
    assert classic.error_code == ErrorCode.inconsistent_group_protocol
    # the joins asked node 1 its share groups (a ListGroups), not a summary of every partition placed there (rv7 R7-2)
    assert _answered(n1, "ReadShareGroupStateSummary") == summaries_before
    tid = _request(n2.kafka_port, 3, 12, {"topics": [{"name": TOPIC}]}).topics[0].topic_id
    text = base64.urlsafe_b64encode(tid.bytes).decode().rstrip("=")
    keys = [f"{group}:{text}:{on1}", f"{group}:{text}:{1 - on1}", f"{group}:{text}", f"{group}:{uuid.uuid4()}:0"]
    with _authenticated(n2.kafka_port, "walgate-node-1", "walgate-node-1",
                        node_password(node_token(etcd), "walgate-node-1")) as conn:
        found = conn.request(build(kio_classes(10, 6)[0], {"key_type": 2, "coordinator_keys": keys}))
        assert [(c.node_id, c.port, c.error_code) for c in found.coordinators] == [
            (1, n1.kafka_port, ErrorCode.none), (2, n2.kafka_port, ErrorCode.none),
            (-1, -1, ErrorCode.invalid_request), (-1, -1, ErrorCode.invalid_request)]
        mutated = _mutated_keys(keys[0], random.Random(24), 300)  # seeded, bounded: a fuzz of the key's parsing
        found = conn.request(build(kio_classes(10, 6)[0], {"key_type": 2, "coordinator_keys": mutated}))
    nodes = {on1: 1, 1 - on1: 2}
    for key, answer in zip(mutated, found.coordinators, strict=True):
        try:
            share = parse_share_key(key)
        except ValueError:
            want = (-1, ErrorCode.invalid_request)
        else:  # (a partition the topic does not have: the node asked, as for a topic without placement)
            want = (nodes.get(share.partition, 2), ErrorCode.none) if share.topic_id == tid else (
                -1, ErrorCode.coordinator_not_available)
        assert (answer.key, answer.node_id, answer.error_code) == (key, *want)
    found = _request(n2.kafka_port, 10, 6, {"key_type": 2, "coordinator_keys": keys[:1]})
    assert [c.error_code for c in found.coordinators] == [ErrorCode.cluster_authorization_failed]


def _mutated_keys(key: str, rng: random.Random, count: int) -> list[str]:
    """``count`` keys made from ``key`` by up to three random edits each (characters that matter to a share
    coordinator key inserted, replaced or removed)."""
    alphabet = ":-_=+ 0123456789aZ\u00e9"
    out = []
    for _ in range(count):
        chars = list(key)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(chars) + 1)
            edit = rng.choice(("insert", "replace", "remove"))
            if edit == "insert" or not chars or at == len(chars):
                chars.insert(at, rng.choice(alphabet))
            elif edit == "replace":
                chars[at] = rng.choice(alphabet)
            else:
                del chars[at]
        out.append("".join(chars))
    return out


def _unread(port: int) -> bool:
    """Whether a connection to the local port ``port`` (IPv4) has bytes its process has not read."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return any(int(local.split(":")[1], 16) == port and int(queues.split(":")[1], 16) > 0
               for local, _remote, state, queues in (line.split()[1:5] for line in lines) if state == "01")


def _deleted_while_held(n1: WalgateServer, n2: WalgateServer, group: str, consumers: str) -> None:
    """DeleteGroups of ``group`` (empty, its state on node 1 only) through node 2, its coordinator, with node 1
    stopped (SIGSTOP) meanwhile, so that node 2 waits for its answer: a member's join through node 2 in that window
    answers COORDINATOR_LOAD_IN_PROGRESS (retriable: the group is held from the emptiness check until node 1
    answered), so no member fetches from a partition whose state is being deleted; node 1 resumed, the group is
    deleted and a join is taken again. Meanwhile the first join of a new consumer group ``consumers`` (node 2's),
    whose id node 2 asks node 1 about, is taken within seconds, not after the node links' 10 s."""
    def join() -> Any:
        return _request(n2.kafka_port, 76, 1, {"group_id": group, "member_id": "late", "member_epoch": 0,
                                               "rack_id": None, "subscribed_topic_names": [TOPIC]})

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        n1.proc.send_signal(signal.SIGSTOP)
        try:
            deleting = pool.submit(_request, n2.kafka_port, 42, 2, {"groups_names": [group]})
            deadline = time.monotonic() + 30
            while not _unread(n1.kafka_port) and time.monotonic() < deadline and not deleting.done():
                time.sleep(0.01)  # until node 2 asked the stopped node 1, after holding the group
            assert _unread(n1.kafka_port) and not deleting.done(), "node 2 asks node 1 whether it keeps state"
            assert join().error_code == ErrorCode.coordinator_load_in_progress
            started = time.monotonic()
            joined = _request(n2.kafka_port, 68, 1, {"group_id": consumers, "member_id": "c" * 22, "member_epoch": 0,
                                                     "rebalance_timeout": 30_000, "subscribed_topic_names": [TOPIC],
                                                     "topic_partitions": []})
            assert joined.error_code == ErrorCode.none and time.monotonic() - started < 6, "let through in ~2 s"
        finally:
            n1.proc.send_signal(signal.SIGCONT)
        assert [(r.group_id, r.error_code) for r in deleting.result(timeout=60).results] == [(group, ErrorCode.none)]
    assert join().error_code == ErrorCode.none, "the hold ended with the deletion"
    left = _request(n2.kafka_port, 76, 1, {"group_id": group, "member_id": "late", "member_epoch": -1,
                                           "rack_id": None, "subscribed_topic_names": None})
    assert left.error_code == ErrorCode.none


def test_java_admin_describes_alters_and_deletes_share_offsets_on_both_nodes(etcd1: EtcdCluster,
                                                                             tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *SHARES) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *SHARES) as n2:
            wait_log(n1, "nodes 1,2")
            _find(n1.kafka_port, "first")  # places the coordinator partitions over both nodes
            group = _group_of(_placement(etcd1), 2, "admin")
            leaders = _cluster_topic(n1, group)
            on1 = next(p for p, n in leaders.items() if n == 1)  # node 1 keeps its state, node 2 coordinates
            want = _values(n1.kafka_port, "a", 3)
            servers = {p: n1 if n == 1 else n2 for p, n in leaders.items()}
            _consumed(servers, group, coordinator=n2)

            tp = {p: f"{TOPIC}:{p}" for p in (0, 1)}

            def offsets(*starts: int) -> list[dict[str, Any]]:
                """The Admin's lines for start offsets ``starts`` of partitions 0 and 1 (3 records each, the lag
                what is left: node 1's from its high watermark, which node 2 asks it for)."""
                return [{"tp": tp[p], "start": s, "lag": 3 - s} for p, s in enumerate(starts)]

            assert _admin(n1.kafka_port, ["offsets", group], ["alter", group, f"{tp[0]}=1", f"{tp[1]}=2"],
                          ["offsets", group, tp[0], tp[1]]) == [
                offsets(3, 3), [{"item": tp[0]}, {"item": tp[1]}], offsets(1, 2)]
            assert _starts(n2.kafka_port, group) == {0: (ErrorCode.none, 1), 1: (ErrorCode.none, 2)}
            assert _admin(n2.kafka_port, ["delete", group], ["offsets", group, tp[0], tp[1]]) == [
                [{"item": group}], [{"tp": tp[p], "start": None, "lag": None} for p in (0, 1)]]
            again = _records(_java("ShareWorker.java", n2.kafka_port, group, "--max-records", "6", "--timeout", "60"),
                             90)
            assert sorted(r["value"] for r in again) == sorted(want), \
                "DeleteGroups removed the state on both nodes: the group starts again from the earliest record"

            remote_only = _group_of(_placement(etcd1), 2, "remote-only")  # consumes node 1's partition only
            _consumed({on1: n1}, remote_only, coordinator=n2)
            _found_across_nodes(etcd1, n1, n2, remote_only, on1)
            listed, described = _admin(n1.kafka_port, ["list"], ["describe", remote_only, "no-such-group"])
            assert [g for g in listed if g["group"] == remote_only] == [
                {"group": remote_only, "type": "Share", "state": "Empty"}], \
                "the Java Admin, asking every node, lists it once: through its coordinator"
            assert described == [{"group": remote_only, "state": "Empty", "members": 0},
                                 {"item": "no-such-group", "error": "GroupIdNotFoundException"}]
            alter = {"group_id": remote_only, "topics": [{"topic_name": TOPIC, "partitions": [
                {"partition_index": on1, "start_offset": 1}]}]}
            altered = _request(n2.kafka_port, 91, 0, alter)
            assert (altered.error_code, [p.error_code for t in altered.responses for p in t.partitions]) == (
                ErrorCode.none, [ErrorCode.none]), "an empty group, though its coordinator keeps none of its state"
            assert _starts(n2.kafka_port, remote_only)[on1] == (ErrorCode.none, 1)
            _deleted_while_held(n1, n2, remote_only, _group_of(_placement(etcd1), 2, "new-consumers"))
            assert _starts(n2.kafka_port, remote_only)[on1] == (ErrorCode.none, -1)

            kept_on1 = _group_of(_placement(etcd1), 2, "kept-on-1")  # its state is node 1's only
            consumers = _group_of(_placement(etcd1), 2, "consumers")  # a consumer group of node 2's
            _consumed({on1: n1}, kept_on1, coordinator=n2)
            n1.proc.send_signal(signal.SIGKILL)  # node 1, which keeps partition on1's state
            n1.proc.wait(timeout=30)
            not_available = ErrorCode.coordinator_not_available  # retriable; GROUP_ID_NOT_FOUND is final to the Admin
            described = _request(n2.kafka_port, 77, 1, {"group_ids": [kept_on1], "include_authorized_operations": False})
            assert [(g.error_code, g.group_state) for g in described.groups] == [(not_available, "")], \
                "node 1, which may keep its state, did not answer"
            deleted = _request(n2.kafka_port, 42, 2, {"groups_names": [kept_on1]}).results
            assert [(r.group_id, r.error_code) for r in deleted] == [(kept_on1, not_available)], \
                "node 1, which keeps its state, did not answer whether it does"
            altered = _request(n2.kafka_port, 91, 0, {**alter, "group_id": kept_on1})
            assert (altered.error_code, list(altered.responses)) == (not_available, [])
            offsets_deleted = _request(n2.kafka_port, 92, 0, {"group_id": kept_on1, "topics": [{"topic_name": TOPIC}]})
            assert (offsets_deleted.error_code, list(offsets_deleted.responses)) == (not_available, [])
            committed = _request(n2.kafka_port, 8, 9, {"group_id": consumers, "generation_id_or_member_epoch": -1,
                                                       "topics": [{"name": TOPIC, "partitions": [
                                                           {"partition_index": 1 - on1, "committed_offset": 3}]}]})
            assert [p.error_code for t in committed.topics for p in t.partitions] == [ErrorCode.none]
            deleted = _request(n2.kafka_port, 42, 2, {"groups_names": [consumers, kept_on1]}).results
            assert sorted((r.group_id, r.error_code) for r in deleted) == sorted(
                [(consumers, ErrorCode.none), (kept_on1, not_available)]), \
                "a consumer group of node 2's is deleted without asking node 1, which is down"
            on2 = 1 - on1
            down = {on2: (ErrorCode.none, 3), on1: (ErrorCode.coordinator_not_available, -1)}
            assert _starts(n2.kafka_port, group) == down
            every = _request(n2.kafka_port, 90, 1, {"groups": [{"group_id": group, "topics": None}]}).groups
            assert {p.partition_index: (p.error_code, p.start_offset) for g in every for t in g.topics
                    for p in t.partitions} == down, "all its offsets: node 1's partition of a topic it consumed"
            deleted = _request(n2.kafka_port, 42, 2, {"groups_names": [group]}).results
            assert [(r.group_id, r.error_code) for r in deleted] == [(group, ErrorCode.coordinator_not_available)]
            assert _starts(n2.kafka_port, group) == down, "the group stays, its state on node 2 too"
            assert _admin(n2.kafka_port, ["alter", group, f"{tp[on2]}=2", f"{tp[on1]}=2"],
                          ["offsets", group, tp[on2]], ["delete-offsets", group, TOPIC],
                          ["offsets", group, tp[on2]]) == [
                [{"item": tp[on2]}, {"item": tp[on1], "error": "CoordinatorNotAvailableException"}],
                [{"tp": tp[on2], "start": 2, "lag": 1}],
                [{"item": TOPIC, "error": "CoordinatorNotAvailableException"}],
                [{"tp": tp[on2], "start": None, "lag": None}]]
            no_traceback(n2)
        assert "Traceback" not in n1.log()
