"""The control plane under network partitions: three etcd members and the library's node processes, each in its own
network namespace (netns.py), links cut with iptables DROP rules and healed.

- the controller's host cut off from etcd's majority: its lease ends, another node is elected, and once the link
  heals the old controller writes nothing more under its epoch (the fence) and registers again on a new lease,
  under the same broker epoch (its process never restarted: KIP-903);
- a minority etcd member cut off: the nodes that talked to it go on through the majority;
- an etcd member cut off from its peers but not from the nodes: a follower watching it (quiet, not broken) moves to
  another member when its lease's keep-alive there fails, and applies every record;
- a node cut off from every etcd member keeps what it applied and, healed, applies every record after it, each once;
- an asymmetric partition: nothing reaches etcd's leader while it still sends (it keeps sending heartbeats and, with
  etcd 3.4's default of no pre-vote, vote requests at ever higher terms): the control plane goes on.

After each, the record stream in etcd is checked: sequence numbers 1..n, controller epochs never going back, no
record of a replaced controller after its successor's first.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from etcd_cluster import EtcdCluster, etcd_cluster
from event_process import EventProcess, first_event
from netns import Network, namespaces_of, network
from test_processes import CLUSTER, stream

ETCD = ["e0", "e1", "e2"]
TTL = 2


class Cluster:
    """Three etcd members (hosts e0-e2) and node processes on hosts n<id>, all in one :class:`Network`."""

    def __init__(self, net: Network, etcd: EtcdCluster, tmp_path: Path, stack: ExitStack) -> None:
        self.net = net
        self.etcd = etcd
        self.tmp_path = tmp_path
        self._stack = stack

    def start(self, script: str, node_id: int) -> EventProcess:
        """``script`` (node_helper.py: stands for controller and appends; follower_helper.py: follows the stream)
        as node ``node_id`` on host ``n<node_id>``."""
        data_dir = self.tmp_path / f"node{node_id}"
        proc = EventProcess(f"node {node_id}", script, [self.etcd.spec, CLUSTER, str(node_id), str(data_dir),
                                                          str(TTL)], data_dir.with_suffix(".log"),
                            prefix=self.net.command(f"n{node_id}"))
        self._stack.callback(proc.stop)
        return proc


@contextmanager
def cluster(tmp_path: Path, nodes: list[int]) -> Iterator[Cluster]:
    hosts = ETCD + [f"n{i}" for i in nodes]
    with ExitStack() as stack:
        net = stack.enter_context(network(hosts))
        etcd = stack.enter_context(etcd_cluster(tmp_path / "etcd", 3, [net.address(h) for h in ETCD],
                                                [net.command(h) for h in ETCD]))
        yield Cluster(net, etcd, tmp_path, stack)
    assert namespaces_of(os.getpid()) == [], "a namespace outlived its test"


def is_(kind: str, **fields: Any) -> Any:
    return lambda e: e["event"] == kind and all(e.get(k) == v for k, v in fields.items())


async def check_stream(etcd: EtcdCluster, replaced: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """The stream's (seq, epoch) list after checking it: 1..n, epochs never going back, and for each (old, new) in
    ``replaced`` no record of epoch ``old`` after the first of epoch ``new``."""
    records = await stream(etcd)
    assert [s for s, _ in records] == list(range(1, len(records) + 1)), records
    epochs = [e for _, e in records]
    assert epochs == sorted(epochs), records
    for old, new in replaced:
        first_new = min(s for s, e in records if e == new)
        assert all(s < first_new for s, e in records if e == old), records
    return records


def applied_seqs(proc: EventProcess) -> list[int]:
    return [e["seq"] for e in proc.drain() if e["event"] == "applied"]


async def test_the_controller_cut_off_from_the_etcd_majority_is_replaced_and_fenced(tmp_path: Path) -> None:
    with cluster(tmp_path, [1, 2]) as c:
        nodes = [c.start("node_helper.py", 1), c.start("node_helper.py", 2)]
        old, event = first_event(nodes, is_("controller"), "controller")
        old_epoch = event["epoch"]
        [new] = [p for p in nodes if p is not old]
        old_registration = [e for e in old.drain() if e["event"] == "registered"][-1]
        old.wait(is_("appended", epoch=old_epoch), "an append")
        # the controller's host and one etcd member on one side; the etcd majority and the other node on the other
        old_host = f"n{old.name.split()[-1]}"
        new_host = f"n{new.name.split()[-1]}"
        c.net.isolate([old_host, "e2"], ["e0", "e1", new_host])
        new_epoch = new.wait(is_("controller"), "the other node's election")["epoch"]
        assert new_epoch > old_epoch
        new.wait(is_("appended", epoch=new_epoch), "an append by the new controller")
        c.net.heal()
        old.wait(lambda e: e["event"] in ("refused", "stepped_down") and e["epoch"] == old_epoch,
                 "the old controller stepping down")
        again = old.reported(lambda e: e["event"] == "registered" and e["lease"] != old_registration["lease"],
                             "a new registration of the old controller after the heal")
        assert again["epoch"] == old_registration["epoch"]  # the same process: the same broker epoch (KIP-903)
        new.wait(is_("appended", epoch=new_epoch), "an append after the heal")
        await check_stream(c.etcd, [(old_epoch, new_epoch)])


async def test_a_minority_etcd_member_cut_off_the_majority_goes_on(tmp_path: Path) -> None:
    with cluster(tmp_path, [1, 3]) as c:
        ctl = c.start("node_helper.py", 1)
        follower = c.start("follower_helper.py", 3)
        epoch = ctl.wait(is_("controller"), "controller")["epoch"]
        follower.wait(is_("applied", seq=1), "the first record applied")
        # e0 is every node's first endpoint: the calls in flight to it time out, the next go to e1
        c.net.isolate(["e0"], ["e1", "e2", "n1", "n3"])
        last = ctl.wait(is_("appended", epoch=epoch), "an append")["seq"]
        target = last + 20
        ctl.wait(lambda e: e["event"] == "appended" and e["seq"] >= target, "20 appends with e0 cut off")
        follower.wait(lambda e: e["event"] == "applied" and e["seq"] >= target, "the follower applying them")
        c.net.heal()
        records = await check_stream(c.etcd)  # the controller may have changed (a lease TTL of 2 s is short)
        follower.reported(is_("applied", seq=records[-1][0]), "the last record applied")
        assert applied_seqs(follower)[: len(records)] == list(range(1, len(records) + 1))


async def test_a_node_cut_off_from_etcd_keeps_what_it_applied_and_catches_up(tmp_path: Path) -> None:
    with cluster(tmp_path, [1, 3]) as c:
        ctl = c.start("node_helper.py", 1)
        follower = c.start("follower_helper.py", 3)
        ctl.wait(is_("controller"), "controller")
        registration = follower.wait(is_("registered"), "registration")
        follower.wait(is_("applied", seq=3), "three records applied")
        c.net.isolate(["n3"], ETCD)
        cut_at = ctl.wait(is_("appended"), "an append")["seq"]
        # 5 s of appends at one every 0.1 s by the controller's clock: longer than the follower's lease TTL
        ctl.wait(lambda e: e["event"] == "appended" and e["seq"] >= cut_at + 50, "50 appends while cut off")
        before_heal = applied_seqs(follower)
        assert before_heal == list(range(1, len(before_heal) + 1)), "applied in order, each once, while cut off"
        assert before_heal[-1] < cut_at + 50, "the follower applied records it could not have been sent"
        c.net.heal()
        again = follower.wait(is_("registered"), "a new registration after the heal")
        # its lease expired while it was away: a new lease, under the same broker epoch (the same process)
        assert again["lease"] != registration["lease"] and again["epoch"] == registration["epoch"]
        ctl.wait(is_("appended"), "an append after the heal")
        records = await check_stream(c.etcd)
        follower.reported(is_("applied", seq=records[-1][0]), "every record applied after the heal")
        assert applied_seqs(follower)[: len(records)] == list(range(1, len(records) + 1))


def _etcd_leader(c: Cluster) -> str:
    """The host of etcd's leader member (asked of each member's maintenance status)."""
    for host, member in zip(ETCD, c.etcd.members):
        request = urllib.request.Request(member.client_url + "/v3/maintenance/status", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=5) as r:
            status = json.loads(r.read())
        if status["header"]["member_id"] == status["leader"]:
            return host
    pytest.fail("no etcd member says it leads")


async def test_an_asymmetric_partition_nothing_reaches_the_etcd_leader(tmp_path: Path) -> None:
    with cluster(tmp_path, [1, 3]) as c:
        ctl = c.start("node_helper.py", 1)
        follower = c.start("follower_helper.py", 3)
        ctl.wait(is_("controller"), "controller")
        follower.wait(is_("applied", seq=1), "the first record applied")
        leader = _etcd_leader(c)
        for host in c.net.hosts:
            if host != leader:
                c.net.drop(host, leader)  # the leader still sends to every host; nothing comes back to it
        cut_at = ctl.wait(is_("appended"), "an append")["seq"]
        ctl.wait(lambda e: e["event"] == "appended" and e["seq"] >= cut_at + 20,
                 "20 appends while nothing reaches the old etcd leader")
        follower.wait(lambda e: e["event"] == "applied" and e["seq"] >= cut_at + 20, "the follower applying them")
        c.net.heal()
        ctl.wait(is_("appended"), "an append after the heal")
        records = await check_stream(c.etcd)
        follower.reported(is_("applied", seq=records[-1][0]), "every record applied")
        assert applied_seqs(follower)[: len(records)] == list(range(1, len(records) + 1))


async def test_a_follower_watching_an_etcd_member_cut_off_from_its_peers_moves_on(tmp_path: Path) -> None:
    """The follower still reaches its member, which has lost etcd's majority: the watch there stays quiet (the member
    hears of no new record) without breaking; the lease keep-alive through the same member fails, the session moves
    to the next member, and the watch with it."""
    with cluster(tmp_path, [1, 3]) as c:
        ctl = c.start("node_helper.py", 1)
        follower = c.start("follower_helper.py", 3)
        ctl.wait(is_("controller"), "controller")
        follower.wait(is_("applied", seq=1), "the first record applied")
        c.net.cut("e0", "e1")  # e0 (every node's first endpoint) loses its peers; the nodes still reach it
        c.net.cut("e0", "e2")
        cut_at = ctl.wait(is_("appended"), "an append")["seq"]
        ctl.wait(lambda e: e["event"] == "appended" and e["seq"] >= cut_at + 20, "20 appends with e0 alone")
        follower.wait(lambda e: e["event"] == "applied" and e["seq"] >= cut_at + 20, "the follower applying them")
        c.net.heal()
        records = await check_stream(c.etcd)
        follower.reported(is_("applied", seq=records[-1][0]), "every record applied")
        assert applied_seqs(follower)[: len(records)] == list(range(1, len(records) + 1))
