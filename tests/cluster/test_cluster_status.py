"""The pure core of ``walgate cluster status|nodes|partitions`` (:mod:`walgate.admin.cluster_status`): a cluster's
etcd values, made as the nodes write them, turned into what the commands print; and the command's answer when etcd
does not answer (exit 1, one line, no traceback) and bad flags (exit 2). The commands against a live cluster:
test_serve_cluster_status.py."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
from dataclasses import replace

from livewalgate import WALGATE, walgate_env
from walgate.admin.cluster_status import (
    Read,
    catalog_names,
    cluster_view,
    health,
    node_rows,
    partition_rows,
    status_lines,
)
from walgate.cluster.model import ControlPlaneError, Keys, NodeInfo, encode_record, encode_snapshot
from walgate.cluster.partition_codec import PartitionId, encode_state, partition_key
from walgate.cluster.registry import registration_value
from walgate.replication.partition import NO_LEADER, IsrMember, PartitionState

KEYS = Keys("walgate")


def _kv(key: bytes, value: bytes, create: int, mod: int | None = None) -> tuple[bytes, bytes, int, int]:
    return key, value, create, create if mod is None else mod


def _state(leader: int, isr: dict[int, int], min_isr: int = 2) -> bytes:
    return encode_state(PartitionState((1, 2, 3), leader, 4, 0, tuple(IsrMember(r, e) for r, e in sorted(isr.items())),
                                       (), min_isr))


def _read() -> Read:
    """Nodes 1 and 2 live (node 2 registered again after a lost lease: its broker epoch 12 carried in its value),
    node 3 down; node 2 the controller; database ``power`` (id aa) with a whole vgroup 0 and a vgroup 1 led by node 3
    (down: offline), the Kafka-native topic ``events`` (database ``kafka_events``, id bb) with node 2 led under its
    epoch and ISR (2), a state of an unnamed database (id cc) with no leader, and a damaged state."""
    nodes = [_kv(KEYS.node(1), registration_value(NodeInfo(1, "i1", ("PLAINTEXT://h1:9092",), "r1", "http://h1:6041"),
                                                  None), 10),
             _kv(KEYS.node(2), registration_value(NodeInfo(2, "i2", ("SASL_SSL://h2:9093",)), 12), 40)]
    incarnations = [_kv(KEYS.incarnation(n), b"i", 5) for n in (1, 2, 3)]
    candidates = [_kv(KEYS.candidate(0x22), b"2 12", 41), _kv(KEYS.candidate(0x11), b"1 10", 43)]
    partitions = [
        _kv(partition_key(KEYS, PartitionId("aa", 0)), _state(1, {1: 10, 2: 12, 3: 30}), 50, 60),
        _kv(partition_key(KEYS, PartitionId("aa", 1)), _state(3, {3: 30}), 50, 61),
        _kv(partition_key(KEYS, PartitionId("bb", 0)), _state(2, {2: 12}, min_isr=1), 50, 62),
        _kv(partition_key(KEYS, PartitionId("cc", 0)), _state(NO_LEADER, {}, min_isr=1), 50, 63),
        _kv(partition_key(KEYS, PartitionId("dd", 0)), b"{not json", 50, 64),
    ]
    snapshot = encode_snapshot(2, b"\n".join(json.dumps(r).encode() for r in (
        {"op": "create_user", "name": "u"}, {"op": "create_db", "name": "power", "id": "aa"})))
    records = [_kv(KEYS.record(3), encode_record(7, json.dumps({"op": "create_kafka_topic", "name": "events",
                                                                 "db": "kafka_events", "db_id": "bb"}).encode()), 70),
               _kv(KEYS.record(4), encode_record(7, b"not json"), 71)]
    return Read(nodes, incarnations, candidates, partitions, records, snapshot)


def test_a_cluster_read_from_etcd_is_shown_as_the_commands_print_it() -> None:
    view = cluster_view(KEYS, _read())
    assert view.controller == 2  # (the candidate of the smallest create_revision)
    assert node_rows(view) == [(1, "h1:9092", "http://h1:6041", "r1", "yes", 10, ""),
                               (2, "h2:9093", None, None, "yes", 12, "yes"),
                               (3, None, None, None, "no", None, "")]
    assert partition_rows(view) == [
        ("cc", 0, None, 4, "1,2,3", "-", "yes", "yes"),
        ("topic:events", 0, 2, 4, "1,2,3", "2", "yes", "no"),
        ("power", 0, 1, 4, "1,2,3", "1,2,3", "no", "no"),
        ("power", 1, 3, 4, "1,2,3", "3", "yes", "yes"),
    ]
    assert [r[:2] for r in partition_rows(view, under_replicated=True)] == [("cc", 0), ("topic:events", 0),
                                                                            ("power", 1)]
    assert len(view.damaged) == 1 and "{not json" in view.damaged[0]
    report = health(view)
    assert (report["healthy"], report["controller"], report["nodes"], report["nodes_down"], report["partitions"]) == (
        False, 2, [1, 2, 3], [3], 4)
    assert report["offline_partitions"] == ["cc/0", "power/1"]
    assert report["under_replicated_partitions"] == ["cc/0", "events/0", "power/1"]
    assert report["under_min_isr_partitions"] == ["cc/0", "power/1"]
    lines = status_lines(report)
    assert lines[:3] == ["CLUSTER:                      walgate", "HEALTHY:                      False",
                         "CONTROLLER:                   2"]
    assert "NODES DOWN:                   3" in lines and "OFFLINE PARTITIONS:           cc/0, power/1" in lines


def test_a_whole_cluster_is_healthy() -> None:
    read = _read()
    read.partitions[:] = read.partitions[:1]
    read.nodes.append(_kv(KEYS.node(3), registration_value(NodeInfo(3, "i3", ()), None), 30))
    report = health(cluster_view(KEYS, read))
    assert (report["healthy"], report["nodes_down"], report["offline_partitions"], report["damaged"]) == (
        True, [], [], [])


def test_the_names_come_from_the_snapshot_and_the_records_after_it() -> None:
    read = _read()
    assert catalog_names(read.snapshot, [v for _, v, _, _ in read.records]) == {
        "aa": ("power", None), "bb": ("kafka_events", "events")}
    assert catalog_names(None, []) == {}


def test_etcd_not_answering_is_exit_1_and_bad_flags_exit_2_each_one_line() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        done = subprocess.run([*WALGATE, "cluster", "status", "--cluster", f"etcd=http://127.0.0.1:{port}",
                               "--timeout", "0.5"], capture_output=True, text=True, timeout=60, env=walgate_env())
    assert done.returncode == 1 and done.stdout == ""
    assert "walgate: cannot read the cluster from etcd" in done.stderr and "Traceback" not in done.stderr
    usage = subprocess.run([*WALGATE, "cluster", "nodes"], capture_output=True, text=True, timeout=60,
                           env=walgate_env())
    assert usage.returncode == 2 and "--cluster" in usage.stderr
    env = {k: v for k, v in walgate_env().items() if k != "WALGATE_CLUSTER_ETCD_PASSWORD"}
    no_password = subprocess.run([*WALGATE, "cluster", "status", "--cluster", "etcd=http://127.0.0.1:1",
                                  "--cluster-etcd-user", "root"], capture_output=True, text=True, timeout=60, env=env)
    assert no_password.returncode == 2 and no_password.stderr.count("\n") == 1 and "go together" in no_password.stderr


FUZZ_CASES = int(os.environ.get("WALGATE_FUZZ_CLUSTER_STATUS", "300"))


def test_damaged_values_in_etcd_are_named_or_refused_never_a_crash() -> None:
    """Any value of any key the commands read, replaced by bytes that are not walgate's (seeded: a random value, a
    cut or a flipped byte of the real one, JSON of another shape): the view is made (a damaged state or record
    named in ``damaged``) or refused with :class:`ControlPlaneError` (a registration or a candidate, which the
    command answers with exit 1), never another exception. ``WALGATE_FUZZ_CLUSTER_STATUS`` cases (300)."""
    rng = random.Random(2611)
    shapes = [b"", b"null", b"[]", b"{}", b'{"op": "create_db", "id": 7}', b'{"node_id": "x"}', b"1 2 3", b"\xff\xfe"]
    base = _read()
    fields = ["nodes", "incarnations", "candidates", "partitions", "records"]
    for _ in range(FUZZ_CASES):
        field = rng.choice([*fields, "snapshot"])
        if field == "snapshot":
            value = base.snapshot or b""
        else:
            kvs = list(getattr(base, field))
            i = rng.randrange(len(kvs))
            value = kvs[i][1]
        kind = rng.randrange(4)
        if kind == 0:
            value = rng.randbytes(rng.randrange(40))
        elif kind == 1:
            value = value[:rng.randrange(len(value) + 1)]
        elif kind == 2 and value:
            j = rng.randrange(len(value))
            value = value[:j] + bytes([value[j] ^ (1 << rng.randrange(8))]) + value[j + 1:]
        else:
            value = rng.choice(shapes)
        if field == "snapshot":
            read = replace(base, snapshot=value)
        else:
            kvs[i] = (kvs[i][0], value, kvs[i][2], kvs[i][3])
            read = replace(base, **{field: kvs})
        try:
            view = cluster_view(KEYS, read)
        except ControlPlaneError:
            continue
        health(view)
        node_rows(view)
        partition_rows(view)
