"""Kafka's listener settings: ``listeners``, ``advertised.listeners``, ``listener.security.protocol.map``.

A listener is ``NAME://host:port`` (``[v6addr]`` in brackets; an empty host binds every interface). Its name maps
to a security protocol through ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``; Kafka's default maps each
of the four protocol names to itself). Names are case-insensitive and kept upper-case; two listeners may not share
a name or a port. ``advertised.listeners`` names, per listener, the address Kafka clients are told (Metadata,
FindCoordinator, DescribeCluster); a listener it does not name advertises its own address.

Protected mode (``Config.insecure_listeners``) uses :func:`is_loopback`: a listener that does not authenticate its
clients may only bind a loopback address unless ``--allow-insecure`` is given.

Pure: strings in, frozen values out; :class:`ListenerError` explains a bad value.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PROTOCOL_MAP", "PLAINTEXT", "SECURITY_PROTOCOLS", "Listener", "ListenerError", "ListenerInfo", "is_loopback",
    "parse_advertised", "parse_listeners", "parse_protocol_map",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
_LISTENER = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9A-Fa-f:.%a-zA-Z]*\]|[^:\[\]/]*):(\d+)$")


class ListenerError(ValueError):
    """A listener setting is malformed or inconsistent."""


@dataclass(frozen=True)
class ListenerInfo:
    """What a connection knows of the listener it came through (each request's ``RequestContext.listener``)."""

    name: str  # upper-case, e.g. "SASL_SSL" or "INTERNAL"
    security_protocol: str  # one of SECURITY_PROTOCOLS

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


@dataclass(frozen=True)
class Listener:
    """One configured listener: where it binds and what it speaks."""

    info: ListenerInfo
    host: str  # "" = every interface
    port: int  # 0 = any free port

    @property
    def name(self) -> str:
        return self.info.name


PLAINTEXT = ListenerInfo("PLAINTEXT", "PLAINTEXT")
"""The listener of a node configured without ``listeners`` (``host:kafka_port``)."""


def parse_protocol_map(text: str) -> dict[str, str]:
    """``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL} (upper-case; each protocol one of :data:`SECURITY_PROTOCOLS`)."""
    result: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ListenerError(
                f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        if name in result:
            raise ListenerError(f"listener.security.protocol.map names {name} twice")
        result[name] = protocol
    return result


def _addresses(text: str, setting: str) -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` -> [(NAME, host, port)]; brackets removed from IPv6 hosts."""
    result = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _LISTENER.match(item)
        if match is None:
            raise ListenerError(f"{setting}: {item!r} is not NAME://host:port")
        name, host, port = match.group(1).upper(), match.group(2), int(match.group(3))
        if port > 65535:
            raise ListenerError(f"{setting}: port {port} of {item!r} is not in 0..65535")
        result.append((name, host.strip("[]"), port))
    names = [name for name, _, _ in result]
    if len(set(names)) != len(names):
        raise ListenerError(f"{setting}: each listener name may be used once, got {', '.join(names)}")
    return result


def parse_listeners(
    listeners: str, protocol_map: str, *, skip: frozenset[str] = frozenset()
) -> list[Listener]:
    """The listeners of ``listeners`` (Kafka's ``listeners`` value) whose names are not in ``skip`` (KRaft's
    ``controller.listener.names``), each with its protocol from ``protocol_map``."""
    protocols = parse_protocol_map(protocol_map)
    result = []
    for name, host, port in _addresses(listeners, "listeners"):
        if name in skip:
            continue
        protocol = protocols.get(name)
        if protocol is None:
            raise ListenerError(
                f"listener {name} is not in listener.security.protocol.map ({protocol_map}): name its protocol there"
            )
        result.append(Listener(ListenerInfo(name, protocol), host, port))
    if not result:
        raise ListenerError("listeners: no listener left to serve Kafka clients")
    ports = [listener.port for listener in result if listener.port]
    if len(set(ports)) != len(ports):
        raise ListenerError(f"listeners: two listeners on one port ({listeners})")
    return result


def parse_advertised(text: str, listeners: list[Listener]) -> dict[str, tuple[str, int]]:
    """``advertised.listeners`` -> {listener NAME: (host, port)}; each name must be a listener's, its host not
    empty nor ``0.0.0.0`` (Kafka's rule: clients cannot connect to it)."""
    known = {listener.name for listener in listeners}
    result = {}
    for name, host, port in _addresses(text, "advertised.listeners"):
        if name not in known:
            raise ListenerError(f"advertised.listeners names {name}, which is not in listeners")
        if host in ("", "0.0.0.0", "::"):
            raise ListenerError(f"advertised.listeners: {name} must name an address clients can reach, not {host!r}")
        result[name] = (host, port)
    return result


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` only accepts connections from this machine (``localhost`` counts, ``""`` not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False
