"""A replica move survives the kill -9 of the controller and of the moving replicas (KIP-455, issue 26): three real
``walgate serve --cluster`` nodes with ``replication.enable=true`` over a real etcd (stopped by PID), an idempotent
acks=all confluent-kafka producer and a read_committed consumer throughout (the history checker's).

Partition 0 of a topic of replication factor 3 (``min.insync.replicas=2``) is moved off node 3 (completed at once:
the target in sync) and written to further, so node 3's copy falls behind. Node 3 paused, the move back to 3, 1, 2 is
written (listed as adding 3); then node 3, an adding replica that has not caught up, and the controller are killed
-9 (one kill when node 3 is the controller) and started again on their data dirs. The move is the controller's state
in etcd, not a process's: the controller elected next completes it once node 3 caught up, with nothing listed as
moving after. The same with the source killed: a move adding paused node 3 and removing node 1, node 1 and the
controller killed -9 while it waits. No acknowledged write is lost or duplicated, every node serves each partition
whole and in order, no send was given up, no node logged a traceback, and every replica's WAL and offset index are the
others' (tests/cluster/replica_copies.py)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from history import Op
from serve_support import create_topics, eventually, no_traceback, node
from test_serve_cluster_reassignments import call, states
from test_serve_cluster_replicated_topics import (
    ARGS,
    KT_CONFIGS,
    PARTITIONS,
    TOPIC,
    Reader,
    Writer,
    bootstrap,
    checked,
    described,
    identical_replicas,
    three_nodes,
)
from test_serve_cluster_sql import catalog_records

from livewalgate import WalgateServer
from walgate.wire.errors import ErrorCode


def move(port: int, replicas: list[int]) -> int:
    """Partition 0 of :data:`TOPIC` moved to ``replicas`` through the node at ``port``: its error code, asked again
    while it is INVALID_REPLICA_ASSIGNMENT or REQUEST_TIMED_OUT (on a loaded machine a node's 2 s lease may lapse and
    be made again with no fault injected, so that for a moment a target is not a live node, as
    serve_support.create_topics says)."""
    codes: list[int] = []

    def answered() -> bool:
        answer = call(port, 45, 1, {"timeout": 30_000, "allow_replication_factor_change": True, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
        assert answer.error_code == ErrorCode.none
        codes.append(int(answer.responses[0].partitions[0].error_code))
        return codes[-1] not in (ErrorCode.invalid_replica_assignment, ErrorCode.request_timed_out)

    eventually(f"partition 0 moved to {replicas}", answered)
    return codes[-1]


def controller(nodes: list[WalgateServer]) -> int:
    """The id of the node that logged the newest controller election ("node N: controller, epoch E")."""
    won = [(int(m[2]), int(m[1])) for s in nodes for m in re.finditer(r"node (\d+): controller, epoch (\d+)", s.log())]
    return max(won)[1]


def killed_and_started_again(stack: ExitStack, etcd: EtcdCluster, tmp_path: Path, nodes: list[WalgateServer],
                             dead: set[int], *args: str) -> None:
    """Nodes ``dead`` (ids) of ``nodes`` killed -9 (each checked for a traceback), then started again on their data
    dirs and Kafka ports with :data:`ARGS` and ``args``, in place in ``nodes``, stopped when ``stack`` closes."""
    for n in sorted(dead):
        nodes[n - 1].proc.kill()
        nodes[n - 1].proc.wait(timeout=30)
        no_traceback(nodes[n - 1])
    for n in sorted(dead):
        before = nodes[n - 1]
        nodes[n - 1] = stack.enter_context(node(etcd, tmp_path / f"again{n}", n, *ARGS, *args,
                                                data_dir=before.data_dir, kafka_port=before.kafka_port))


def topic_in_sync(stack: ExitStack, etcd: EtcdCluster, tmp_path: Path) -> list[WalgateServer]:
    """Three nodes (stopped when ``stack`` closes) and :data:`TOPIC` of replication factor 3, every replica in sync."""
    nodes = three_nodes(stack, etcd, tmp_path)
    create_topics(bootstrap(nodes), NewTopic(TOPIC, PARTITIONS, 3, config=KT_CONFIGS))
    eventually("three in sync", lambda: all(isr == [1, 2, 3] for _, _, isr in described(nodes[0], TOPIC).values()))
    return nodes


def moved_off_node_3(nodes: list[WalgateServer], writer: Writer) -> None:
    """Once ``writer`` wrote some values, partition 0 moved to nodes 1 and 2 (completed at once: both in sync), then
    100 more values acknowledged there: node 3's copy, deleted, would start behind."""
    eventually("values acknowledged", lambda: writer.acked() > 20)
    assert move(nodes[1].kafka_port, [1, 2]) == ErrorCode.none
    eventually("partition 0 on nodes 1 and 2", lambda: described(nodes[0], TOPIC)[0][1:] == ([1, 2], [1, 2]))
    acked = writer.acked()
    eventually("more values on nodes 1 and 2", lambda: writer.acked() > acked + 100)


def test_a_move_survives_the_kill_9_of_the_controller_and_of_its_adding_replica(etcd1: EtcdCluster,
                                                                               tmp_path: Path) -> None:
    """The move back to 3, 1, 2 (adding paused node 3): node 3 and the controller killed -9 while it waits."""
    moved_under_kills(etcd1, tmp_path, [3, 1, 2], ([3], []), lambda nodes: {3, controller(nodes)}, [1, 2, 3])


def test_a_move_survives_the_kill_9_of_its_source_replica_and_of_the_controller(etcd1: EtcdCluster,
                                                                                tmp_path: Path) -> None:
    """The move to 3, 2 (adding paused node 3, removing node 1: the source, its preferred leader): node 1 and the
    controller killed -9 while it waits; node 1 deletes its copy once the move completed."""
    moved_under_kills(etcd1, tmp_path, [3, 2], ([3], [1]), lambda nodes: {1, controller(nodes)} - {3}, [2, 3])


def moved_under_kills(etcd: EtcdCluster, tmp_path: Path, target: list[int], moving: tuple[list[int], list[int]],
                      dead: Callable[[list[WalgateServer]], set[int]], isr: list[int]) -> None:
    """Partition 0 moved off node 3 under load (:func:`moved_off_node_3`), node 3 paused, the move to ``target``
    written and listed as ``moving`` (adding, removing); the nodes ``dead(nodes)`` killed -9 and started again, node
    3 resumed; the move completes (``target`` led with ``isr`` in sync, nothing listed), a replica it removed deletes
    its copy, the history checks, every replica is identical."""
    history: list[Op] = []
    with ExitStack() as stack:
        nodes = topic_in_sync(stack, etcd, tmp_path)
        reader, writer = Reader(bootstrap(nodes), history), Writer(bootstrap(nodes), history)
        reader.start()
        writer.start()
        try:
            moved_off_node_3(nodes, writer)
            os.kill(nodes[2].proc.pid, signal.SIGSTOP)  # (registered for its session: the target is valid)
            stack.callback(lambda: nodes[2].proc.poll() is None and os.kill(nodes[2].proc.pid, signal.SIGCONT))
            assert move(nodes[1].kafka_port, target) == ErrorCode.none
            eventually("the move listed", lambda: states(nodes[1].kafka_port).get(0, ([], [], []))[1:] == moving)
            killed_and_started_again(stack, etcd, tmp_path, nodes, dead(nodes))
            if nodes[2].proc.poll() is None:  # (not killed and started again)
                os.kill(nodes[2].proc.pid, signal.SIGCONT)
            eventually("the move completed", lambda: described(nodes[0], TOPIC)[0][1:] == (target, isr)
                       and states(nodes[1].kafka_port) == {})
            acked = writer.acked()
            eventually("values acknowledged after the move", lambda: writer.acked() > acked + 20)
        finally:
            writer.stop()
            reader.stop(writer.acked())
        checked(history, writer, nodes)
        database_id = next(r["db_id"] for r in catalog_records(nodes[0])
                           if r.get("op") == "create_kafka_topic" and r["name"] == TOPIC)
        for n in sorted(set(range(1, 4)) - set(target)):
            eventually(f"node {n}'s copy of partition 0 deleted",
                       lambda n=n: not (nodes[n - 1].data_dir / "db" / database_id / "vnode0").exists())
        for server in nodes:
            no_traceback(server)
        identical_replicas(stack, dict(enumerate(nodes, 1)), tmp_path / "replicas")
