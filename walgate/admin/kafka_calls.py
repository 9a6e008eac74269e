"""Kafka requests that confluent-kafka's AdminClient does not make: share groups' administration (KIP-932:
ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, and ListGroups with
a type filter) and replica moves (KIP-455: AlterPartitionReassignments, ListPartitionReassignments). One blocking connection per broker, requests framed by :func:`walgate.wire.protocol.encode_request`
and responses decoded with kio's serialisers (generated from Kafka's message JSONs), so they work against any broker
that has the APIs.

The group's coordinator is found with FindCoordinator (v4, as Kafka 4's clients). Listeners: PLAINTEXT and SSL
(``security.protocol``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``,
``enable.ssl.certificate.verification``, ``ssl.endpoint.identification.algorithm`` of ``--command-config`` / ``-X``);
a SASL listener is refused as a usage error (the other admin commands, through librdkafka, support it). Every
request is bounded by the command's ``--timeout``.
"""

from __future__ import annotations

import socket
import ssl
import struct
from typing import Any

from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v4.response import FindCoordinatorResponse
from kio.serial import entity_reader
from kio.static.primitive import i8

from walgate.admin.client import AdminError, UsageError
from walgate.wire.protocol import encode_request, response_class

__all__ = ["KafkaCalls"]

_GROUP_KEY = i8(0)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"bad broker address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class KafkaCalls:
    """Requests to the brokers of ``bootstrap`` (the first address of ``--bootstrap-server``) with the client
    settings ``settings`` (see the module docstring)."""

    def __init__(self, bootstrap: str, settings: dict[str, Any], timeout: float) -> None:
        self._bootstrap = _split(bootstrap.split(",")[0])
        self._timeout = timeout
        self._client_id = str(settings.get("client.id", "walgate-cli"))
        protocol = str(settings.get("security.protocol", "plaintext")).lower()
        if protocol.startswith("sasl"):
            raise UsageError("share-group and reassign commands do not support SASL listeners yet: use a PLAINTEXT or "
                             "SSL one")
        self._tls: ssl.SSLContext | None = None
        if protocol == "ssl":
            context = ssl.create_default_context(cafile=settings.get("ssl.ca.location"))
            if settings.get("ssl.certificate.location"):
                context.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"))
            if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
                context.check_hostname = False
            if str(settings.get("enable.ssl.certificate.verification", "true")).lower() == "false":
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            self._tls = context
        elif protocol != "plaintext":
            raise UsageError(f"unknown security.protocol {protocol!r}")
        self._sockets: dict[tuple[str, int], socket.socket] = {}
        self._correlation_id = 0

    def close(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def __enter__(self) -> KafkaCalls:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _socket(self, address: tuple[str, int]) -> socket.socket:
        sock = self._sockets.get(address)
        if sock is None:
            try:
                sock = socket.create_connection(address, timeout=self._timeout)
                if self._tls is not None:
                    sock = self._tls.wrap_socket(sock, server_hostname=address[0])
            except (OSError, ssl.SSLError) as e:
                raise AdminError(f"cannot connect to {address[0]}:{address[1]}: {e}") from None
            self._sockets[address] = sock
        return sock

    def _read(self, sock: socket.socket, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            data += chunk
        return bytes(data)

    def call(self, request: Any, address: tuple[str, int] | None = None) -> Any:
        """Send kio request ``request`` to ``address`` (the bootstrap broker by default); its decoded response."""
        address = address or self._bootstrap
        self._correlation_id += 1
        api_key, version = request.__api_key__, request.__version__
        frame = encode_request(api_key, version, self._correlation_id, self._client_id, request)
        response_cls: Any = response_class(api_key, version)
        try:
            sock = self._socket(address)
            sock.sendall(frame)
            frame = self._read(sock, struct.unpack(">i", self._read(sock, 4))[0])
        except (OSError, ConnectionError) as e:
            self._sockets.pop(address, None)
            what = "no answer" if isinstance(e, TimeoutError) else str(e)
            raise AdminError(f"{address[0]}:{address[1]}: {what}") from None
        header, start = entity_reader(response_cls.__header_schema__)(frame, 0)
        if header.correlation_id != self._correlation_id:
            raise AdminError(f"{address[0]}:{address[1]}: answered another request")
        return entity_reader(response_cls)(frame, start)[0]

    def coordinator(self, group: str) -> tuple[str, int]:
        """The address of ``group``'s coordinator (FindCoordinator)."""
        answer: FindCoordinatorResponse = self.call(FindCoordinatorRequest(key_type=_GROUP_KEY,
                                                                           coordinator_keys=(group,)))
        [found] = answer.coordinators
        if found.error_code != 0:
            raise AdminError(f"cannot find the coordinator of group '{group}': {found.error_code.name.upper()}")
        return found.host, found.port
