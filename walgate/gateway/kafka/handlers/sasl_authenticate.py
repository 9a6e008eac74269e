"""SaslAuthenticate (key 36) v0–v2: one token of the connection's SASL exchange (after a v1 SaslHandshake).

The answer carries the server's token; a failure is SASL_AUTHENTICATION_FAILED with a message that never tells
whether the user exists, sent ``FAILED_AUTHENTICATION_DELAY`` after the request arrived, and the connection closes
after it (a refused OAUTHBEARER token is first answered with error NONE and RFC 7628's challenge, and fails on the
client's next token).
v1+ answers announce the session lifetime (KIP-368: ``connections.max.reauth.ms``, bounded by an OAUTHBEARER token's
expiry) once the exchange completes. Without a SASL exchange under way (a listener without SASL): ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.sasl import SaslFailed
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)

API_KEY, MIN_VERSION, MAX_VERSION = 36, 0, 2


async def handle(broker: Broker, ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    auth = ctx.authentication
    if auth is None or auth.mechanism is None:
        if auth is not None and auth.settings is not None:  # a SASL listener's state broken: closed, as Kafka
            auth.close = True
        return {"error_code": ErrorCode.illegal_sasl_state, "error_message": "No SASL exchange is under way",
                "auth_bytes": b"", "session_lifetime": 0}
    try:
        token, done = await auth.step(broker, request.auth_bytes)
    except SaslFailed as exc:
        await auth.pause_after_failure()
        return {"error_code": ErrorCode.sasl_authentication_failed, "error_message": str(exc), "auth_bytes": b"",
                "session_lifetime": 0}
    except Exception as exc:  # the store could not be read: answered (common's table), then closed
        auth.close = True
        auth.failure = f"the user store failed ({type(exc).__name__})"
        return {"error_code": error_of(exc), "error_message": "Authentication failed: the user store failed",
                "auth_bytes": b"", "session_lifetime": 0}
    return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": token,
            "session_lifetime": auth.session_lifetime_ms if done else 0}
