"""The signature of requests between cluster nodes (walgate.security.node_token): valid only with the cluster's
token, for exactly the request signed and the node it was sent to, within the time window; headers that cannot be a
node's are refused before the body is read, with a reason and never an exception."""

from __future__ import annotations

import dataclasses

from walgate.security.node_token import WINDOW_MS, Signed, header_refusal, new_token, refusal, signature

NOW = 1_800_000_000_000
SIGNED = Signed(2, "POST", "/rest/sql/f", {"db": "f", "precision": "ms"}, "1;0,2", "User:alice", "10.1.2.3", NOW,
                b"INSERT INTO f.t1 VALUES (now, 1)")


def test_a_signature_is_valid_with_the_token_it_was_made_with_and_the_one_before_it_kept() -> None:
    token, old = new_token(), new_token()
    assert token != old and len(token) >= 43
    given = signature(token, SIGNED)
    assert refusal([token], given, SIGNED, NOW) is None
    assert refusal([old, token], given, SIGNED, NOW + WINDOW_MS) is None
    assert refusal([old], given, SIGNED, NOW) == "its signature is not one of this cluster's nodes"
    assert refusal([], given, SIGNED, NOW) is not None


def test_every_field_signed_changes_the_signature() -> None:
    token = new_token()
    given = signature(token, SIGNED)
    changes = {"node": 3, "method": "GET", "path": "/rest/sql", "query": {"db": "g", "precision": "ms"},
               "forwarded": "1;0", "principal": "User:root", "host": "127.0.0.1", "time_ms": NOW + 1,
               "body": b"INSERT INTO f.t1 VALUES (now, 2)"}
    for name, value in changes.items():
        forged = dataclasses.replace(SIGNED, **{name: value})
        assert refusal([token], given, forged, NOW) is not None, name
    # fields cannot be shifted into one another: ("a", "bc") and ("ab", "c") sign different bytes
    assert dataclasses.replace(SIGNED, principal="User:a", host="b").message() != \
        dataclasses.replace(SIGNED, principal="User:ab", host="").message()


def test_query_parameters_cannot_be_shifted_into_one_another() -> None:
    """Keys and values are signed apart: db "x=y" is not key "db=x" with value "y", and a parameter moved into the
    next one's key is not the same query either."""
    def message(query: dict[str, str]) -> bytes:
        return dataclasses.replace(SIGNED, query=query).message()

    assert message({"db": "x=y"}) != message({"db=x": "y"})
    assert message({"a": "b", "c": "d"}) != message({"a": "b=c", "": "d"})


def test_a_request_signed_too_long_ago_or_ahead_is_refused() -> None:
    token = new_token()
    given = signature(token, SIGNED)
    for now in (NOW + WINDOW_MS + 1, NOW - WINDOW_MS - 1):
        why = refusal([token], given, SIGNED, now)
        assert why is not None and "from this node's clock" in why


def test_headers_that_cannot_be_a_nodes_are_refused_with_a_reason_never_an_exception() -> None:
    """A non-ASCII signature (hmac.compare_digest's TypeError before), a time of thousands of digits (int()'s
    ValueError) or of non-ASCII digits, a principal that is no user: each refused by the headers alone."""
    token = new_token()
    given = signature(token, SIGNED)
    assert header_refusal(str(NOW), given, "User:alice", NOW) is None
    for time_text, sig, principal in (("9" * 5000, given, "User:alice"), ("²", given, "User:alice"),
                                      ("", given, "User:alice"), (str(NOW), "é" * 64, "User:alice"),
                                      (str(NOW), given.upper(), "User:alice"), (str(NOW), given[:-1], "User:alice"),
                                      (str(NOW), given, "alice"), (str(NOW), given, "User:")):
        assert header_refusal(time_text, sig, principal, NOW) is not None, (time_text[:10], sig, principal)
    assert refusal([token], "é" * 64, SIGNED, NOW) == "its X-Walgate-Signature is not 64 hex digits"
