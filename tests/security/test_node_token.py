"""The signature of requests between cluster nodes (walgate.security.node_token): valid only with the cluster's
token, for exactly the request signed, within the time window."""

from __future__ import annotations

import dataclasses

from walgate.security.node_token import WINDOW_MS, Signed, new_token, refusal, signature

NOW = 1_800_000_000_000
SIGNED = Signed("POST", "/rest/sql/f", {"db": "f", "precision": "ms"}, "1;0,2", "User:alice", "10.1.2.3", NOW,
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
    changes = {"method": "GET", "path": "/rest/sql", "query": {"db": "g", "precision": "ms"}, "forwarded": "1;0",
               "principal": "User:root", "host": "127.0.0.1", "time_ms": NOW + 1, "body": b"INSERT INTO f.t1 VALUES (now, 2)"}
    for name, value in changes.items():
        forged = dataclasses.replace(SIGNED, **{name: value})
        assert refusal([token], given, forged, NOW) is not None, name
    # fields cannot be shifted into one another: ("a", "bc") and ("ab", "c") sign different bytes
    assert dataclasses.replace(SIGNED, principal="User:a", host="b").message() != \
        dataclasses.replace(SIGNED, principal="User:ab", host="").message()


def test_a_request_signed_too_long_ago_or_ahead_is_refused() -> None:
    token = new_token()
    given = signature(token, SIGNED)
    for now in (NOW + WINDOW_MS + 1, NOW - WINDOW_MS - 1):
        why = refusal([token], given, SIGNED, now)
        assert why is not None and "from this node's clock" in why
