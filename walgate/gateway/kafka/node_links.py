"""Kafka requests from this node to the other nodes of its cluster (docs/cluster.md, "Transaction coordinators").

A transaction coordinator sends WriteTxnMarkers (api 27) to the node of each partition of a transaction, and a
partition's node sends AddPartitionsToTxn v5 (the brokers' form) to the coordinator of a transactional Produce, as
Kafka's brokers do between themselves. The requests are kio's classes, generated from Kafka's message JSONs, framed by
:func:`walgate.wire.protocol.encode_request`; the other node decodes them as any client's.

A request goes to the endpoint the other node advertises on the name of this node's ``inter.broker.listener.name``
listener (default: its first), whatever its security protocol: TLS (verified with ``ssl.truststore.*``,
:func:`walgate.gateway.tls.node_client_context`) on SSL and SASL_SSL listeners; a node advertising no endpoint of
that name is unreachable (:class:`NodeUnreachable`), never reached through another listener. Each new connection
first authenticates as this node with SASL SCRAM-SHA-256 and the credential derived from the cluster's node token
(:mod:`walgate.security.node_token`), on any listener (a listener without SASL takes it from nodes only:
:mod:`walgate.gateway.kafka.sasl`); the client id, ``walgate-node-<id>``, is no credential.

One connection per node, one request at a time on it; a call is bounded by ``timeout_s`` from its start, including
its wait for the connection (Kafka's ``request.timeout.ms``), so that a stalled node makes each caller wait at most
that long, never behind the others; a connection that fails or times out is dropped and made again by the next
request. The bound is ``asyncio.timeout``, in the caller's own task: Python 3.11's ``asyncio.wait_for`` runs the call
in a task of its own and returns its answer when the caller is cancelled in the loop iteration that answer completed
in (cpython gh-86296), so a cancelled replica fetcher fetched on and its replica manager's stop never ended.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Any

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.serial import entity_reader

from walgate.cluster.model import endpoint_for
from walgate.gateway.cluster_member import ClusterMember
from walgate.security.node_token import NODE_MECHANISM, node_password, node_user
from walgate.security.scram import ScramClient
from walgate.wire.errors import ErrorCode
from walgate.wire.internal import VERSIONS as INTERNAL_VERSIONS
from walgate.wire.internal import WAL_FETCH
from walgate.wire.protocol import encode_request, response_class

__all__ = ["NodeLinks", "NodeUnreachable"]

_Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class NodeUnreachable(Exception):
    """A request to another node got no answer (not registered now, no endpoint, connection, authentication or
    timeout)."""


class NodeLinks:
    """This cluster node's connections to the others (see the module docstring)."""

    def __init__(self, member: ClusterMember, listener: str, tls: ssl.SSLContext | None,
                 timeout_s: float = 10.0) -> None:
        """``listener``: the name of the listener nodes reach each other on; ``tls``: the client context when it is
        SSL or SASL_SSL, else None."""
        self.member = member
        self.listener = listener
        self.tls = tls
        self.timeout_s = timeout_s
        self._streams: dict[int, _Stream] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._correlation_id = 0

    def version(self, node: int, api_key: int) -> int:
        """The version of internal API ``api_key`` to send node ``node``: the highest both it (as its registration
        advertises, :meth:`NodeInfo.internal_version <walgate.cluster.model.NodeInfo.internal_version>`: for a
        node of an older release, or one not registered now, 0 of WalFetch and -1 of any other, which it does not
        answer) and this node answer."""
        info = next((n for n in self.member.view.nodes if n.node_id == node), None)
        absent = 0 if api_key == WAL_FETCH else -1
        return min(INTERNAL_VERSIONS[api_key][1], absent if info is None else info.internal_version(api_key))

    async def call(self, node: int, request: Any) -> Any:
        """Send kio request ``request`` to node ``node``; its decoded response. Raises :class:`NodeUnreachable`, whatever
        went wrong (no endpoint, connection refused or cut, authentication refused, timeout, an answer that does not
        decode)."""
        try:
            async with asyncio.timeout(self.timeout_s):  # (not wait_for: the module docstring)
                return await self._locked(node, request)
        except Exception as e:  # noqa: BLE001 - refused, cut, timed out or not understood: no answer, retried
            what = "no answer" if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
            raise NodeUnreachable(f"node {node}: {what}") from None

    async def _locked(self, node: int, request: Any) -> Any:
        async with self._locks.setdefault(node, asyncio.Lock()):
            try:
                stream = self._streams.get(node) or await self._connect(node)
                return await self._exchange(stream, request)
            except BaseException:  # including the cancellation of a timeout: the stream's state is unknown
                self._drop(node)
                raise

    async def _exchange(self, stream: _Stream, request: Any) -> Any:
        reader, writer = stream
        self._correlation_id += 1
        correlation_id = self._correlation_id
        api_key, version = request.__api_key__, request.__version__
        writer.write(encode_request(api_key, version, correlation_id, node_user(self.member.node_id), request))
        await writer.drain()
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        frame = await reader.readexactly(size)
        response_cls: Any = response_class(api_key, version)
        header, start = entity_reader(response_cls.__header_schema__)(frame, 0)
        if header.correlation_id != correlation_id:
            raise ValueError(f"answered correlation id {header.correlation_id}, sent {correlation_id}")
        return entity_reader(response_cls)(frame, start)[0]

    async def _connect(self, node: int) -> _Stream:
        """A new connection to ``node``, authenticated as this node."""
        info = next((n for n in self.member.view.nodes if n.node_id == node), None)
        address = None if info is None else endpoint_for(info, self.listener, exact=True)
        if address is None:
            raise OSError(f"node {node} is not registered now or advertises no {self.listener} listener")
        token = self.member.tokens.signing()
        stream = await asyncio.open_connection(*address, ssl=self.tls)
        self._streams[node] = stream
        user = node_user(self.member.node_id)
        handshake: SaslHandshakeResponse = await self._exchange(stream, SaslHandshakeRequest(mechanism=NODE_MECHANISM))
        if handshake.error_code != ErrorCode.none:
            raise PermissionError(f"SaslHandshake {NODE_MECHANISM} answered error {int(handshake.error_code)}")
        scram = ScramClient(NODE_MECHANISM, user, node_password(token, user))
        first = await self._authenticate(stream, scram.first())
        scram.check(await self._authenticate(stream, scram.final(first)))
        return stream

    async def _authenticate(self, stream: _Stream, token: bytes) -> bytes:
        answer: SaslAuthenticateResponse = await self._exchange(stream, SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code != ErrorCode.none:
            raise PermissionError(f"node authentication refused: {answer.error_message}")
        return answer.auth_bytes

    def _drop(self, node: int) -> None:
        stream = self._streams.pop(node, None)
        if stream is not None:
            stream[1].close()

    def close(self) -> None:
        for node in list(self._streams):
            self._drop(node)
