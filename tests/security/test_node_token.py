"""The signature of requests between cluster nodes (walgate.security.node_token): valid only with the cluster's
token, for exactly the request signed and the node it was sent to, within the time window; headers that cannot be a
node's are refused before the body is read, with a reason and never an exception; and the SCRAM credential a node
authenticates to another's Kafka listener with: only the holder of the token passes, checked with an independent
SCRAM client (scramp) and with the one the nodes use (walgate.security.scram.ScramClient)."""

from __future__ import annotations

import dataclasses

import pytest
import scramp

from walgate.security.node_token import (
    NODE_MECHANISM,
    WINDOW_MS,
    Signed,
    head_refusal,
    head_signature,
    header_refusal,
    new_token,
    node_credential,
    node_of_user,
    node_password,
    node_user,
    refusal,
    signature,
)
from walgate.security.scram import ScramClient, ScramError, ScramExchange

NOW = 1_800_000_000_000
SIGNED = Signed(2, "POST", "/rest/sql/f", {"db": "f", "precision": "ms"}, "1;0,2", "User:alice", "10.1.2.3", NOW,
                b"INSERT INTO f.t1 VALUES (now, 1)", 41)


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
               "body": b"INSERT INTO f.t1 VALUES (now, 2)", "catalog_seq": 42}
    head = head_signature(token, SIGNED)
    for name, value in changes.items():
        forged = dataclasses.replace(SIGNED, **{name: value})
        assert refusal([token], given, forged, NOW) is not None, name
        assert (head_refusal([token], head, forged, NOW) is None) == (name == "body"), name
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


def _exchange(client: ScramClient, token: str) -> None:
    """A SCRAM exchange of ``client`` with a server holding node ``client``'s credential made from ``token``."""
    server = ScramExchange(NODE_MECHANISM)
    user = server.client_first(client.first())
    client.check(server.client_final(client.final(server.server_first(node_credential(token, user)))))


def test_node_users_are_reserved_names_with_a_node_id() -> None:
    assert node_user(7) == "walgate-node-7" and node_of_user("walgate-node-7") == 7
    for other in ("walgate-node-", "walgate-node-x", "walgate-node-1/abc", "walgate-node-٣", "alice", "walgate-node-1 "):
        assert node_of_user(other) is None, other


def test_only_the_holder_of_the_node_token_authenticates_as_a_node() -> None:
    token, other = new_token(), new_token()
    user = node_user(2)
    assert node_password(token, user) not in (node_password(other, user), node_password(token, node_user(3)), token)
    _exchange(ScramClient(NODE_MECHANISM, user, node_password(token, user)), token)
    for wrong in (node_password(other, user), node_password(token, node_user(3)), token, ""):
        with pytest.raises(ScramError, match="invalid credentials"):
            _exchange(ScramClient(NODE_MECHANISM, user, wrong), token)
    # an independent client (scramp) with the derived password passes too: the credential is plain RFC 7677
    client = scramp.ScramClient([NODE_MECHANISM], user, node_password(token, user))
    server = ScramExchange(NODE_MECHANISM)
    server.client_first(client.get_client_first().encode())
    client.set_server_first(server.server_first(node_credential(token, user)).decode())
    client.set_server_final(server.client_final(client.get_client_final().encode()).decode())


def test_a_node_refuses_a_server_that_does_not_hold_the_token() -> None:
    """The server's signature proves it knows the credential: a node does not take a forged endpoint for a node."""
    token, other = new_token(), new_token()
    user = node_user(1)
    client = ScramClient(NODE_MECHANISM, user, node_password(token, user))
    server = ScramExchange(NODE_MECHANISM)
    server.client_first(client.first())
    server_first = server.server_first(node_credential(other, user))
    final = client.final(server_first)
    with pytest.raises(ScramError):
        server.client_final(final)  # the proof made with the right token fails against the wrong credential
    with pytest.raises(ScramError, match="signature"):
        client.check(b"v=" + b"A" * 44)


def test_the_head_signature_is_checked_without_the_body_and_is_never_the_body_signature() -> None:
    """What a node checks before it reads a body (reviewer finding 8: the form of the headers alone let anyone make
    a node read and hash 16 MiB): valid only with a token, whatever the body; never the full signature (which could
    otherwise be replayed with another body)."""
    token, other = new_token(), new_token()
    head = head_signature(token, SIGNED)
    assert head_refusal([other, token], head, dataclasses.replace(SIGNED, body=b""), NOW) is None
    assert head_refusal([other], head, SIGNED, NOW) == "its X-Walgate-Head-Signature is not one of this cluster's nodes"
    assert head != signature(token, SIGNED) and head != signature(token, dataclasses.replace(SIGNED, body=b""))
    assert refusal([token], head, SIGNED, NOW) is not None and head_refusal([token], signature(token, SIGNED),
                                                                             SIGNED, NOW) is not None
    assert head_refusal([token], "0" * 63, SIGNED, NOW) == "its X-Walgate-Head-Signature is not 64 hex digits"
    for seq in ("", "-1", "1" * 19, "٣"):
        assert header_refusal(str(NOW), head, "User:alice", NOW, seq) == "its X-Walgate-Catalog-Seq is not a number"
