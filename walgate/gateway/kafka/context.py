"""Who sent the request being served, and what it is: the :class:`RequestContext` every Kafka handler is given.

The connection loop (:mod:`walgate.gateway.kafka.server`) builds one per request from its connection (client address,
the listener it came through, the principal it has authenticated as, its SASL state, its Produce sequence gaps) and
the request's header, and passes it to the handler, which passes it on to what needs it (the ACL checks of
:mod:`.access`, client quotas, the audit log, the address Metadata names this node by). It is immutable: a request is
served as the principal its connection had when the request arrived; a SaslAuthenticate changes the principal of the
requests after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from walgate.gateway.listeners import PLAINTEXT, ListenerInfo

if TYPE_CHECKING:
    from walgate.gateway.kafka.produce_gaps import ProduceGaps
    from walgate.gateway.kafka.sasl import Authentication

__all__ = ["ANONYMOUS", "RequestContext"]

ANONYMOUS = "User:ANONYMOUS"
"""Kafka's principal of a connection that did not authenticate."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request's identity and header: ``principal`` (``User:name``, Kafka's form), ``peer`` (the client's address,
    as ACLs match hosts), ``listener`` (name and security protocol), the header's ``client_id``, ``api_key``,
    ``api_version`` and ``correlation_id``, the connection's SASL state (None: not a SASL listener) and its
    Produce sequence gaps (:mod:`walgate.gateway.kafka.produce_gaps`; None: a request served outside a connection)."""

    principal: str = ANONYMOUS
    peer: str = "127.0.0.1"
    listener: ListenerInfo = PLAINTEXT
    client_id: str | None = None
    api_key: int = -1
    api_version: int = 0
    correlation_id: int = 0
    authentication: Authentication | None = None
    produce_gaps: ProduceGaps | None = None

    @classmethod
    def of(cls, header: Any, *, principal: str = ANONYMOUS, peer: str = "127.0.0.1", listener: ListenerInfo = PLAINTEXT,
           authentication: Authentication | None = None, produce_gaps: ProduceGaps | None = None) -> RequestContext:
        """The context of a request with ``header`` (a parsed request header) on a connection with this identity."""
        return cls(principal, peer, listener, header.client_id, header.api_key, header.api_version,
                   header.correlation_id, authentication, produce_gaps)
