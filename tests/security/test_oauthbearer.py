"""OAUTHBEARER (walgate/security/oauthbearer.py, walgate/gateway/jwks.py): the client's message, signed JWTs against a
JWKS, and the RFC 7628 exchange, with keys made by cryptography and tokens signed by pyjwt (or by hand, for the
forgeries pyjwt refuses to make)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from walgate.gateway.config import Config, ConfigError
from walgate.gateway.jwks import JwksFile, jwks_path, oauthbearer_exchanges, token_settings
from walgate.security.oauthbearer import (
    INVALID_TOKEN,
    Jwks,
    OAuthBearerError,
    OAuthBearerExchange,
    TokenSettings,
    parse_initial_response,
    validate_token,
)

NOW = 1_800_000_000  # seconds
NOW_MS = NOW * 1000
ISSUER = "https://idp.example/realms/kafka"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
SETTINGS = TokenSettings(expected_issuer=ISSUER, expected_audience=("kafka", "walgate"))


def jwk(public: Any, kid: str, **extra: str) -> dict[str, Any]:
    kind = RSAAlgorithm if isinstance(public, rsa.RSAPublicKey) else ECAlgorithm
    return {**json.loads(kind.to_jwk(public)), "kid": kid, **extra}


JWKS_DOC = {"keys": [jwk(RSA_KEY.public_key(), "rsa1", use="sig"), jwk(EC_KEY.public_key(), "ec1"),
                     {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}, {"kty": "RSA", "kid": "broken", "n": "!!"},
                     jwk(OTHER_KEY.public_key(), "enc", use="enc")]}
KEYS = Jwks.from_json(json.dumps(JWKS_DOC))


def claims(**changes: Any) -> dict[str, Any]:
    base = {"sub": "alice", "iss": ISSUER, "aud": "kafka", "iat": NOW - 10, "exp": NOW + 300, "scope": "produce"}
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def token(alg: str = "RS256", kid: str | None = "rsa1", key: Any = RSA_KEY, **changes: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode(claims(**changes), key, algorithm=alg, headers=headers)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], secret: bytes | None) -> str:
    """A token signed by hand: HMAC-SHA256 with ``secret``, or unsigned (``alg: none``)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims()).encode())}"
    signature = b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()) if secret else ""
    return f"{signing_input}.{signature}"


def message(tok: str, authzid: str = "", **extensions: str) -> bytes:
    pairs = "".join(f"{k}={v}\x01" for k, v in extensions.items())
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {tok}\x01{pairs}\x01".encode()


def refused(tok: str, settings: TokenSettings = SETTINGS, now_ms: int = NOW_MS) -> str:
    with pytest.raises(OAuthBearerError) as caught:
        validate_token(tok, KEYS, settings, now_ms)
    assert tok not in str(caught.value)
    return str(caught.value)


def test_valid_rsa_and_ec_tokens_give_the_principal_and_the_session_end() -> None:
    valid = validate_token(token(), KEYS, SETTINGS, NOW_MS)
    assert (valid.principal, valid.expiry_ms, valid.issued_at_ms, valid.scopes) == \
        ("User:alice", (NOW + 300) * 1000, (NOW - 10) * 1000, frozenset({"produce"}))
    valid = validate_token(token("ES256", "ec1", EC_KEY, aud=["other", "walgate"], scope=["a", "b"]), KEYS, SETTINGS,
                           NOW_MS)
    assert valid.principal == "User:alice" and valid.scopes == {"a", "b"}
    assert validate_token(token(kid=None), KEYS, SETTINGS, NOW_MS).subject == "alice"  # the one RSA signing key
    assert validate_token(token("RS384"), KEYS, SETTINGS, NOW_MS).subject == "alice"
    assert validate_token(token("PS256"), KEYS, SETTINGS, NOW_MS).subject == "alice"


def test_only_rsa_and_ec_signature_keys_of_the_jwks_are_used() -> None:
    assert [(k.kid, k.family) for k in KEYS.keys] == [("rsa1", "RSA"), ("ec1", "EC")]
    for bad in (b"not json", b"[]", b'{"keys": 3}'):
        with pytest.raises(ValueError):
            Jwks.from_json(bad)
    pinned = Jwks.from_json(json.dumps({"keys": [jwk(RSA_KEY.public_key(), "rsa1", alg="RS512")]}))
    assert validate_token(token("RS512"), pinned, SETTINGS, NOW_MS).subject == "alice"
    with pytest.raises(OAuthBearerError, match="no key of the JWKS"):
        validate_token(token("RS256"), pinned, SETTINGS, NOW_MS)  # the JWK says RS512 only


def test_time_claims_with_clock_skew() -> None:
    assert "expired" in refused(token(exp=NOW - 31))
    assert validate_token(token(exp=NOW - 29), KEYS, SETTINGS, NOW_MS).subject == "alice"  # within 30 s of skew
    assert "expired" in refused(token(exp=NOW - 1), TokenSettings(ISSUER, ("kafka",), clock_skew_seconds=0))
    assert "not valid yet" in refused(token(nbf=NOW + 60))
    assert validate_token(token(nbf=NOW + 20), KEYS, SETTINGS, NOW_MS).subject == "alice"
    assert "no exp claim" in refused(token(exp=None))
    assert "no iat claim" in refused(token(iat=None))
    assert "not a number" in refused(token(exp="tomorrow"))


def test_issuer_audience_and_subject_are_checked() -> None:
    assert "Issuer" in refused(token(iss="https://evil.example"))
    assert "iss" in refused(token(iss=None))
    assert "Audience" in refused(token(aud="somebody-else"))
    assert "aud" in refused(token(aud=None))
    no_audience = TokenSettings(expected_issuer=None)
    assert "Audience" in refused(token(), no_audience)  # an aud while none is expected: jose4j's default
    assert validate_token(token(aud=None, iss="anyone"), KEYS, no_audience, NOW_MS).subject == "alice"
    assert "sub claim is missing" in refused(token(sub=None))
    assert "sub claim is missing" in refused(token(sub="   "))
    custom = TokenSettings(ISSUER, ("kafka",), scope_claim_name="scp", sub_claim_name="client_id")
    valid = validate_token(token(client_id="svc-orders", scp=["x"]), KEYS, custom, NOW_MS)
    assert valid.principal == "User:svc-orders" and valid.scopes == {"x"}
    assert "twice" in refused(token(scope=["a", "a"]))
    assert "empty or non-string" in refused(token(scope=["a", 3]))


def test_forgeries_are_refused() -> None:
    assert "no key of the JWKS" in refused(token(kid="unknown"))
    assert "no key of the JWKS" in refused(token(key=OTHER_KEY, kid="enc"))  # an encryption key signs nothing
    assert "Signature verification failed" in refused(token(key=OTHER_KEY))  # signed by a key not in the JWKS
    assert "not accepted" in refused(forged({"alg": "none", "typ": "JWT"}, None))
    pem = RSA_KEY.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert "not accepted" in refused(forged({"alg": "HS256", "kid": "rsa1"}, pem))  # the public key as HMAC secret
    assert "not accepted" in refused(forged({"alg": "HS256", "kid": "hmac"}, b"secret"))
    head, payload, signature = token().split(".")
    evil = json.loads(base64.urlsafe_b64decode(payload + "==")) | {"sub": "root"}
    assert "Signature verification failed" in refused(f"{head}.{b64(json.dumps(evil).encode())}.{signature}")
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    assert "Signature verification failed" in refused(f"{head}.{payload}.{flipped}")
    assert "malformed JWT" in refused("not.a.jwt")
    assert "malformed JWT" in refused("abc")
    assert "malformed JWT" in refused(forged({"alg": "RS256", "kid": 7}, b"x"))  # pyjwt refuses a kid not a string


def test_the_client_message_is_parsed_as_kafka_does() -> None:
    assert parse_initial_response(message("abc.def.ghi", traceId="42 x")) == ("abc.def.ghi", "", {"traceId": "42 x"})
    assert parse_initial_response(message("t0k3n", authzid="al=2Cice"))[1] == "al,ice"
    assert parse_initial_response(b"n,,\x01auth=bearer x\x01\x01")[0] == "x"  # the scheme in any case
    for bad in (b"", b"y,,\x01auth=Bearer x\x01\x01", b"n,,\x01auth=Bearer x\x01", b"n,,auth=Bearer x\x01\x01",
                b"n,,\x01\x01", b"n,,\x01auth=Basic x\x01\x01", b"n,,\x01auth=Bearer\x01\x01",
                b"n,,\x01auth=Bearer x y\x01\x01", b"n,,\x01auth=Bearer x\x01ext1=v\x01\x01",
                b"n,,\x01auth=Bearer x\x01k=\x01\x01", "n,,\x01auth=Bearer é\x01\x01".encode(),
                b"n,a=,\x01auth=Bearer x\x01\x01", b"n,,\x01auth=Bearer " + b"x" * 70_000 + b"\x01\x01"):
        with pytest.raises(OAuthBearerError, match="OAUTHBEARER client first message"):
            parse_initial_response(bad)


def test_the_exchange_succeeds_or_fails_as_rfc_7628_and_kafka_say() -> None:
    exchange = OAuthBearerExchange(KEYS, SETTINGS, NOW_MS)
    assert exchange.step(message(token(), authzid="alice", traceId="t1")) == (b"", True, "User:alice")
    assert exchange.token is not None and exchange.token.expiry_ms == (NOW + 300) * 1000
    assert exchange.extensions == {"traceId": "t1"}
    with pytest.raises(OAuthBearerError, match="over"):
        exchange.step(message(token()))

    expired = token(exp=NOW - 3600)
    exchange = OAuthBearerExchange(KEYS, SETTINGS, NOW_MS)
    assert exchange.step(message(expired)) == (INVALID_TOKEN, False, None)
    assert json.loads(INVALID_TOKEN) == {"status": "invalid_token"}
    assert exchange.reason is not None and "expired" in exchange.reason and expired not in exchange.reason
    with pytest.raises(OAuthBearerError) as caught:
        exchange.step(b"\x01")  # the client's answer to the error
    assert str(caught.value) == '{"status":"invalid_token"}'
    assert exchange.token is None

    exchange = OAuthBearerExchange(KEYS, SETTINGS, NOW_MS)
    with pytest.raises(OAuthBearerError, match="authorization id"):
        exchange.step(message(token(), authzid="root"))
    assert exchange.token is None
    with pytest.raises(OAuthBearerError, match="client first message"):
        OAuthBearerExchange(KEYS, SETTINGS, NOW_MS).step(b"n,,\x01garbage")


def test_the_jwks_file_is_reread_when_it_changes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "jwks.json"
    source = JwksFile(path.as_uri())
    with caplog.at_level(logging.WARNING, "walgate.security.oauthbearer"):
        assert source.keys().keys == ()  # missing: no keys, every token refused
        assert source.keys().keys == ()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1  # logged once, not per call
    path.write_text(json.dumps({"keys": [jwk(RSA_KEY.public_key(), "rsa1")]}))
    assert [k.kid for k in source.keys().keys] == ["rsa1"]
    rotated = tmp_path / "new.json"
    rotated.write_text(json.dumps({"keys": [jwk(EC_KEY.public_key(), "ec1")]}))
    os.replace(rotated, path)  # as a key rotation writes it
    assert [k.kid for k in source.keys().keys] == ["ec1"]
    path.write_text("{ half written")
    assert [k.kid for k in source.keys().keys] == ["ec1"]  # a broken file keeps the keys read before


def test_settings_use_kafkas_names() -> None:
    assert jwks_path("file:///etc/walgate/jwks.json") == Path("/etc/walgate/jwks.json")
    for bad in ("https://idp.example/jwks", "file://otherhost/jwks.json", "/etc/jwks.json", "file://"):
        with pytest.raises(ValueError):
            jwks_path(bad)
    with pytest.raises(ConfigError, match="sasl_oauthbearer_jwks_endpoint_url"):
        Config(data_dir=Path("/x"), sasl_oauthbearer_jwks_endpoint_url="https://idp.example/jwks")
    with pytest.raises(ConfigError, match="clock_skew"):
        Config(data_dir=Path("/x"), sasl_oauthbearer_clock_skew_seconds=-1)
    config = Config(data_dir=Path("/x"), sasl_oauthbearer_expected_audience=("kafka", "walgate"),
                    sasl_oauthbearer_expected_issuer=ISSUER)
    assert token_settings(config) == SETTINGS
    assert oauthbearer_exchanges(config) is None  # no JWKS: OAUTHBEARER is not offered


def test_exchanges_from_the_configuration_use_the_jwks_file_as_it_is_now(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk(EC_KEY.public_key(), "ec1")]}))
    new = oauthbearer_exchanges(Config(data_dir=tmp_path, sasl_oauthbearer_jwks_endpoint_url=path.as_uri(),
                                       sasl_oauthbearer_expected_issuer=ISSUER,
                                       sasl_oauthbearer_expected_audience=("kafka",)))
    assert new is not None
    assert new(NOW_MS).step(message(token())) == (INVALID_TOKEN, False, None)  # rsa1 is not published yet
    path.write_text(json.dumps(JWKS_DOC))  # the identity provider rotated its keys in
    assert new(NOW_MS).step(message(token())) == (b"", True, "User:alice")
    assert new(NOW_MS + 3600_000).step(message(token()))[0] == INVALID_TOKEN  # an hour later it has expired
