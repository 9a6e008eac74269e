"""A slow link to one follower on a ``REPLICA 3`` database (issue 25: "a delay proxy"; the workload and its history:
replicated_workload.py; the proxy: tests/cluster/delay_proxy.py; the checker: tests/cluster/history.py).

Every node has a second Kafka listener, ``SLOW``, which it advertises at a delay proxy's port in front of it; node
:data:`SLOW_NODE` reaches the other nodes on it (``inter.broker.listener.name=SLOW``: its WalFetch requests and their
answers go through the proxies), the other nodes and the clients on ``PLAINTEXT``. Under the workload, node
:data:`SLOW_NODE`'s replication traffic is delayed 200-500 ms each way (it stays a follower, acks=all answers
wait for it while it is in the ISR), then 1.5 s each way (a fetch round trip longer than
``replica.lag.time.max.ms``, 2 s: it drops out of the ISR of the vgroup it follows, and the two replicas left,
``min.insync.replicas``, acknowledge on), then not at all (it catches up and rejoins). No acknowledged write is
lost, none duplicated, and the replicas' WALs agree.

Observed (seed 1, 2026-11-30): put back to 200-500 ms each way it did not rejoin within 60 s while the writers kept
writing. That is Kafka's rule (``Partition.isFollowerInSync``, walgate/replication/leader.py ``can_join_isr``): a
follower joins when the end it fetches from has reached the high watermark, and with a round trip of 0.4-1 s and
writes the two fast replicas acknowledge within each round trip (about 10 a second here), the high watermark is
past the end of its last answer whenever its next fetch arrives; staying in the ISR only asks that it reach, within ``replica.lag.time.max.ms``,
the log end of its previous fetch, which it does at 200-500 ms.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from delay_proxy import Delay, DelayProxy, delay_proxy
from etcd_cluster import EtcdCluster
from replicated_workload import (
    ACKS,
    SEEDS,
    VGROUPS,
    Nodes,
    Workload,
    checked,
    final_history,
    replicated_database,
    wait_until,
)

from livewalgate import free_port

SLOW_NODE = 3
SLOWED = Delay(200, jitter_ms=300)  # 200-500 ms each way
STALLED = Delay(1500)  # each way: a round trip of 3 s, past replica.lag.time.max.ms (2 s, replicated_workload.ARGS)


def listeners(nodes: Nodes, proxies: dict[int, DelayProxy], slow: dict[int, int]) -> None:
    """Each node's flags: its ``PLAINTEXT`` listener on its Kafka port, its ``SLOW`` one on ``slow[i]`` advertised at
    ``proxies[i]``; node :data:`SLOW_NODE` reaching the others on ``SLOW``."""
    for i, port in nodes.ports.items():
        nodes.args[i] = (
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port},SLOW://127.0.0.1:{slow[i]}",
            "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port},SLOW://127.0.0.1:{proxies[i].port}",
            "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SLOW:PLAINTEXT",
            *(("--override", "inter.broker.listener.name=SLOW") if i == SLOW_NODE else ()))


def delayed(proxies: dict[int, DelayProxy], delay: Delay) -> None:
    for proxy in proxies.values():
        proxy.set_delay(delay, delay)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_follower_behind_a_slow_link(etcd1: EtcdCluster, tmp_path: Path, seed: int) -> None:
    """The module docstring: node 3's fetches delayed, it leaves the ISR and comes back, nothing acknowledged lost."""
    nodes = Nodes(etcd1, tmp_path)
    slow = {i: free_port() for i in nodes.ports}
    with ExitStack() as proxied:
        proxies = {i: proxied.enter_context(delay_proxy(("127.0.0.1", port), seed=seed * 10 + i))
                   for i, port in slow.items()}
        listeners(nodes, proxies, slow)
        try:
            nodes.start_all((1, 2, 3))
            database = replicated_database(nodes)
            followed = [p for p in range(VGROUPS) if nodes.current_leader(p) != SLOW_NODE]
            assert followed, f"node {SLOW_NODE} leads every vgroup: it follows none"
            p = followed[0]

            def isr() -> list[int]:
                return nodes.isr(p, nodes.current_leader(p))

            with Workload(nodes, seed) as load:
                load.wait_acked(ACKS, "before the delay")
                delayed(proxies, SLOWED)
                load.note(f"node {SLOW_NODE}'s links delayed 200-500 ms each way")
                load.wait_acked(ACKS, "with the links delayed 200-500 ms")
                assert SLOW_NODE in isr(), f"node {SLOW_NODE} left vgroup {p}'s ISR at 200-500 ms each way"
                delayed(proxies, STALLED)
                stalled_at = time.monotonic()
                load.note(f"node {SLOW_NODE}'s links delayed 1.5 s each way")
                wait_until(f"node {SLOW_NODE} out of vgroup {p}'s ISR", lambda: SLOW_NODE not in isr())
                out_s = time.monotonic() - stalled_at
                load.note(f"node {SLOW_NODE} out of vgroup {p}'s ISR ({isr()})")
                load.wait_acked(ACKS, f"with node {SLOW_NODE} out of the ISR")
                delayed(proxies, Delay())
                healed_at = time.monotonic()
                load.note(f"node {SLOW_NODE}'s links no longer delayed")
                wait_until(f"node {SLOW_NODE} back in vgroup {p}'s ISR", lambda: SLOW_NODE in isr())
                back_s = time.monotonic() - healed_at
                load.note(f"node {SLOW_NODE} back in vgroup {p}'s ISR")
                load.wait_acked(ACKS, f"with node {SLOW_NODE} back")
            assert sum(proxy.accepted for i, proxy in proxies.items() if i != SLOW_NODE) > 0, "no fetch went slow"
            history = final_history(nodes, load, database, tmp_path / "replicas")
        finally:
            nodes.close()
    print(f"seed {seed}: node {SLOW_NODE} left vgroup {p}'s ISR {out_s:.1f} s after its links went to 1.5 s, rejoined "
          f"{back_s:.1f} s after they were healed; answers {load.answers}; {load.events}")
    checked(history, load, seed)
