"""SCRAM (RFC 5802/7677) and PLAIN (RFC 4616) server sides, and principals: the RFC's test vector, a real client (scramp) for both
hash sizes, and every refusal, none of which names a secret or tells whether a user exists."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from scramp import ScramClient

from walgate.security.plain import PlainError, parse_plain
from walgate.security.principals import ROOT_PRINCIPAL, super_principals, user_principal
from walgate.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramError,
    ScramExchange,
    credential_from_password,
    credential_from_salted_password,
    mechanism_name,
    mechanism_type,
    mock_credential,
    verify_password,
)

KEY = b"k" * 32


def test_rfc7677_example_exchange():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = credential_from_password("SCRAM-SHA-256", "pencil", salt, 4096)
    exchange = ScramExchange("SCRAM-SHA-256", server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    assert exchange.client_first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == "user"
    assert exchange.server_first(credential) == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                                 b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
             b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert exchange.client_final(final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _exchange(mechanism: str, user: str, password: str, stored_password: str | None) -> bytes:
    client = ScramClient([mechanism], user, password)
    server = ScramExchange(mechanism)
    assert server.client_first(client.get_client_first().encode()) == user
    if stored_password is None:  # no such user: its mock credential
        first = server.server_first(mock_credential(KEY, user, [], mechanism), known=False)
    else:
        first = server.server_first(credential_from_password(mechanism, stored_password))
    client.set_server_first(first.decode())
    answer = server.client_final(client.get_client_final().encode())
    client.set_server_final(answer.decode())  # the client checks the server's signature too
    return answer


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_real_client_authenticates_with_the_right_password_only(mechanism: str):
    assert _exchange(mechanism, "alice", "wonderland", "wonderland").startswith(b"v=")
    with pytest.raises(ScramError, match="^invalid credentials$"):
        _exchange(mechanism, "alice", "guess", "wonderland")
    with pytest.raises(ScramError, match="^invalid credentials$"):  # an unknown user fails the same way, at the end
        _exchange(mechanism, "nobody", "guess", None)


def test_an_unknown_users_server_first_looks_like_a_known_one():
    one, two = ScramExchange("SCRAM-SHA-512"), ScramExchange("SCRAM-SHA-512")
    one.client_first(b"n,,n=ghost,r=abc")
    two.client_first(b"n,,n=ghost,r=abc")
    model = {"SCRAM-SHA-512": credential_from_password("SCRAM-SHA-512", "pw", iterations=8192)}
    first = one.server_first(mock_credential(KEY, "ghost", [model], "SCRAM-SHA-512"), known=False).split(b",")
    again = two.server_first(mock_credential(KEY, "ghost", [model], "SCRAM-SHA-512"), known=False).split(b",")
    assert first[1:] == again[1:] and first[2] == b"i=8192"  # the same salt every time, as a stored one would be
    assert len(base64.b64decode(first[1][2:])) == 16


@pytest.mark.parametrize(("message", "reason"), [
    (b"p=tls-unique,,n=u,r=x", "channel binding"),
    (b"n,,n=u,r=x,tokenauth=true", "tokenauth"),
    (b"n,,n=u,r=x,m=ext", "mandatory"),
    (b"n,a=other,n=u,r=x", "authorization id"),
    (b"n,,n=,r=x", "empty user"),
    (b"n,,n=a=2Xb,r=x", "encoding"),
    (b"n,,r=x", "malformed"),
    (b"garbage", "malformed"),
    (b"\xff\xfe", "UTF-8"),
])
def test_bad_client_first_messages_are_refused(message: bytes, reason: str):
    with pytest.raises(ScramError, match=reason):
        ScramExchange("SCRAM-SHA-256").client_first(message)


def test_user_names_are_unescaped_and_an_authzid_of_the_user_itself_is_accepted():
    assert ScramExchange("SCRAM-SHA-256").client_first(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=x") == "a,b=c"


@pytest.mark.parametrize("tamper", ["nonce", "binding", "proof", "garbage"])
def test_a_tampered_client_final_is_refused(tamper: str):
    client = ScramClient(["SCRAM-SHA-256"], "bob", "pw")
    server = ScramExchange("SCRAM-SHA-256")
    server.client_first(client.get_client_first().encode())
    client.set_server_first(server.server_first(credential_from_password("SCRAM-SHA-256", "pw")).decode())
    final = client.get_client_final()
    c, r, p = final.split(",")
    bad = {"nonce": f"{c},r=other,{p}", "binding": f"c=eSws,{r},{p}", "proof": f"{c},{r},p=AAAA",
           "garbage": "nonsense"}[tamper]
    with pytest.raises(ScramError):
        server.client_final(bad.encode())


def test_credentials_never_show_their_keys_and_verify_passwords():
    credential = credential_from_password("SCRAM-SHA-512", "s3cret")
    assert "stored_key" not in repr(credential) and credential.iterations == MIN_ITERATIONS == 4096
    assert verify_password(credential, "s3cret") and not verify_password(credential, "s3cret ")
    salted = bytes(range(64))
    assert credential_from_salted_password("SCRAM-SHA-512", salted, b"salt", MAX_ITERATIONS).iterations == 16384


def test_kafka_mechanism_types():
    assert (mechanism_type("SCRAM-SHA-256"), mechanism_type("SCRAM-SHA-512")) == (1, 2)
    assert (mechanism_name(1), mechanism_name(2), mechanism_name(0), mechanism_name(3)) == (
        "SCRAM-SHA-256", "SCRAM-SHA-512", None, None)


def test_plain_messages():
    assert parse_plain(b"\0alice\0pw") == ("alice", "pw")
    assert parse_plain(b"alice\0alice\0pw") == ("alice", "pw")
    for bad, reason in [(b"bob\0alice\0pw", "authorization id"), (b"\0\0pw", "empty"), (b"\0alice\0", "empty"),
                        (b"alice\0pw", "malformed"), (b"\0a\0b\0c", "malformed"), (b"\0\xff\0pw", "UTF-8")]:
        with pytest.raises(PlainError, match=reason) as refused:
            parse_plain(bad)
        assert "pw" not in str(refused.value)


def test_the_client_nonce_sent_twice_by_librdkafka_before_2_6_1_is_accepted_only_with_the_servers_nonce():
    def final(nonce_of: str) -> bytes:
        """A client-final message as librdkafka builds it (RFC 5802's math, written out), with the nonce it echoes."""
        server = ScramExchange("SCRAM-SHA-512")
        first_bare = "n=old,r=cl13nt"
        server.client_first(f"n,,{first_bare}".encode())
        server_first = server.server_first(credential_from_password("SCRAM-SHA-512", "pw", b"salt")).decode()
        nonce = server_first.split(",")[0][2:]
        # librdkafka < 2.6.1 echoes r=<client nonce><client nonce + server nonce>; a wrong client only its own nonce
        without_proof = f"c=biws,r={'cl13nt' + nonce if nonce_of == 'librdkafka' else 'cl13nt'}"
        salted = hashlib.pbkdf2_hmac("sha512", b"pw", b"salt", 4096)
        client_key = hmac.new(salted, b"Client Key", hashlib.sha512).digest()
        signature = hmac.new(hashlib.sha512(client_key).digest(),
                             f"{first_bare},{server_first},{without_proof}".encode(), hashlib.sha512).digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
        return server.client_final(f"{without_proof},p={proof}".encode())

    assert final("librdkafka").startswith(b"v=")
    with pytest.raises(ScramError, match="nonce"):
        final("client only")


def test_principals():
    assert user_principal("alice") == "User:alice"
    assert super_principals(["User:admin"]) == {"User:admin", "User:root"} and ROOT_PRINCIPAL in super_principals(())
