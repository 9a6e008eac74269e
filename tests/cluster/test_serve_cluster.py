"""``walgate serve --cluster etcd=...``: real ``walgate serve`` processes over a real etcd (stopped by PID).

Membership as clients and operators see it: the Java Admin's describeCluster (Kafka's DescribeCluster API) and
``SHOW DNODES`` list every live node and the controller; kill -9 of the controller elects another; a clean stop
deregisters; a refused registration (an emptied data dir, an id another live node has) and an unreachable etcd stop
the start with a clear message and exit code 1, never a traceback. Without ``--cluster`` a node is the whole
cluster, as before.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from etcd_cluster import EtcdCluster, free_port
from serve_support import (
    WAIT_S,
    cluster_args,
    describe_cluster,
    eventually,
    no_traceback,
    node,
    readyz,
    registered_nodes,
    sql,
    two_nodes,
    wait_log,
)

from livewalgate import WALGATE, running_walgate, stop_process, walgate_env


def test_nodes_and_controller_are_listed_and_kill_9_of_the_controller_elects_another(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path) as (n1, n2, e1, e2):
        both = [[1, e1, "ready", "controller"], [2, e2, "ready", ""]]
        for server in (n1, n2):
            eventually("SHOW DNODES lists both nodes", lambda s=server: sql(s, "SHOW DNODES") == both)
        described = [describe_cluster(n1), describe_cluster(n2)]
        assert described[0] == described[1], "one cluster id, one membership on every node"
        assert described[0]["controller"] == 1
        assert described[0]["nodes"] == [[1, "127.0.0.1", n1.kafka_port], [2, "127.0.0.1", n2.kafka_port]]
        assert readyz(n2)["checks"]["cluster"] == "ok"
        sql(n2, "CREATE DATABASE placed VGROUPS 2")  # the cluster's: its vgroups are placed over both nodes
        assert sql(n2, "SHOW placed.VGROUPS") == [[0, "placed", None, 1, "leader"], [1, "placed", 0, 2, "leader"]]

        n1.proc.send_signal(signal.SIGKILL)
        n1.proc.wait(timeout=30)
        after = [[1, "", "offline", ""], [2, e2, "ready", "controller"]]
        eventually("node 2 is the controller, node 1 offline", lambda: sql(n2, "SHOW DNODES") == after)
        again = describe_cluster(n2)
        assert again["controller"] == 2 and again["nodes"] == [[2, "127.0.0.1", n2.kafka_port]]
        assert again["cluster_id"] == described[0]["cluster_id"]

        assert stop_process(n2.proc) == 0
        assert registered_nodes(etcd1) == [], "a clean stop deregisters at once"
        assert "node 2 left cluster walgate" in n2.log()
        closed = [line for line in n2.log().splitlines() if "lost: closed" in line]
        assert closed and not any("WARNING" in line for line in closed), "a clean stop is no warning"
        no_traceback(n2)


def serve_fails(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``walgate serve`` that must stop by itself (within 60 s)."""
    data_dir = tmp_path / "data"
    return subprocess.run([*WALGATE, "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--http-port", "0",
                           "--kafka-port", "0", *args], capture_output=True, text=True, timeout=WAIT_S,
                          env=walgate_env())


def test_a_refused_registration_stops_the_start_with_a_clear_message(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with node(etcd1, tmp_path, 1) as n1:
        wait_log(n1, "walgate ready")
        twin = serve_fails(tmp_path / "twin", *cluster_args(etcd1, 1))
        assert twin.returncode == 1, twin.stderr
        assert "is not the one node 1 registered with" in twin.stderr, "another data dir claiming a live node's id"
        assert "Traceback" not in twin.stderr
        data_dir = n1.data_dir
    shutil.rmtree(data_dir)  # an emptied disk: node 1's data is gone, it must not come back as node 1
    data_dir.mkdir()
    emptied = subprocess.run([*WALGATE, "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
                              "--http-port", "0", "--kafka-port", "0", *cluster_args(etcd1, 1)],
                             capture_output=True, text=True, timeout=WAIT_S, env=walgate_env())
    assert emptied.returncode == 1, emptied.stderr
    assert "is not the one node 1 registered with" in emptied.stderr and "new node id" in emptied.stderr
    assert "Traceback" not in emptied.stderr
    with node(etcd1, tmp_path, 3, data_dir=data_dir) as n3:  # as a new node id it joins
        eventually("node 3 is a member", lambda: [r[:3] for r in sql(n3, "SHOW DNODES")]
                   == [[1, "", "offline"], [3, f"127.0.0.1:{n3.kafka_port}", "ready"]])


def test_an_unreachable_etcd_stops_the_start(tmp_path: Path) -> None:
    run = serve_fails(tmp_path, "--cluster", f"etcd=http://127.0.0.1:{free_port()}", "--node-id", "1")
    assert run.returncode == 1, run.stderr
    assert "cannot reach the cluster's etcd" in run.stderr and "no member reachable" in run.stderr
    assert "Traceback" not in run.stderr
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["walgate.lock"], "nothing made before etcd answered"


@pytest.mark.parametrize("args, message", [
    (["--cluster", "zookeeper=127.0.0.1:2181"], "expected etcd=http://host:port"),
    (["--cluster", "etcd=http://127.0.0.1:notaport"], "expected host:port"),
    (["--override", "cluster.name=no/slash"], "cluster_name"),
    (["--override", "broker.session.timeout.ms=500"], "broker_session_timeout_ms must be >= 2000"),
    (["--cluster", "etcd=http://127.0.0.1:2379", "--node-id", "1024"], "node_id must be below 1024 in a cluster"),
    (["--config", "server.properties"], "cluster_etcd_endpoints: etcd endpoint '127.0.0.1:x'"),
])
def test_bad_cluster_settings_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "server.properties").write_text("node.id=1\ncluster.etcd.endpoints=http://127.0.0.1:x\n")
    args = [str(tmp_path / a) if a == "server.properties" else a for a in args]
    run = serve_fails(tmp_path, *args)
    assert run.returncode == 2, run.stderr
    assert message in run.stderr and "Traceback" not in run.stderr


def test_a_single_node_is_its_own_dnode_and_needs_no_etcd(tmp_path: Path) -> None:
    with running_walgate(tmp_path, "--node-id", "7") as server:
        assert sql(server, "SHOW DNODES") == [[7, f"127.0.0.1:{server.kafka_port}", "ready", ""]]
        sql(server, "CREATE DATABASE d VGROUPS 1")
        assert sql(server, "SHOW d.VGROUPS") == [[0, "d", 0, 7, "leader"]]
        assert "cluster" not in readyz(server)["checks"]
        assert not (server.data_dir / "node.incarnation").exists()
        described = describe_cluster(server)
        assert described["controller"] == 7 and described["nodes"] == [[7, "127.0.0.1", server.kafka_port]]


def test_a_paused_node_loses_its_registration_and_registers_again_when_resumed(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with two_nodes(etcd1, tmp_path) as (n1, n2, e1, e2):
        n1.proc.send_signal(signal.SIGSTOP)  # longer than its lease: etcd lets node 1 go
        try:
            paused = [[1, "", "offline", ""], [2, e2, "ready", "controller"]]
            eventually("node 2 is the controller", lambda: sql(n2, "SHOW DNODES") == paused)
        finally:
            n1.proc.send_signal(signal.SIGCONT)
        back = [[1, e1, "ready", ""], [2, e2, "ready", "controller"]]
        for server in (n1, n2):
            eventually("node 1 registered again", lambda s=server: sql(s, "SHOW DNODES") == back)
        eventually("node 1 ready again", lambda: readyz(n1)["checks"]["cluster"] == "ok")
        assert "node 1: registration (broker epoch" in n1.log() and "lost" in n1.log()
        no_traceback(n1)
