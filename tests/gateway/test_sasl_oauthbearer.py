"""SASL OAUTHBEARER on a SASL_PLAINTEXT listener, spoken byte by byte: signed JWTs (keys made by cryptography, a JWKS
file) authenticate as ``User:<sub>``; expired, wrong-audience, wrong-issuer and badly signed tokens get RFC 7628's
challenge then SASL_AUTHENTICATION_FAILED and a closed connection; the session lifetime (KIP-368) is the smaller of
``connections.max.reauth.ms`` and the token's remaining life; re-authentication takes a new token (same subject, same
mechanism); v0 bare frames; a rotated JWKS file is used without a restart; ACLs check the token's principal; the
mechanism is offered only when enabled, and never without a JWKS (which Kafka's mechanism-prefixed listener settings
may name); validly signed tokens whose ``exp``, ``iat`` or ``nbf`` is no number a 64-bit long of milliseconds holds
(1e20, 2^63, Infinity, NaN, 10^400) are refused with the challenge and a one-line log, and the largest ``exp`` that
fits is accepted with its whole lifetime announced."""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes
from jwt.algorithms import RSAAlgorithm
from kio.schema.errors import ErrorCode
from test_sasl import ROOT_PASSWORD, authenticate, call, closed, handshake, metadata_works, plain, refused

from walgate.gateway.config import Config, ConfigError, load_config
from walgate.gateway.server import Gateway

ISSUER = "https://idp.test/realms/kafka"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
STRANGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)
INVALID_TOKEN = '{"status":"invalid_token"}'
LARGEST_EXP = ((1 << 63) - 1) // 1000  # seconds whose milliseconds still fit a Java long (jose4j's NumericDate)


def write_jwks(path: Path) -> str:
    """A JWKS file with KEY's public half; its file:// URL."""
    jwk = {**json.loads(RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k1", "use": "sig", "alg": "RS256"}
    path.write_text(json.dumps({"keys": [jwk]}))
    return path.as_uri()


def signed(key: Any = KEY, lifetime: float = 300, **changes: Any) -> str:
    now = time.time()
    claims = {"sub": "alice", "iss": ISSUER, "aud": "kafka", "iat": int(now) - 5, "exp": int(now + lifetime),
              "scope": "kafka"}
    claims.update(changes)
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm="RS256",
                      headers={"kid": "k1"})


def bearer(token: str) -> bytes:
    """The client's OAUTHBEARER message (Kafka's OAuthBearerClientInitialResponse)."""
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def oauthbearer(conn: KafkaConnection, token: str, version: int = 2) -> Any:
    assert handshake(conn, "OAUTHBEARER").error_code == ErrorCode.none
    return authenticate(conn, bearer(token), version)


@pytest.fixture
def settings(tmp_path: Path) -> dict[str, Any]:
    return {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl_enabled_mechanisms": ("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"),
            "sasl_oauthbearer_jwks_endpoint_url": write_jwks(tmp_path / "jwks.json"),
            "sasl_oauthbearer_expected_issuer": ISSUER, "sasl_oauthbearer_expected_audience": ("kafka",),
            "connections_max_reauth_ms": 60_000}


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any]) -> Iterator[Gateway]:
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path / "data", **settings) as gw:
        yield gw


@pytest.mark.parametrize("version", [1, 2])
def test_a_signed_token_authenticates_its_subject(secured: Gateway, version: int, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    token = signed()
    with KafkaConnection(secured.kafka_address) as conn:
        assert handshake(conn, "OAUTHBEARER").mechanisms == ("PLAIN", "SCRAM-SHA-256", "OAUTHBEARER")
        answer = authenticate(conn, bearer(token), version)
        assert (answer.error_code, answer.auth_bytes) == (ErrorCode.none, b"")
        assert answer.session_lifetime.total_seconds() == 60  # connections.max.reauth.ms: the token lives longer
        assert metadata_works(conn)
    assert "authenticated as User:alice with OAUTHBEARER" in caplog.text
    assert token not in caplog.text


def test_bare_tokens_after_a_v0_handshake(secured: Gateway):
    with KafkaConnection(secured.kafka_address) as conn:
        assert handshake(conn, "OAUTHBEARER", version=0).error_code == ErrorCode.none
        message = bearer(signed())
        conn.sock.sendall(struct.pack(">i", len(message)) + message)
        assert conn._read(4) == b"\0\0\0\0"  # an empty answer token: authenticated
        assert metadata_works(conn)
    with KafkaConnection(secured.kafka_address) as conn:  # a refused token: the challenge, then closed
        assert handshake(conn, "OAUTHBEARER", version=0).error_code == ErrorCode.none
        message = bearer(signed(key=STRANGER))
        conn.sock.sendall(struct.pack(">i", len(message)) + message)
        assert conn._read(struct.unpack(">i", conn._read(4))[0]) == INVALID_TOKEN.encode()
        conn.sock.sendall(struct.pack(">i", 1) + b"\x01")
        assert closed(conn)  # v0: a failure closes the connection without an answer, as Kafka does


REFUSED = {
    "expired": lambda: signed(lifetime=-120),  # beyond the 30 s clock skew
    "wrong audience": lambda: signed(aud="another-service"),
    "wrong issuer": lambda: signed(iss="https://evil.test"),
    "bad signature": lambda: signed(key=STRANGER),
    "no subject": lambda: signed(sub=None),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_token_gets_the_rfc7628_challenge_then_fails_and_closes(secured: Gateway, case: str,
                                                                          caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    token = REFUSED[case]()
    with KafkaConnection(secured.kafka_address) as conn:
        challenge = oauthbearer(conn, token)
        assert (challenge.error_code, challenge.auth_bytes) == (ErrorCode.none, INVALID_TOKEN.encode())
        assert challenge.session_lifetime.total_seconds() == 0
        failed = authenticate(conn, b"\x01")  # the client's %x01 after an error challenge
        assert (failed.error_code, failed.error_message) == (ErrorCode.sasl_authentication_failed, INVALID_TOKEN)
        assert closed(conn)
    assert "OAUTHBEARER token refused (invalid token: " in caplog.text
    assert token not in caplog.text and "Traceback" not in caplog.text


def test_a_malformed_message_fails_and_closes(secured: Gateway):
    with KafkaConnection(secured.kafka_address) as conn:
        assert handshake(conn, "OAUTHBEARER").error_code == ErrorCode.none
        failed = authenticate(conn, b"n,,\x01auth=Basic abc\x01\x01")
        assert failed.error_code == ErrorCode.sasl_authentication_failed
        assert closed(conn)


def test_the_token_bounds_the_session_and_reauthentication_takes_a_new_token(secured: Gateway):
    with KafkaConnection(secured.kafka_address) as conn:
        short = oauthbearer(conn, signed(lifetime=3))
        assert short.error_code == ErrorCode.none
        assert 0 < short.session_lifetime.total_seconds() <= 3  # the token expires before connections.max.reauth.ms
        assert metadata_works(conn)
        longer = oauthbearer(conn, signed(lifetime=600))  # re-authentication in the middle of the connection
        assert longer.error_code == ErrorCode.none and longer.session_lifetime.total_seconds() == 60
        time.sleep(3.1)
        assert metadata_works(conn)  # the first token expired; the session runs on the second
        other = oauthbearer(conn, signed(sub="mallory"))  # another principal: refused, as Kafka does
        assert other.error_code == ErrorCode.sasl_authentication_failed
        assert closed(conn)
    with KafkaConnection(secured.kafka_address) as conn:
        assert oauthbearer(conn, signed()).error_code == ErrorCode.none
        answer = plain(conn, "root", ROOT_PASSWORD)  # re-authentication keeps the mechanism, as Kafka's does
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.sasl_authentication_failed,
            "SASL mechanism 'PLAIN' requested by client is not supported for re-authentication of mechanism "
            "'OAUTHBEARER'")
        assert closed(conn)
    with KafkaConnection(secured.kafka_address) as conn:
        assert oauthbearer(conn, signed(lifetime=1)).error_code == ErrorCode.none
        time.sleep(1.1)
        assert refused(conn)  # the token's life ended the session: not re-authenticated, closed


def test_without_reauth_ms_the_token_alone_bounds_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              settings: dict[str, Any]):
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path / "data", **{**settings, "connections_max_reauth_ms": 0}) as gw:
        with KafkaConnection(gw.kafka_address) as conn:
            assert 290 <= oauthbearer(conn, signed(lifetime=300)).session_lifetime.total_seconds() <= 300
        with KafkaConnection(gw.kafka_address) as conn:  # PLAIN keeps sessions without end
            assert plain(conn, "root", ROOT_PASSWORD).session_lifetime.total_seconds() == 0


def test_oauthbearer_is_offered_only_when_enabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  settings: dict[str, Any]):
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path / "data", **{**settings, "sasl_enabled_mechanisms": ("PLAIN",)}) as gw:
        with KafkaConnection(gw.kafka_address) as conn:
            answer = handshake(conn, "OAUTHBEARER")
            assert (answer.error_code, answer.mechanisms) == (ErrorCode.unsupported_sasl_mechanism, ("PLAIN",))
            assert closed(conn)


def test_oauthbearer_without_a_jwks_refuses_to_start(tmp_path: Path):
    with pytest.raises(ConfigError, match="listener SASL_PLAINTEXT enables SASL OAUTHBEARER but no JWKS"):
        Config(data_dir=tmp_path, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms=("OAUTHBEARER",))
    with pytest.raises(ConfigError, match="listener SASL_PLAINTEXT: sasl.oauthbearer.jwks.endpoint.url: "):
        load_config(env={}, settings=[
            ("log.dirs", str(tmp_path)), ("listeners", "SASL_PLAINTEXT://127.0.0.1:0"),
            ("listener.name.sasl_plaintext.sasl.enabled.mechanisms", "OAUTHBEARER"),
            ("listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url", "https://idp.test/jwks")])
    Config(data_dir=tmp_path, sasl_enabled_mechanisms=("OAUTHBEARER",))  # no SASL listener: nothing to verify


def test_a_listener_takes_kafkas_mechanism_prefixed_oauthbearer_settings(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    prefix = "listener.name.sasl_plaintext.oauthbearer."
    config = load_config(env={}, overrides={"kafka_port": 0, "http_port": 0}, settings=[
        ("log.dirs", str(tmp_path / "data")), ("listeners", "SASL_PLAINTEXT://127.0.0.1:0"),
        ("sasl.enabled.mechanisms", "OAUTHBEARER"),
        (prefix + "sasl.oauthbearer.jwks.endpoint.url", write_jwks(tmp_path / "jwks.json")),
        (prefix + "sasl.oauthbearer.expected.audience", "walgate")])
    with gateway_thread(config.data_dir, **{k: getattr(config, k) for k in (
            "listeners", "sasl_enabled_mechanisms", "listener_overrides")}) as gw:
        with KafkaConnection(gw.kafka_address) as conn:
            assert oauthbearer(conn, signed(aud="walgate")).error_code == ErrorCode.none
        with KafkaConnection(gw.kafka_address) as conn:
            assert oauthbearer(conn, signed(aud="kafka")).auth_bytes == INVALID_TOKEN.encode()


def test_an_unknown_mechanism_refuses_to_start_without_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with pytest.raises(ConfigError, match="listener SASL_PLAINTEXT: sasl.enabled.mechanisms: GSSAPI: walgate "
                                          "implements PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"):
        with gateway_thread(tmp_path, listeners="SASL_PLAINTEXT://127.0.0.1:0", sasl_enabled_mechanisms=("GSSAPI",)):
            pass


def test_a_rotated_jwks_file_is_used_without_a_restart(secured: Gateway, tmp_path: Path):
    with KafkaConnection(secured.kafka_address) as conn:  # the keys are read
        assert oauthbearer(conn, signed()).error_code == ErrorCode.none
    rotated = {**json.loads(RSAAlgorithm.to_jwk(STRANGER.public_key())), "kid": "k1", "use": "sig", "alg": "RS256"}
    (tmp_path / "jwks.new").write_text(json.dumps({"keys": [rotated]}))  # the provider rotated its key
    (tmp_path / "jwks.new").replace(tmp_path / "jwks.json")
    with KafkaConnection(secured.kafka_address) as conn:
        assert oauthbearer(conn, signed(key=STRANGER)).error_code == ErrorCode.none
    with KafkaConnection(secured.kafka_address) as conn:
        assert oauthbearer(conn, signed()).auth_bytes == INVALID_TOKEN.encode()  # the old key no longer verifies


def test_the_token_subject_is_the_principal_acls_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       settings: dict[str, Any]):
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    acls = {"authorizer_class_name": "kafka.security.authorizer.AclAuthorizer", "super_users": ("User:ops",)}
    with gateway_thread(tmp_path / "data", **settings, **acls) as gw:
        for subject, error in [("alice", ErrorCode.topic_authorization_failed), ("ops", ErrorCode.none)]:
            with KafkaConnection(gw.kafka_address) as conn:
                assert oauthbearer(conn, signed(sub=subject)).error_code == ErrorCode.none
                made = call(conn, 19, 7, topics=[{"name": f"by-{subject}", "num_partitions": 1,
                                                  "replication_factor": 1}])
                assert made.topics[0].error_code == error


OUT_OF_RANGE = {  # validly signed; pyjwt writes inf and nan as JSON's Infinity and NaN, which Python's json reads
    "exp 1e20": ("exp", 1e20), "exp 2^63": ("exp", 2**63), "exp 1e308": ("exp", 1e308),
    "exp Infinity": ("exp", float("inf")), "exp NaN": ("exp", float("nan")), "exp 10^400": ("exp", 10**400),
    "exp one past the largest": ("exp", LARGEST_EXP + 1), "iat 2^63": ("iat", 2**63),
    "iat Infinity": ("iat", float("inf")), "iat NaN": ("iat", float("nan")), "nbf NaN": ("nbf", float("nan")),
    "nbf 10^400": ("nbf", 10**400), "exp a string": ("exp", "2099-01-01"),
}


def _clean(caplog: pytest.LogCaptureFixture) -> None:
    """No traceback, no ERROR line: each refusal is one INFO line."""
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("case", list(OUT_OF_RANGE))
def test_a_signed_token_with_an_unusable_numeric_date_is_refused(secured: Gateway, case: str,
                                                                 caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    claim, value = OUT_OF_RANGE[case]
    token = signed(**{claim: value})
    with KafkaConnection(secured.kafka_address) as conn:
        challenge = oauthbearer(conn, token)
        assert (challenge.error_code, challenge.auth_bytes) == (ErrorCode.none, INVALID_TOKEN.encode())
        failed = authenticate(conn, b"\x01")
        assert (failed.error_code, failed.error_message) == (ErrorCode.sasl_authentication_failed, INVALID_TOKEN)
        assert closed(conn)
    assert f"OAUTHBEARER token refused (invalid token: the token's {claim} claim is " in caplog.text
    _clean(caplog)


def test_bare_v0_tokens_with_an_unusable_exp_get_the_challenge(secured: Gateway, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    for value in (float("inf"), float("nan"), 2**63):
        with KafkaConnection(secured.kafka_address) as conn:
            assert handshake(conn, "OAUTHBEARER", version=0).error_code == ErrorCode.none
            message = bearer(signed(exp=value))
            conn.sock.sendall(struct.pack(">i", len(message)) + message)
            assert conn._read(struct.unpack(">i", conn._read(4))[0]) == INVALID_TOKEN.encode()
            conn.sock.sendall(struct.pack(">i", 1) + b"\x01")
            assert closed(conn)
    _clean(caplog)


def test_the_largest_exp_a_long_of_milliseconds_holds_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   settings: dict[str, Any],
                                                                   caplog: pytest.LogCaptureFixture):
    """Without connections.max.reauth.ms the session lasts the token's remaining life: about 2^63 - 1 ms, more than
    a ``timedelta`` holds, so the answer is read byte by byte (SaslAuthenticate v2: error code, compact nullable
    message, compact bytes, int64 session lifetime, tagged fields)."""
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path / "data", **{**settings, "connections_max_reauth_ms": 0}) as gw:
        with KafkaConnection(gw.kafka_address) as conn:
            assert handshake(conn, "OAUTHBEARER").error_code == ErrorCode.none
            request_cls, response_cls = kio_classes(36, 2)
            before = int(time.time() * 1000)
            message = bearer(signed(exp=LARGEST_EXP))
            cid = conn.send(build(request_cls, {"auth_bytes": message}))
            frame, start = conn.receive_body(response_cls.__header_schema__, cid)
            error_code, message_len, auth_len = struct.unpack_from(">hbb", frame, start)
            (lifetime,) = struct.unpack_from(">q", frame, start + 4)
            after = int(time.time() * 1000)
            assert (error_code, message_len, auth_len) == (0, 0, 1)  # NONE, a null message, empty auth bytes
            assert LARGEST_EXP * 1000 - after <= lifetime <= LARGEST_EXP * 1000 - before
            assert frame[start + 12:] == b"\x00"  # no tagged fields, nothing after
            assert metadata_works(conn)
    assert "authenticated as User:alice with OAUTHBEARER" in caplog.text
    _clean(caplog)
