"""Failover with real processes over a real etcd: kill -9 of the controller's process, and a controller paused
(SIGSTOP) until another was elected, then resumed (SIGCONT): its writes are refused (KAFKA-6082's zombie)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from etcd_cluster import EtcdCluster

from walgate.cluster.model import decode_record

HELPER = Path(__file__).with_name("node_helper.py")
WAIT_S = 60.0
CLUSTER = "proc"


class Helper:
    def __init__(self, etcd: EtcdCluster, node_id: int, data_dir: Path, ttl: int = 2) -> None:
        self.node_id = node_id
        self.stderr_path = data_dir.with_suffix(".log")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(HELPER), etcd.spec, CLUSTER, str(node_id), str(data_dir), str(ttl)],
                stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def wait(self, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first event from now on that ``pred`` accepts (the test fails after WAIT_S)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"node {self.node_id}: no {what} within {WAIT_S:g} s; its log:\n"
                            + self.stderr_path.read_text(errors="replace")[-3000:])
            self.seen.append(event)
            if pred(event):
                return event

    def drain(self) -> None:
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                return

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@contextmanager
def helpers(etcd: EtcdCluster, tmp_path: Path, ids: list[int]) -> Iterator[list[Helper]]:
    made: list[Helper] = []
    try:
        for i in ids:
            made.append(Helper(etcd, i, tmp_path / f"node{i}"))
        yield made
    finally:
        for h in made:
            h.signal(signal.SIGCONT) if h.proc.poll() is None else None
            h.stop()


def first_controller(nodes: list[Helper]) -> tuple[Helper, int]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for h in nodes:
            try:
                event = h.events.get(timeout=0.05)
            except queue.Empty:
                continue
            h.seen.append(event)
            if event["event"] == "controller":
                return h, int(event["epoch"])
    pytest.fail("no controller elected")


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
