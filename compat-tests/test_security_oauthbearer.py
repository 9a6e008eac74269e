"""Real clients authenticate with SASL OAUTHBEARER over SASL_PLAINTEXT, with JWTs signed by an RSA key whose public
half is in the broker's JWKS file (``sasl.oauthbearer.jwks.endpoint.url``): confluent-kafka (librdkafka) with an
``oauth_cb`` returning the token and its expiry, and Java kafka-clients 4.3 with Kafka's own
``OAuthBearerLoginCallbackHandler`` reading the token from a ``file://`` token endpoint. Each produces a record and
reads it back, across KIP-368 re-authentications (the broker's sessions last 1.5 s); a token signed by a key the
broker does not trust, for another audience or whose ``exp`` no long of milliseconds holds (1e20, 2^63, Infinity;
confluent-kafka), or expired (Java: librdkafka refuses to send an expired token itself) fails with the client's own
authentication error, and confluent-kafka logs in with the largest ``exp`` that fits; with no traceback and no token
in the server's log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
from compat_procs import Run
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from sasl_node import create_topic, events, serve
from test_security_sasl import TOPIC

from livewalgate import WalgateServer

ISSUER = "https://idp.compat.test"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
STRANGER = rsa.generate_private_key(public_exponent=65537, key_size=2048)
LARGEST_EXP = ((1 << 63) - 1) // 1000  # seconds whose milliseconds still fit a Java long (jose4j's NumericDate)


def signed(key: Any = KEY, **changes: Any) -> str:
    now = int(time.time())
    claims = {"sub": "alice", "iss": ISSUER, "aud": "kafka", "iat": now - 5, "exp": now + 600, **changes}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "compat-1"})


@dataclass
class OAuthNode:
    server: WalgateServer
    tokens: dict[str, Path]  # name -> a file holding one token

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.kafka_port}"


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthNode]:
    workdir = tmp_path_factory.mktemp("walgate-oauthbearer")
    jwks = {"keys": [{**json.loads(RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "compat-1", "use": "sig"}]}
    (workdir / "jwks.json").write_text(json.dumps(jwks))
    tokens = {"good": signed(), "untrusted": signed(STRANGER), "other audience": signed(aud="elsewhere"),
              "expired": signed(iat=int(time.time()) - 900, exp=int(time.time()) - 300),
              "exp 1e20": signed(exp=1e20), "exp 2^63": signed(exp=2**63), "exp Infinity": signed(exp=float("inf")),
              "largest exp": signed(exp=LARGEST_EXP)}
    for name, token in tokens.items():
        (workdir / f"{name.replace(' ', '-')}.jwt").write_text(token)
    with serve(workdir, sasl_enabled_mechanisms="OAUTHBEARER,SCRAM-SHA-512",
               sasl_oauthbearer_jwks_endpoint_url=(workdir / "jwks.json").as_uri(),
               sasl_oauthbearer_expected_issuer=ISSUER, sasl_oauthbearer_expected_audience="kafka",
               connections_max_reauth_ms="1500") as sasl:
        node = OAuthNode(sasl.server, {name: workdir / f"{name.replace(' ', '-')}.jwt" for name in tokens})
        create_topic(sasl, TOPIC)  # root, with SCRAM-SHA-512
        yield node
        log = sasl.server.log()
        assert "Traceback" not in log
        assert "re-authenticated as User:alice with OAUTHBEARER" in log  # KIP-368, with the client's token
        for token in tokens.values():
            assert token not in log and token.split(".")[2] not in log


def test_confluent_kafka_logs_in_with_its_token(oauth: OAuthNode, pyclient: Callable[..., Run]):
    run = pyclient("ck_oauthbearer.py", oauth.bootstrap, TOPIC, str(oauth.tokens["good"]), timeout=60)
    assert events(run)[-1]["event"] == "ok", run.stdout + run.stderr


def test_confluent_kafka_logs_in_with_the_largest_exp_a_long_of_milliseconds_holds(oauth: OAuthNode,
                                                                                   pyclient: Callable[..., Run]):
    run = pyclient("ck_oauthbearer.py", oauth.bootstrap, TOPIC, str(oauth.tokens["largest exp"]), timeout=60)
    assert events(run)[-1]["event"] == "ok", run.stdout + run.stderr


@pytest.mark.parametrize("token", ["untrusted", "other audience", "exp 1e20", "exp 2^63", "exp Infinity"])
def test_confluent_kafka_is_refused_a_token_the_broker_does_not_accept(oauth: OAuthNode,
                                                                      pyclient: Callable[..., Run], token: str):
    run = pyclient("ck_oauthbearer.py", oauth.bootstrap, TOPIC, str(oauth.tokens[token]), timeout=60)
    last = events(run)[-1]
    assert last["event"] == "error" and last["name"] == "_AUTHENTICATION", last
    assert '{"status":"invalid_token"}' in last["message"]


def test_java_logs_in_with_a_file_token_endpoint_and_reauthenticates(oauth: OAuthNode, java: Callable[..., Run]):
    refused = ["untrusted", "expired"]
    run = java("OAuthBearerClients.java", oauth.bootstrap, TOPIC, str(oauth.tokens["good"]),
               *(str(oauth.tokens[name]) for name in refused), timeout=90)
    steps = events(run)
    assert all(e["step"] != "error" for e in steps), run.stdout + run.stderr
    assert steps[0] == {"step": "consumed", "records": 3}
    assert [e["step"] for e in steps[1:]] == ["refused"] * len(refused)
    for e in steps[1:]:
        assert e["type"] == "SaslAuthenticationException" and "{'status':'invalid_token'}" in e["message"], e
