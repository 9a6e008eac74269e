"""A node's Kafka connections to the other nodes (walgate/gateway/kafka/node_links.py), over a real etcd with real
cluster members: a stalled node makes each request fail after its own timeout, never behind another request waiting
on the same node; a node advertising no endpoint on the inter-node listener's name is unreachable, not reached
through another listener."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cluster_support import joined_member, within
from etcd_cluster import EtcdCluster
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest

from walgate.gateway.kafka.node_links import NodeLinks, NodeUnreachable

REQUEST = WriteTxnMarkersRequest(markers=())


def test_a_stalled_node_times_each_request_out_on_its_own(etcd1: EtcdCluster, tmp_path: Path) -> None:
    async def scenario() -> None:
        connected = asyncio.Event()
        held: list[asyncio.StreamWriter] = []

        async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # reads what it is sent, never answers
            connected.set()
            while await reader.read(4096):
                pass

        stalled = await asyncio.start_server(stall, "127.0.0.1", 0)
        port = stalled.sockets[0].getsockname()[1]
        m1 = await joined_member(etcd1.spec, tmp_path / "n1", 1)
        (tmp_path / "n2").mkdir()
        m2 = type(m1)(etcd1.spec, "walgate", 2, tmp_path / "n2", 2000)
        await m2.kafka_cluster_id()
        await m2.join((f"PLAINTEXT://127.0.0.1:{port}",))
        await m1.refresh()
        links = NodeLinks(m1, "PLAINTEXT", None, timeout_s=3600)
        try:
            first = asyncio.create_task(links.call(2, REQUEST))  # holds node 2's connection, unanswered
            await within(connected.wait())
            links.timeout_s = 0.5
            with pytest.raises(NodeUnreachable, match="node 2: no answer"):
                await within(links.call(2, REQUEST))  # bounded by its own timeout, though the first still waits
            assert not first.done()
            first.cancel()
            with pytest.raises(NodeUnreachable, match="advertises no SSL listener"):
                await within(NodeLinks(m1, "SSL", None, timeout_s=5).call(2, REQUEST))
        finally:
            links.close()
            for w in held:
                w.close()
            stalled.close()
            await m2.leave()
            await m1.leave()

    asyncio.run(scenario())
