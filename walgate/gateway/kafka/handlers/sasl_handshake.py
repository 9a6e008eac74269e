"""SaslHandshake (key 17) v0–v1: choose the SASL mechanism of the connection's authentication.

On a SASL listener the connection's :class:`~walgate.gateway.kafka.sasl.Authentication` starts the exchange; an
unknown or disabled mechanism gets UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection closes (as
Kafka's ``SaslServerAuthenticator``). v1 clients then send SaslAuthenticate; after v0 the tokens come as bare frames.
On a listener without SASL the answer is ILLEGAL_SASL_STATE, as Kafka's ``KafkaApis`` answers it, except on a
cluster node for SCRAM-SHA-256: the exchange only another node of the cluster passes
(:mod:`walgate.gateway.kafka.sasl`, "Cluster nodes").
"""

from __future__ import annotations

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.security.node_token import NODE_MECHANISM
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 17, 0, 1


async def handle(broker: Broker, ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    auth = ctx.authentication
    node_only = auth is not None and auth.settings is None  # a listener without SASL
    if auth is None or node_only and (broker.cluster is None or request.mechanism != NODE_MECHANISM):
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    mechanisms = list(auth.mechanisms)
    if not auth.handshake(request.mechanism, ctx.api_version):
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": mechanisms}
    return {"error_code": ErrorCode.none, "mechanisms": mechanisms}
