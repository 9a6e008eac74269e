"""Clock skew on walgate's side (Debian ``faketime``, which reaches the node processes, not etcd's Go runtime):
leases are etcd's clock, not the node's.

- nodes whose clocks are an hour ahead and an hour behind register, keep their registrations and the controller's
  appends go on as with true clocks; the controller killed, the other is elected and fences it;
- a node whose clock runs twice as fast keeps its registration; a controller whose clock runs at a fifth of the
  real rate refreshes its lease too late (each keep-alive every TTL/3 of its time is 5/3 TTL of etcd's), so etcd
  lets the lease go: the other node is elected, every write of the slow one under its old epoch is refused, and it
  registers again on new leases, under its broker epoch (the same process: KIP-903).
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from etcd_cluster import EtcdCluster
from event_process import EventProcess
from test_network_partitions import check_stream, is_
from test_processes import CLUSTER

from walgate.cluster.etcd import EtcdSession
from walgate.cluster.model import Keys
from walgate.cluster.registry import broker_epoch

TTL = 2


def libfaketime() -> str:
    """Debian's libfaketimeMT (the thread-safe one: grpc has threads), preloaded into the node process itself: the
    ``faketime`` wrapper would fork, and a SIGKILL of the wrapper leaves the node running."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    if not found:
        pytest.fail("the clock skew tests run walgate nodes under Debian's faketime: `apt-get install faketime`")
    return found[0]


@contextmanager
def preloaded_faketime() -> Iterator[str]:
    """:func:`libfaketime`; on exit, the shared memory and semaphore that the library made in ``/dev/shm`` for each
    process it was preloaded into (named by the process's PID) removed where that process is gone: an exit removes
    its own, a SIGKILL leaves them (a live process's, another test's, are kept)."""
    try:
        yield libfaketime()
    finally:
        for path in glob.glob("/dev/shm/faketime_shm_*") + glob.glob("/dev/shm/sem.faketime_sem_*"):
            pid = path.rpartition("_")[2]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


@contextmanager
def skewed_nodes(etcd: EtcdCluster, tmp_path: Path) -> Iterator[Any]:
    """``start(node_id, faketime_spec)``: node_helper.py with its clocks (wall and monotonic: what asyncio and grpc
    time with) faked as ``FAKETIME=SPEC`` says."""
    with ExitStack() as stack:
        library = stack.enter_context(preloaded_faketime())

        def start(node_id: int, spec: str) -> EventProcess:
            data_dir = tmp_path / f"node{node_id}"
            env = {"LD_PRELOAD": library, "FAKETIME": spec}
            proc = EventProcess(f"node {node_id} ({spec})", "node_helper.py",
                                [etcd.spec, CLUSTER, str(node_id), str(data_dir), str(TTL)],
                                data_dir.with_suffix(".log"), env=env)
            stack.callback(proc.stop)
            return proc

        yield start


def skew_of(spec: str) -> float:
    """How far ahead (seconds) a process under ``FAKETIME=SPEC`` finds the time: the preload really applies."""
    env = {**os.environ, "LD_PRELOAD": libfaketime(), "FAKETIME": spec}
    out = subprocess.run([sys.executable, "-c", "import time; print(time.time())"], env=env, capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return float(out) - time.time()


async def registered_epoch(etcd: EtcdCluster, node_id: int) -> int | None:
    """The broker epoch of ``nodes/<id>`` in etcd (the node's live registration), None when not registered."""
    session = EtcdSession(etcd.endpoints)
    try:
        kv = await session.get(Keys(CLUSTER).node(node_id))
        return None if kv is None else broker_epoch(kv.value, kv.create_revision)
    finally:
        await session.close()


def registrations(proc: EventProcess) -> list[int]:
    return [e["epoch"] for e in proc.drain() if e["event"] == "registered"]


async def test_clocks_an_hour_ahead_and_behind_keep_their_registrations(etcd1: EtcdCluster, tmp_path: Path) -> None:
    assert 3500 < skew_of("+1h") < 3700 and -3700 < skew_of("-1h") < -3500
    with skewed_nodes(etcd1, tmp_path) as start:
        ahead = start(1, "+1h")
        ctl_epoch = ahead.wait(is_("controller"), "the first node's election")["epoch"]
        behind = start(2, "-1h")
        behind.wait(is_("registered"), "the second node's registration")
        first = ahead.wait(is_("appended", epoch=ctl_epoch), "an append")["seq"]
        # 40 appends at one every 0.1 s: several lease TTLs of etcd's clock
        ahead.wait(lambda e: e["event"] == "appended" and e["seq"] >= first + 40, "40 appends")
        assert len(registrations(ahead)) == 1 and len(registrations(behind)) == 1, "a registration was lost"
        assert await registered_epoch(etcd1, 1) == registrations(ahead)[0]
        assert await registered_epoch(etcd1, 2) == registrations(behind)[0]
        ahead.signal(signal.SIGKILL)
        ahead.stop()
        new_epoch = behind.wait(is_("controller"), "the node an hour behind elected")["epoch"]
        behind.wait(is_("appended", epoch=new_epoch), "its append")
        await check_stream(etcd1, [(ctl_epoch, new_epoch)])


async def test_a_slow_clock_loses_its_lease_and_is_fenced_a_fast_one_keeps_it(etcd1: EtcdCluster,
                                                                               tmp_path: Path) -> None:
    with skewed_nodes(etcd1, tmp_path) as start:
        slow = start(1, "+0 x0.2")
        slow_epoch = slow.wait(is_("controller"), "the slow node's election")["epoch"]
        slow_registration = [e for e in slow.drain() if e["event"] == "registered"][0]
        fast = start(2, "+0 x2")
        fast_epoch = fast.wait(is_("controller"), "the fast node's election")["epoch"]
        assert fast_epoch > slow_epoch
        slow.wait(lambda e: e["event"] in ("refused", "stepped_down") and e["epoch"] == slow_epoch,
                  "the slow controller stepping down")
        again = slow.reported(lambda e: e["event"] == "registered" and e["lease"] != slow_registration["lease"],
                              "its new registration")
        assert again["epoch"] == slow_registration["epoch"]
        first = fast.wait(is_("appended", epoch=fast_epoch), "an append by the fast node")["seq"]
        fast.wait(lambda e: e["event"] == "appended" and e["seq"] >= first + 40, "40 appends by the fast node")
        assert len(registrations(fast)) == 1, "the fast node lost its registration"
        assert await registered_epoch(etcd1, 2) == registrations(fast)[0]
        records = await check_stream(etcd1, [(slow_epoch, fast_epoch)])
        first_fast = min(s for s, e in records if e == fast_epoch)
        assert {e for s, e in records if s >= first_fast} == {fast_epoch}, "the slow node wrote after it was replaced"
