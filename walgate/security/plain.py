"""SASL PLAIN (RFC 4616): ``[authzid] NUL authcid NUL passwd`` in UTF-8.

As Kafka's ``PlainSaslServer``: the user name and password must not be empty, and an authorization id, when given,
must be the user name itself. The password is checked by the caller against the user's stored SCRAM credential
(:func:`walgate.security.scram.verify_password`): walgate never stores it.
"""

from __future__ import annotations

__all__ = ["PlainError", "parse_plain"]


class PlainError(Exception):
    """A malformed PLAIN message; the message names no secret."""


def parse_plain(message: bytes) -> tuple[str, str]:
    """(user, password) of a PLAIN message."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("the PLAIN message is not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise PlainError("malformed PLAIN message: expected authzid NUL user NUL password")
    authzid, user, password = parts
    if not user or not password:
        raise PlainError("the PLAIN user name and password must not be empty")
    if authzid and authzid != user:
        raise PlainError("the authorization id must be the user name")
    return user, password
