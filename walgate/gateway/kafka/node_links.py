"""Kafka requests from this node to the other nodes of its cluster (docs/cluster.md, "Transaction coordinators").

A transaction coordinator sends WriteTxnMarkers (api 27) to the node of each partition of a transaction, and a
partition's node sends AddPartitionsToTxn v5 (the brokers' form) to the coordinator of a transactional Produce, as
Kafka's brokers do between themselves. The requests are kio's classes, generated from Kafka's message JSONs, framed by
:func:`walgate.wire.protocol.encode_request`; the other node decodes them as any client's.

A request goes to the endpoint the other node advertises on this node's first PLAINTEXT listener's name (Kafka's
``inter.broker.listener.name``; a cluster whose nodes have no PLAINTEXT listener cannot end a transaction spanning
nodes: :class:`NodeUnreachable` says so). One connection per node, one request at a time on it, each bounded by
``timeout_s``; a connection that fails is dropped and made again by the next request.

The client id is ``walgate-node-<id>/<incarnation>``: the receiving node takes a cluster-only request (WriteTxnMarkers)
only from a client id naming a node registered now with that data-dir incarnation (:func:`cluster_node`), which only
the cluster's etcd tells, never a client.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kio.serial import entity_reader

from walgate.cluster.model import Membership, endpoint_for
from walgate.gateway.cluster_member import ClusterMember
from walgate.wire.protocol import encode_request, response_class

__all__ = ["NodeLinks", "NodeUnreachable", "cluster_node", "names_a_node", "node_client_id"]

_PREFIX = "walgate-node-"


class NodeUnreachable(Exception):
    """A request to another node got no answer (not registered now, no endpoint, connection or timeout)."""


def node_client_id(node_id: int, incarnation: str) -> str:
    return f"{_PREFIX}{node_id}/{incarnation}"


def names_a_node(client_id: str | None) -> bool:
    """Whether ``client_id`` has the form of a node's (checked against the membership by :func:`cluster_node`)."""
    return client_id is not None and client_id.startswith(_PREFIX)


def cluster_node(client_id: str | None, view: Membership) -> int | None:
    """The node a request's ``client_id`` names when it is a node registered now with that incarnation, else None."""
    if client_id is None or not client_id.startswith(_PREFIX):
        return None
    node, _, incarnation = client_id[len(_PREFIX):].partition("/")
    return next((n.node_id for n in view.nodes if str(n.node_id) == node and n.incarnation == incarnation), None)


class NodeLinks:
    """This cluster node's connections to the others (see the module docstring)."""

    def __init__(self, member: ClusterMember, listener: str | None, timeout_s: float = 10.0) -> None:
        """``listener``: the name of this node's first PLAINTEXT listener (None: it has none)."""
        self.member = member
        self.listener = listener
        self.timeout_s = timeout_s
        self._streams: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._correlation_id = 0

    def _client_id(self) -> str:
        registration = self.member.registration
        incarnation = registration.info.incarnation if registration is not None else ""
        return node_client_id(self.member.node_id, incarnation)

    async def call(self, node: int, request: Any) -> Any:
        """Send kio request ``request`` to node ``node``; its decoded response. Raises :class:`NodeUnreachable`, whatever
        went wrong (no endpoint, connection refused or cut, timeout, an answer that does not decode)."""
        if self.listener is None:
            raise NodeUnreachable(f"node {self.member.node_id} has no PLAINTEXT listener to reach node {node} through")
        lock = self._locks.setdefault(node, asyncio.Lock())
        async with lock:
            try:
                return await asyncio.wait_for(self._exchange(node, request), self.timeout_s)
            except Exception as e:  # noqa: BLE001 - refused, cut, timed out or not understood: no answer, retried
                self._drop(node)
                what = "no answer" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
                raise NodeUnreachable(f"node {node}: {what}") from None

    async def _exchange(self, node: int, request: Any) -> Any:
        reader, writer = await self._stream(node)
        self._correlation_id += 1
        correlation_id = self._correlation_id
        api_key, version = request.__api_key__, request.__version__
        writer.write(encode_request(api_key, version, correlation_id, self._client_id(), request))
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        frame = await reader.readexactly(size)
        response_cls: Any = response_class(api_key, version)
        header, start = entity_reader(response_cls.__header_schema__)(frame, 0)
        if header.correlation_id != correlation_id:
            raise ValueError(f"answered correlation id {header.correlation_id}, sent {correlation_id}")
        return entity_reader(response_cls)(frame, start)[0]

    async def _stream(self, node: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        stream = self._streams.get(node)
        if stream is not None:
            return stream
        info = next((n for n in self.member.view.nodes if n.node_id == node), None)
        address = None if info is None or self.listener is None else endpoint_for(info, self.listener)
        if address is None:
            raise OSError(f"node {node} is not registered now")
        stream = await asyncio.open_connection(*address)
        self._streams[node] = stream
        return stream

    def _drop(self, node: int) -> None:
        stream = self._streams.pop(node, None)
        if stream is not None:
            stream[1].close()

    def close(self) -> None:
        for node in list(self._streams):
            self._drop(node)
