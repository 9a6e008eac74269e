"""What the control-plane tests share: one in-process node of the library over real etcd, bounded waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from walgate.cluster.election import ControllerElection
from walgate.cluster.etcd import EtcdSession
from walgate.cluster.incarnation import load_or_create
from walgate.cluster.model import ControlPlaneUnavailable, Keys, NodeInfo
from walgate.cluster.partition_codec import PartitionId, batches
from walgate.cluster.partition_states import PartitionStates
from walgate.cluster.records import RecordFollower, RecordLog
from walgate.cluster.registry import NodeRegistration
from walgate.gateway.cluster_member import ClusterMember
from walgate.replication.partition import PartitionState

__all__ = ["Node", "eventually", "within", "try_append", "KEYS", "joined_member"]

T = TypeVar("T")
KEYS = Keys("test")
WAIT_S = 60.0  # every wait on etcd (an election after a lease TTL, a restart) ends within this, or the test fails


async def eventually(what: str, check: Callable[[], Awaitable[bool]], timeout: float = WAIT_S) -> None:
    """Poll ``check`` (every 0.1 s) until it is true (once: it may act); fail with ``what`` after ``timeout``
    seconds."""
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.1)
    except TimeoutError as e:
        raise AssertionError(f"not within {timeout:g} s: {what}") from e


async def within(aw: Awaitable[T], timeout: float = WAIT_S) -> T:
    """``aw``'s result; the test fails (TimeoutError) when it takes longer than ``timeout`` seconds."""
    return await asyncio.wait_for(aw, timeout)


async def joined_member(etcd_spec: str, data_dir: Path, node_id: int) -> ClusterMember:
    """Node ``node_id`` of cluster ``walgate`` over the etcd at ``etcd_spec`` (its data dir ``data_dir``, a 2 s
    session), registered and advertising ``PLAINTEXT://127.0.0.1:<9090 + node id>``."""
    data_dir.mkdir(exist_ok=True)
    member = ClusterMember(etcd_spec, "walgate", node_id, data_dir, 2000)
    await member.kafka_cluster_id()
    await member.join((f"PLAINTEXT://127.0.0.1:{9090 + node_id}",))
    return member


class Node:
    """The library's parts for one node: registration, election, the record log and a follower that keeps what
    it applied in ``applied`` (seq -> (epoch, payload)) and the snapshots it restored in ``restored``."""

    def __init__(self, endpoints: list[tuple[str, int]], node_id: int, data_dir: Path, ttl: int = 3,
                 timeout: float = 3.0) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        self.session = EtcdSession(endpoints, timeout=timeout)
        self.info = NodeInfo(node_id, load_or_create(data_dir), (f"127.0.0.1:{9000 + node_id}",), None)
        self.registration = NodeRegistration(self.session, KEYS, self.info, ttl=ttl)
        self.election = ControllerElection(self.session, KEYS, self.registration)
        self.log = RecordLog(self.session, KEYS, self.election)
        self.applied: dict[int, tuple[int, bytes]] = {}
        self.restored: list[int] = []
        self.follower = RecordFollower(self.session, KEYS, self._apply, self._restore)
        self.tasks: list[asyncio.Task[None]] = []

    def _apply(self, seq: int, epoch: int, payload: bytes) -> None:
        assert seq not in self.applied, f"record {seq} applied twice"
        self.applied[seq] = (epoch, payload)

    def _restore(self, seq: int, state: bytes) -> None:
        self.restored.append(seq)
        self.applied = {int(k): (0, v) for k, v in (line.split(b"=", 1) for line in state.split(b"\n") if line)}

    def state(self) -> bytes:
        """What the follower applied, as the state a snapshot holds (``seq=payload`` lines)."""
        return b"\n".join(b"%d=%s" % (k, v[1]) for k, v in sorted(self.applied.items()))

    def start(self, *parts: str) -> None:
        runs = {"registration": self.registration.run, "election": self.election.run, "follower": self.follower.run}
        for part in parts or tuple(runs):
            self.tasks.append(asyncio.create_task(runs[part]()))

    async def stop(self) -> None:
        for t in self.tasks:
            for _ in range(100):  # bounded: a task that ignored a cancellation is cancelled again
                t.cancel()
                await asyncio.wait([t], timeout=0.5)
                if t.done():
                    break
            assert t.done(), f"{t} does not stop"
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        self.tasks.clear()

    async def close(self) -> None:
        await self.stop()
        await self.session.close()


async def try_append(node: Node, payload: bytes) -> bool:
    """Whether ``node`` appended ``payload`` (False: etcd did not answer)."""
    try:
        await node.log.append([payload])
        return True
    except ControlPlaneUnavailable:
        return False


async def create_states(node: Node, states: dict[PartitionId, PartitionState]) -> None:
    """What the controller does with a new database: its vgroups' partition states, created in fenced transactions
    (``node`` is the controller)."""
    view = PartitionStates(node.session, KEYS)
    for batch in batches(states):
        compare, ops = [], []
        for pid in batch:
            c, o = view.creation(pid, states[pid])
            compare += c
            ops += o
        ok, _ = await node.election.fenced_txn(compare, ops)
        assert ok
