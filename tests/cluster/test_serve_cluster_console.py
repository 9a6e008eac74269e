"""The web console's cluster page (issue 26, "Seeing it") in Chromium against three real ``walgate serve --cluster``
nodes (stopped by PID) holding a ``REPLICA 3`` database, a Kafka-native topic of replication factor 3 and a one-copy
database.

What holds: node 1's page shows the Cluster tab, every node alive and caught up (node 1 the controller), each
vgroup of ``r`` and partition of ``events`` with its leader and ISR 1, 2, 3, and ``power``'s vgroup as one copy;
its JSON API (``/ui/api/cluster``) says the same. After a ``kill -9`` of the node leading one of ``r``'s vgroups (not node 1, the
controller, whose page is watched), within a bounded wait the page shows that node not alive and that vgroup led by
another replica, the dead node out of its ISR and the vgroup under-replicated: the page polls once a second, the
node re-reads the membership every third of the 2 s lease and follows the partition states as they change; SQL
``SHOW r.VGROUPS`` (TDengine's view) names the same leader, the dead node offline.
On three nodes in racks of their own, the page shows each node's rack, and a replica move to a node paused
(SIGSTOP, its lease long) as moving (the target's replicas, the ISR without it, its adding replica, the status) until
the node is resumed, then whole (the ISR of all three, nothing adding, "ok").
Skipped only when /usr/bin/chromium is absent (``.ci/run`` installs it), as tests/gateway/test_console.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic
from etcd_cluster import EtcdCluster
from playwright.sync_api import expect, sync_playwright
from serve_support import all_ready, create_topics, eventually, no_traceback, node, produce_to, sql, wait_log
from test_serve_cluster_reassignments import TOPIC, read_all, reassign
from test_serve_cluster_replicated_topics import described

from livewalgate import WalgateServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]
ENABLED = ("--override", "replication.enable=true", "--override", "replica.lag.time.max.ms=2000")
TIMEOUT_MS = 20_000  # an expectation's bound: the 2 s lease, an election, a membership read, a 1 s poll

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no chromium at {CHROMIUM} (apt-get install chromium)")


LONG_LEASE = ("--override", "broker.session.timeout.ms=60000")
"""A paused node stays registered: its move waits for it, neither refused nor done."""


def cluster_json(server: WalgateServer) -> dict[str, Any]:
    with urllib.request.urlopen(server.http_url + "/ui/api/cluster", timeout=30) as r:
        return dict(json.load(r))


def test_the_cluster_page_shows_leaders_and_a_killed_leaders_successor(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        n1 = stack.enter_context(node(etcd1, tmp_path, 1, *ENABLED))
        wait_log(n1, "node 1: controller")
        nodes = [n1, *(stack.enter_context(node(etcd1, tmp_path, i, *ENABLED)) for i in (2, 3))]
        all_ready(nodes)
        sql(n1, "CREATE DATABASE r VGROUPS 3 REPLICA 3")
        sql(n1, "CREATE DATABASE power VGROUPS 1")
        create_topics(f"127.0.0.1:{n1.kafka_port}", NewTopic("events", 2, 3))

        def whole() -> bool:
            shown = cluster_json(n1)
            replicated = [p for p in shown["partitions"] if p["database"] == "r" or p["topic"] == "events"]
            return len(replicated) == 5 and all(p["leader"] and p["isr"] == [1, 2, 3] for p in replicated) and all(
                n["caught_up"] for n in shown["nodes"])
        eventually("r's vgroups and events' partitions led, their ISR whole, every node caught up", whole)
        shown = cluster_json(n1)
        assert (shown["node_id"], shown["controller"]) == (1, 1)
        assert [(n["node_id"], n["live"], n["address"]) for n in shown["nodes"]] == [
            (i + 1, True, f"127.0.0.1:{s.kafka_port}") for i, s in enumerate(nodes)]
        (power,) = [p for p in shown["partitions"] if p["database"] == "power"]
        assert (power["kind"], power["replicas"], power["leader"], power["offline"]) == (
            "one-copy", [power["leader"]], power["leader"], False)
        led = {p["vgroup"]: p["leader"] for p in shown["partitions"] if p["database"] == "r"}
        vgroup, dead_id = next((v, leader) for v, leader in sorted(led.items()) if leader != 1)

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(f"{n1.http_url}/ui#cluster")
                expect(page.locator("#cluster-link")).to_be_visible()
                expect(page.locator("#cluster-title")).to_have_text("Cluster walgate · seen from node 1")
                for node_id in (1, 2, 3):
                    cells = page.locator(f'#node-rows tr[data-node="{node_id}"] td')
                    expect(cells.nth(4)).to_have_text("yes")  # alive
                    expect(cells.nth(7)).to_have_text("yes")  # caught up
                expect(page.locator('#node-rows tr[data-node="1"] td').nth(6)).to_have_text("controller")

                def leaders_as_named() -> bool:  # (read again: a lease lapsing under load may move a leader meanwhile)
                    now = {p["vgroup"]: p["leader"] for p in cluster_json(n1)["partitions"] if p["database"] == "r"}
                    return all(page.locator(f'#vgroup-rows tr[data-vgroup="r/{v}"] td').nth(2).inner_text() == str(leader)
                               for v, leader in now.items())
                eventually("the page naming the leaders the cluster's JSON names", leaders_as_named)
                for v in led:
                    cells = page.locator(f'#vgroup-rows tr[data-vgroup="r/{v}"] td')
                    expect(cells.nth(5)).to_have_text("1, 2, 3")
                    expect(cells.nth(9)).to_have_text("ok")
                expect(page.locator('#vgroup-rows tr[data-vgroup="power/0"] td').nth(9)).to_have_text("one copy")
                for partition in (0, 1):
                    cells = page.locator(f'#vgroup-rows tr[data-vgroup="events/{partition}"] td')
                    expect(cells.nth(0)).to_have_text("topic events")
                    expect(cells.nth(5)).to_have_text("1, 2, 3")

                dead = nodes[dead_id - 1]
                dead.proc.kill()
                dead.proc.wait(timeout=30)
                survivors = [i + 1 for i, s in enumerate(nodes) if s is not dead]
                expect(page.locator(f'#node-rows tr[data-node="{dead_id}"] td').nth(4)).to_have_text("no")
                cells = page.locator(f'#vgroup-rows tr[data-vgroup="r/{vgroup}"] td')
                expect(cells.nth(2)).to_have_text(re.compile(f"^[{''.join(map(str, survivors))}]$"))
                expect(cells.nth(5)).to_have_text(", ".join(map(str, survivors)))
                expect(cells.nth(9)).to_have_text("under-replicated")
                expect(page.locator("#cluster-summary")).to_contain_text("3 nodes (1 down) · controller 1")
            finally:
                browser.close()

        shown = cluster_json(n1)
        (moved,) = [p for p in shown["partitions"] if (p["database"], p["vgroup"]) == ("r", vgroup)]
        assert moved["leader"] in survivors and moved["leader_epoch"] >= 1 and dead_id not in moved["isr"]
        (row,) = [r for r in sql(n1, "SHOW r.VGROUPS") if r[0] == vgroup]  # TDengine's view: the same leader
        assert {n: status for n, status in zip(row[3::2], row[4::2])} == {
            n: "offline" if n == dead_id else "leader" if n == moved["leader"] else "follower" for n in (1, 2, 3)}, row
        assert [(n["node_id"], n["live"], n["caught_up"]) for n in shown["nodes"]] == [
            (i, i != dead_id, i != dead_id) for i in (1, 2, 3)]
        for server in nodes:
            if server is not dead:
                no_traceback(server)



def test_the_cluster_page_shows_racks_and_a_move_in_progress(etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = [stack.enter_context(node(etcd1, tmp_path, i, *ENABLED, *LONG_LEASE, "--override",
                                          f"broker.rack=rack-{i}")) for i in (1, 2, 3)]
        n1, n3 = nodes[0], nodes[2]
        all_ready(nodes)
        create_topics(f"127.0.0.1:{n1.kafka_port}", NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"}))
        eventually("three in sync", lambda: sorted(described(n1, TOPIC)[0][2]) == [1, 2, 3])
        assert reassign(n1.kafka_port, [1, 2]) == (0, 0)  # (in sync: done at once)
        eventually("moved off node 3", lambda: described(n1, TOPIC)[0][1] == [1, 2])
        values = [b"%04d" % i + b"v" * 1_000 for i in range(50)]
        produce_to(n1.kafka_port, TOPIC, {0: values})
        os.kill(n3.proc.pid, signal.SIGSTOP)  # (registered still: its lease is long; it copies nothing meanwhile)
        try:
            assert reassign(n1.kafka_port, [1, 2, 3]) == (0, 0)
            assert [n["rack"] for n in cluster_json(n1)["nodes"]] == ["rack-1", "rack-2", "rack-3"]
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    page = browser.new_page(viewport={"width": 1400, "height": 900})
                    page.goto(f"{n1.http_url}/ui#cluster")
                    for i in (1, 2, 3):
                        expect(page.locator(f'#node-rows tr[data-node="{i}"] td').nth(3)).to_have_text(
                            f"rack-{i}", timeout=TIMEOUT_MS)
                    cells = page.locator(f'#vgroup-rows tr[data-vgroup="{TOPIC}/0"] td')
                    expect(cells.nth(4)).to_have_text("1, 2, 3", timeout=TIMEOUT_MS)  # replicas: the target's
                    expect(cells.nth(5)).to_have_text("1, 2")  # ISR: node 3 has copied nothing
                    expect(cells.nth(7)).to_have_text("3")  # adding
                    expect(cells.nth(8)).to_have_text("–")  # removing
                    expect(cells.nth(9)).to_contain_text("moving replicas")
                    os.kill(n3.proc.pid, signal.SIGCONT)
                    expect(cells.nth(5)).to_have_text("1, 2, 3", timeout=TIMEOUT_MS)
                    expect(cells.nth(7)).to_have_text("–", timeout=TIMEOUT_MS)
                    expect(cells.nth(9)).to_have_text("ok", timeout=TIMEOUT_MS)
                finally:
                    browser.close()
        finally:
            os.kill(n3.proc.pid, signal.SIGCONT)
        assert read_all(n3.kafka_port, 50, TOPIC) == values
        for server in nodes:
            no_traceback(server)
