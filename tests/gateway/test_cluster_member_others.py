"""``ClusterMember.others``: the other live nodes' endpoints on a listener, which Metadata, Produce, Fetch and
FindCoordinator name at every request, made once per membership view and listener and made again when the view is
replaced; ``stop_tasks``, which a node's shutdown stops its cluster loops with, ends a task that swallowed its
cancellation (walgate/gateway/cluster_member.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from walgate.cluster.model import Membership, NodeInfo
from walgate.gateway import cluster_member
from walgate.gateway.cluster_member import ClusterMember, stop_tasks


def view(*nodes: NodeInfo) -> Membership:
    return Membership(nodes, tuple(n.node_id for n in nodes), nodes[0].node_id)


def info(node_id: int, *endpoints: str) -> NodeInfo:
    return NodeInfo(node_id, f"inc-{node_id}", endpoints)


def test_others_follow_the_view_and_the_listener(tmp_path: Path) -> None:
    member = ClusterMember("http://127.0.0.1:1", "walgate", 1, tmp_path, 6000)  # (never reaches etcd here)
    assert member.others("PLAINTEXT") == {}
    member.view = view(info(1, "PLAINTEXT://h1:9092"), info(2, "PLAINTEXT://h2:9092", "SSL://h2:9093"),
                       info(3, "SSL://h3:9093"), info(4))
    plain = member.others("PLAINTEXT")
    assert plain == {2: ("h2", 9092), 3: ("h3", 9093)}  # itself left out; node 4 advertises nothing
    assert member.others("SSL") == {2: ("h2", 9093), 3: ("h3", 9093)}
    assert member.others("PLAINTEXT") is plain  # made once for this view
    with pytest.raises(TypeError):
        plain[5] = ("h5", 1)  # type: ignore[index]  # read-only: every request shares it
    member.view = view(info(1, "PLAINTEXT://h1:9092"), info(3, "PLAINTEXT://h3:9092"))  # node 2 left, 3 moved
    assert member.others("PLAINTEXT") == {3: ("h3", 9092)}


async def test_stop_tasks_cancels_again_a_task_that_swallowed_its_cancellation(caplog: pytest.LogCaptureFixture,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """As aetcd's watcher swallows a cancellation: the loop goes on; it is cancelled again and ends, and a task
    that had ended on an error is logged."""
    monkeypatch.setattr(cluster_member, "CANCEL_AGAIN_AFTER_S", 0.5)
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.set()  # (aetcd: ``except CancelledError: pass``)
        await asyncio.sleep(3600)

    async def failed() -> None:
        raise RuntimeError("broken loop")

    tasks = [asyncio.create_task(stubborn(), name="stubborn"), asyncio.create_task(failed(), name="failed"),
             asyncio.create_task(asyncio.sleep(3600), name="plain")]
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="walgate.cluster"):
        async with asyncio.timeout(10):
            await stop_tasks(tasks)
    assert swallowed.is_set() and tasks[0].cancelled() and tasks[2].cancelled()
    assert [r.getMessage() for r in caplog.records] == ["stubborn did not end 0.5 s after it was cancelled: "
                                                        "cancelled again until it does",
                                                        "failed had stopped: broken loop"]


async def test_stop_tasks_leaves_a_task_its_cleanup_until_the_grace_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task whose cleanup on cancellation takes a while (the replica manager's checkpoints) is cancelled once."""
    monkeypatch.setattr(cluster_member, "CANCEL_AGAIN_AFTER_S", 5.0)
    cleaned = asyncio.Event()

    async def slow_cleanup() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(1.0)  # (cut short by a second cancellation)
            cleaned.set()

    task = asyncio.create_task(slow_cleanup())
    await asyncio.sleep(0)
    await stop_tasks([task])
    assert cleaned.is_set() and task.cancelled()
