"""Seeing a replicated cluster (issue 26): ``walgate cluster status|nodes|partitions`` against the etcd of three
real ``walgate serve --cluster`` nodes (stopped by PID) holding a ``REPLICA 3`` database, and the nodes' own
``/metrics`` and ``/readyz``.

What holds: with every node up, ``status`` says healthy (controller node 1, no node down, nothing offline or
under-replicated), ``nodes`` lists each node live at its Kafka address with its broker epoch and node 1 as
controller, ``partitions`` each vgroup of ``r`` with its leader, leader epoch, replicas and ISR (1, 2, 3), the table
form naming them too; the nodes' metrics count both vgroups led once in all, each node a replica of both, one active
controller, nothing under-replicated or offline, and every ``/readyz`` says ``replicas: ok``. Node 3 stopped: the
controller takes it out of the ISRs, ``status`` is unhealthy naming node 3 down and both vgroups under-replicated,
``partitions --under-replicated`` lists both with ISR (1, 2), ``nodes`` shows node 3 not live, and the leaders'
metrics count both vgroups under-replicated.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from etcd_cluster import EtcdCluster
from prometheus_client.parser import text_string_to_metric_families
from serve_support import all_ready, eventually, no_traceback, node, readyz, sql, wait_log

from livewalgate import WALGATE, WalgateServer, walgate_env
from walgate.admin.cluster_status import ClusterView, cluster_view, health, read_cluster
from walgate.cluster.model import Keys

ENABLED = ("--override", "replication.enable=true", "--override", "replica.lag.time.max.ms=2000")
CLI_TIMEOUT_S = 60.0


def cluster(etcd: EtcdCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``walgate cluster <args> --cluster etcd=...`` run to completion (bounded)."""
    return subprocess.run([*WALGATE, "cluster", *args, "--cluster", f"etcd={etcd.spec}"], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, env=walgate_env())


def shown(etcd: EtcdCluster, *args: str) -> Any:
    """The JSON document of ``walgate cluster <args> --json``, which must exit 0."""
    done = cluster(etcd, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def view(etcd: EtcdCluster) -> ClusterView:
    """The cluster as the commands read it, in this process (what needs no process of its own: the runner's output is
    checked by the ``walgate cluster`` runs, each a process)."""
    keys = Keys("walgate")
    return cluster_view(keys, asyncio.run(read_cluster(etcd.spec, keys, None, CLI_TIMEOUT_S)))


def metric(server: WalgateServer, name: str) -> float:
    """The value of the unlabelled sample ``name`` on ``server``'s ``/metrics``."""
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return next(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


RM = "kafka_server_replicamanager_"


def test_a_replicated_cluster_seen_through_its_etcd_its_metrics_and_readyz(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1, *ENABLED) as n1:
        wait_log(n1, "node 1: controller")
        with node(etcd1, tmp_path, 2, *ENABLED) as n2:
            with node(etcd1, tmp_path, 3, *ENABLED) as n3:
                nodes = [n1, n2, n3]
                all_ready(nodes)
                sql(n1, "CREATE DATABASE r VGROUPS 2 REPLICA 3")

                def whole() -> bool:
                    parts = view(etcd1).partitions
                    return len(parts) == 2 and all(p.isr == (1, 2, 3) and p.leader for p in parts)
                eventually("both vgroups led, their ISR whole", whole)
                assert [(p.database, p.topic, p.vgroup, sorted(p.replicas), p.under_replicated, p.offline,
                         p.leader == p.replicas[0]) for p in view(etcd1).partitions] == [
                    ("r", None, v, [1, 2, 3], False, False, True) for v in (0, 1)]  # (the first replica leads)
                status = shown(etcd1, "status")
                assert (status["healthy"], status["controller"], status["nodes"], status["nodes_down"],
                        status["partitions"], status["under_replicated_partitions"]) == (True, 1, [1, 2, 3], [], 2, [])
                listed = shown(etcd1, "nodes")
                assert [(n["node_id"], n["live"], n["address"], n["controller"]) for n in listed] == [
                    (i + 1, True, f"127.0.0.1:{s.kafka_port}", i == 0) for i, s in enumerate(nodes)]
                assert all(isinstance(n["broker_epoch"], int) for n in listed)
                table = cluster(etcd1, "partitions")
                assert table.returncode == 0 and "DATABASE/TOPIC" in table.stdout and " r " in table.stdout

                eventually("both vgroups led once in all", lambda: sum(metric(s, RM + "leadercount") for s in nodes) == 2)
                assert [metric(s, RM + "partitioncount") for s in nodes] == [2, 2, 2]
                assert [metric(s, "kafka_controller_kafkacontroller_activecontrollercount") for s in nodes] == [1, 0, 0]
                assert metric(n1, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
                assert sum(metric(s, RM + "underreplicatedpartitions") for s in nodes) == 0
                eventually("every node ready, caught up", lambda: all(
                    readyz(s)["checks"].get("replicas") == "ok" for s in nodes))

            def under() -> bool:
                return sum(p.under_replicated for p in view(etcd1).partitions) == 2
            eventually("node 3 out of both ISRs", under)
            assert [p["isr"] for p in shown(etcd1, "partitions", "--under-replicated")] == [[1, 2], [1, 2]]
            status = health(view(etcd1))
            assert (status["healthy"], status["nodes_down"], status["under_replicated_partitions"]) == (
                False, [3], ["r/0", "r/1"])
            assert [n.live for n in view(etcd1).nodes] == [True, True, False]
            eventually("the leaders count both vgroups under-replicated", lambda: sum(
                metric(s, RM + "underreplicatedpartitions") for s in (n1, n2)) == 2)
            for server in (n1, n2):
                no_traceback(server)
