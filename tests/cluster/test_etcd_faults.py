"""A three-member etcd losing members: one member killed, service goes on; the majority lost, writes are refused
with a clear error while what nodes applied stays readable; the majority back, everything goes on. One member hung
(SIGSTOP): the nodes talking to it move on without losing their registrations."""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from pathlib import Path

import pytest
from cluster_support import KEYS, Node, eventually, try_append, within
from etcd_cluster import EtcdCluster

from walgate.cluster.model import ControlPlaneUnavailable, NotController


async def test_one_member_killed_then_the_majority(etcd3: EtcdCluster, tmp_path: Path) -> None:
    ctl = Node(etcd3.endpoints, 1, tmp_path / "n1", ttl=5, timeout=2.0)
    other = Node(list(reversed(etcd3.endpoints)), 2, tmp_path / "n2", ttl=5, timeout=2.0)
    try:
        ctl.start()
        await within(ctl.election.wait_elected())
        other.start()
        await within(other.registration.wait_registered())
        await ctl.log.append([b"a"])
        await within(other.follower.wait_applied(1))

        # one member of three killed (the one each node talks to first): writes, registrations and the stream go on
        etcd3.members[0].kill()
        await eventually("a write with one member down", lambda: try_append(ctl, b"b"))
        await within(other.follower.wait_applied(2))
        assert ctl.election.epoch is not None and other.registration.epoch is not None

        # the majority lost: a write is refused with a clear error; what was applied is still there
        etcd3.members[1].kill()
        with pytest.raises(ControlPlaneUnavailable, match="no member reachable or no quorum"):
            await ctl.log.append([b"lost"])
        assert [other.applied[s][1] for s in sorted(other.applied)] == [b"a", b"b"]
        assert [t.exception() for t in other.tasks + ctl.tasks if t.done()] == []  # the loops wait etcd out

        # the majority back: the same controller or a new one writes, every node applies it
        for m in etcd3.members[:2]:
            m.start()
        etcd3.wait_healthy(etcd3.members)
        await eventually("a controller", lambda: _any_controller([ctl, other]))
        await eventually("a write after the majority is back", lambda: _append_via_controller([ctl, other], b"c"))
        seq_kv = await ctl.session.get(KEYS.seq)
        assert seq_kv is not None
        last = int(seq_kv.value)
        for n in (ctl, other):
            await within(n.follower.wait_applied(last))
            payloads = [n.applied[s][1] for s in sorted(n.applied)]
            assert payloads[:2] == [b"a", b"b"] and payloads[-1] == b"c"
            assert set(payloads) <= {b"a", b"b", b"c", b"lost"}  # "lost" may have committed: its outcome was unknown
    finally:
        await ctl.close()
        await other.close()


async def _append_via_controller(nodes: list[Node], payload: bytes) -> bool:
    """Whether the node that is the controller now appended ``payload`` (the controller can still move once the
    majority is back: then the next try asks the new one)."""
    for n in nodes:
        if n.election.epoch is not None:
            try:
                return await try_append(n, payload)
            except NotController:
                return False
    return False


async def _any_controller(nodes: list[Node]) -> bool:
    return any(n.election.epoch is not None for n in nodes)


def _a_follower_member(etcd: EtcdCluster) -> int:
    """The index of a member that is not etcd's leader (asked of each member's maintenance status)."""
    for i, member in enumerate(etcd.members):
        request = urllib.request.Request(member.client_url + "/v3/maintenance/status", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=5) as r:
            status = json.loads(r.read())
        if status["header"]["member_id"] != status["leader"]:
            return i
    pytest.fail("every member says it leads")


async def test_a_hung_member_costs_no_registration(etcd3: EtcdCluster, tmp_path: Path) -> None:
    """The member a node talks to stops answering (SIGSTOP: connections open, no answer) without an etcd election
    (a follower member): the keep-alive that timed out is tried again on the next member at once, inside the lease's
    TTL (keep-alive every TTL/3 = 1.7 s, a 2 s call timeout, TTL 5 s), so the node keeps its registration and epoch."""
    hung = _a_follower_member(etcd3)
    endpoints = [etcd3.endpoints[hung]] + [e for i, e in enumerate(etcd3.endpoints) if i != hung]
    node = Node(endpoints, 1, tmp_path / "n1", ttl=5, timeout=2.0)
    member = etcd3.members[hung]
    assert member.proc is not None
    try:
        node.start("registration")
        epoch = await within(node.registration.wait_registered())
        member.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(7)  # the first keep-alive to time out fails at ~3.7 s, the lease would end at 5 s
        assert node.registration.epoch == epoch, "the registration was lost and made again"
        kv = await node.session.get(KEYS.node(1))
        assert kv is not None and kv.create_revision == epoch
    finally:
        member.proc.send_signal(signal.SIGCONT)
        await node.close()
