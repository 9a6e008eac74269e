"""Failover with real processes over a real etcd: kill -9 of the controller's process, and a controller paused
(SIGSTOP) until another was elected, then resumed (SIGCONT): its writes are refused (KAFKA-6082's zombie)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from etcd_cluster import EtcdCluster
from event_process import EventProcess, first_event

from walgate.cluster.model import decode_record

CLUSTER = "proc"


class Helper(EventProcess):
    """node_helper.py as node ``node_id``."""

    def __init__(self, etcd: EtcdCluster, node_id: int, data_dir: Path, ttl: int = 2) -> None:
        self.node_id = node_id
        super().__init__(f"node {node_id}", "node_helper.py",
                         [etcd.spec, CLUSTER, str(node_id), str(data_dir), str(ttl)], data_dir.with_suffix(".log"))


@contextmanager
def helpers(etcd: EtcdCluster, tmp_path: Path, ids: list[int]) -> Iterator[list[Helper]]:
    made: list[Helper] = []
    try:
        for i in ids:
            made.append(Helper(etcd, i, tmp_path / f"node{i}"))
        yield made
    finally:
        for h in made:
            h.stop()


def first_controller(nodes: list[Helper]) -> tuple[Helper, int]:
    node, event = first_event(nodes, lambda e: e["event"] == "controller", "controller elected")
    assert isinstance(node, Helper)
    return node, int(event["epoch"])


async def stream(etcd: EtcdCluster) -> list[tuple[int, int]]:
    """(seq, controller epoch) of every record in etcd, in sequence order."""
    from walgate.cluster.etcd import EtcdSession
    from walgate.cluster.model import Keys

    keys = Keys(CLUSTER)
    session = EtcdSession(etcd.endpoints)
    try:
        _, kvs = await session.get_prefix(keys.records)
        return [(keys.record_seq(kv.key), decode_record(kv.value)[0]) for kv in kvs]
    finally:
        await session.close()


async def test_kill_9_of_the_controller_elects_another(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with helpers(etcd1, tmp_path, [1, 2, 3]) as nodes:
        old, old_epoch = first_controller(nodes)
        old.wait(lambda e: e["event"] == "appended", "append")
        old.signal(signal.SIGKILL)
        old.stop()
        others = [h for h in nodes if h is not old]
        new, new_epoch = first_controller(others)
        assert new_epoch > old_epoch
        appended = new.wait(lambda e: e["event"] == "appended", "append by the new controller")
        assert appended["epoch"] == new_epoch
        records = await stream(etcd1)
        epochs = [e for _, e in records]
        assert epochs == sorted(epochs) and {old_epoch, new_epoch} <= set(epochs)
        assert [s for s, _ in records] == list(range(1, len(records) + 1))


async def test_a_paused_controller_s_writes_are_refused_after_resume(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with helpers(etcd1, tmp_path, [1, 2]) as nodes:
        old, old_epoch = first_controller(nodes)
        old.wait(lambda e: e["event"] == "appended", "append")
        old.signal(signal.SIGSTOP)
        [new] = [h for h in nodes if h is not old]
        new_epoch = int(new.wait(lambda e: e["event"] == "controller", "election of the other node")["epoch"])
        new.wait(lambda e: e["event"] == "appended" and e["epoch"] == new_epoch, "append by the new controller")
        old.signal(signal.SIGCONT)
        # the old controller finds out, through the fence or its lease, and stops writing as epoch old_epoch
        old.wait(lambda e: e["event"] in ("refused", "stepped_down") and e["epoch"] == old_epoch, "step-down")
        new.wait(lambda e: e["event"] == "appended", "an append after the resume")
        old.drain()
        records = await stream(etcd1)
        first_new = min(s for s, e in records if e == new_epoch)
        assert all(s < first_new for s, e in records if e == old_epoch), records
        epochs = [e for _, e in records]
        assert epochs == sorted(epochs)
