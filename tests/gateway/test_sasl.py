"""SASL on a SASL_PLAINTEXT listener, spoken byte by byte (kio encodes the requests): the authentication gate, PLAIN
and SCRAM through SaslAuthenticate and after a v0 SaslHandshake, failures that close the connection and never tell
whether a user exists, KIP-368 re-authentication and session expiry, KIP-554's credential APIs on the same users,
HTTP Basic auth on the same users (``walgate sql`` included), and root's first password."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes, sql
from kio.schema.errors import ErrorCode
from scramp import ScramClient

from walgate.gateway.kafka.sasl import AUTHENTICATION_FAILED
from walgate.gateway.server import Gateway

ROOT_PASSWORD = "r00t-Secret"


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path, listeners="SASL_PLAINTEXT://127.0.0.1:0", connections_max_reauth_ms=60_000) as gw:
        http(gw, "CREATE USER alice PASS 'wonderland'")
        yield gw


def http(gw: Gateway, statement: str, user: str = "root", password: str = ROOT_PASSWORD,
         path: str = "/rest/sql") -> dict[str, Any]:
    host, port = gw.http_address
    request = urllib.request.Request(f"http://{host}:{port}{path}", data=statement.encode() if statement else None)
    if user:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def call(conn: KafkaConnection, api_key: int, version: int, **values: Any) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def handshake(conn: KafkaConnection, mechanism: str, version: int = 1) -> Any:
    return call(conn, 17, version, mechanism=mechanism)


def authenticate(conn: KafkaConnection, token: bytes, version: int = 2) -> Any:
    return call(conn, 36, version, auth_bytes=token)


def plain(conn: KafkaConnection, user: str, password: str) -> Any:
    assert handshake(conn, "PLAIN").error_code == ErrorCode.none
    return authenticate(conn, f"\0{user}\0{password}".encode())


def scram(conn: KafkaConnection, mechanism: str, user: str, password: str) -> Any:
    client = ScramClient([mechanism], user, password)
    assert handshake(conn, mechanism).error_code == ErrorCode.none
    first = authenticate(conn, client.get_client_first().encode())
    assert first.error_code == ErrorCode.none
    client.set_server_first(first.auth_bytes.decode())
    final = authenticate(conn, client.get_client_final().encode())
    if final.error_code == ErrorCode.none:
        client.set_server_final(final.auth_bytes.decode())
    return final


def metadata_works(conn: KafkaConnection) -> bool:
    return bool(call(conn, 3, 12, topics=None).brokers)


def closed(conn: KafkaConnection) -> bool:
    """Whether the server closed the connection (after answering what it answered)."""
    conn.sock.settimeout(10)
    try:
        return conn.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def refused(conn: KafkaConnection) -> bool:
    """Whether a Metadata request closes the connection without an answer."""
    try:
        call(conn, 3, 12, topics=None)
    except ConnectionError:
        return True
    return False


def test_only_api_versions_and_sasl_before_authentication(secured: Gateway):
    with KafkaConnection(secured.kafka_address) as conn:
        versions = {k.api_key: (k.min_version, k.max_version) for k in call(conn, 18, 3).api_keys}
        assert versions[17] == (0, 1) and versions[36] == (0, 2) and versions[50] == (0, 0) and versions[51] == (0, 0)
        assert refused(conn)
    with KafkaConnection(secured.kafka_address) as conn, pytest.raises(ConnectionError):
        authenticate(conn, b"\0root\0x")  # SaslAuthenticate before SaslHandshake: closed, as Kafka does


@pytest.mark.parametrize(("mechanism", "version"), [("PLAIN", 0), ("PLAIN", 2), ("SCRAM-SHA-256", 1),
                                                    ("SCRAM-SHA-512", 2)])
def test_right_passwords_authenticate(secured: Gateway, mechanism: str, version: int, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    with KafkaConnection(secured.kafka_address) as conn:
        if mechanism == "PLAIN":
            assert handshake(conn, "PLAIN").mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
            answer = authenticate(conn, b"\0alice\0wonderland", version)
        else:
            answer = scram(conn, mechanism, "alice", "wonderland")
        assert answer.error_code == ErrorCode.none
        if version >= 1:
            assert answer.session_lifetime.total_seconds() == 60
        assert metadata_works(conn)
    assert f"authenticated as User:alice with {mechanism}" in caplog.text
    assert "wonderland" not in caplog.text


def test_a_failed_authentication_is_closed_by_the_client_or_a_second_later(secured: Gateway):
    """The answer of a failed authentication is not followed by the server's close at once: the client closes (a
    Kafka client does on SASL_AUTHENTICATION_FAILED), else the server a second later (kafka-python 3.0 drops an
    answer it reads together with the close and reports a lost connection instead)."""
    with KafkaConnection(secured.kafka_address) as conn:
        assert plain(conn, "alice", "guess-what").error_code == ErrorCode.sasl_authentication_failed
        conn.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            conn.sock.recv(1)  # still open: no EOF while the client may read the answer
        assert closed(conn)  # then closed by the server, the client having sent nothing
    with KafkaConnection(secured.kafka_address) as conn:  # the client closing first: the server lets go at once
        assert plain(conn, "alice", "guess-what").error_code == ErrorCode.sasl_authentication_failed
    with KafkaConnection(secured.kafka_address) as conn:  # and a new connection is served meanwhile
        assert plain(conn, "alice", "wonderland").error_code == ErrorCode.none


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "nobody"])
def test_a_wrong_password_or_unknown_user_fails_alike_and_closes(secured: Gateway, mechanism: str, user: str,
                                                                caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    with KafkaConnection(secured.kafka_address) as conn:
        if mechanism == "PLAIN":
            answer = plain(conn, user, "guess-what")
        else:
            answer = scram(conn, mechanism, user, "guess-what")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == AUTHENTICATION_FAILED
        assert closed(conn)
    assert "guess-what" not in caplog.text and "Traceback" not in caplog.text
    assert "SASL authentication failed" in caplog.text


def test_an_unknown_or_disabled_mechanism_is_refused_with_the_enabled_ones(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path, listeners="SASL_PLAINTEXT://127.0.0.1:0",
                        sasl_enabled_mechanisms=("SCRAM-SHA-512",)) as gw:
        for mechanism in ("PLAIN", "GSSAPI"):
            with KafkaConnection(gw.kafka_address) as conn:
                answer = handshake(conn, mechanism)
                assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
                assert answer.mechanisms == ("SCRAM-SHA-512",)
                assert closed(conn)
        with KafkaConnection(gw.kafka_address) as conn:
            assert scram(conn, "SCRAM-SHA-512", "root", ROOT_PASSWORD).error_code == ErrorCode.none


def test_v0_handshake_then_bare_tokens(secured: Gateway):
    with KafkaConnection(secured.kafka_address) as conn:
        assert handshake(conn, "PLAIN", version=0).error_code == ErrorCode.none
        token = b"\0alice\0wonderland"
        conn.sock.sendall(struct.pack(">i", len(token)) + token)
        assert conn._read(4) == b"\0\0\0\0"  # an empty answer token: authenticated
        assert metadata_works(conn)
    with KafkaConnection(secured.kafka_address) as conn:  # SCRAM in bare tokens, then a wrong password
        client = ScramClient(["SCRAM-SHA-256"], "alice", "nope")
        assert handshake(conn, "SCRAM-SHA-256", version=0).error_code == ErrorCode.none
        first = client.get_client_first().encode()
        conn.sock.sendall(struct.pack(">i", len(first)) + first)
        client.set_server_first(conn._read(struct.unpack(">i", conn._read(4))[0]).decode())
        final = client.get_client_final().encode()
        conn.sock.sendall(struct.pack(">i", len(final)) + final)
        assert closed(conn)  # v0: a failure closes the connection without an answer, as Kafka does


def test_reauthentication_keeps_the_connection_and_an_expired_session_closes_it(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path, listeners="SASL_PLAINTEXT://127.0.0.1:0", connections_max_reauth_ms=300) as gw:
        http(gw, "CREATE USER bob PASS 'builder'")
        with KafkaConnection(gw.kafka_address) as conn:
            assert scram(conn, "SCRAM-SHA-512", "root", ROOT_PASSWORD).session_lifetime.total_seconds() == 0.3
            for _ in range(3):  # re-authenticate in the middle of the connection, before each expiry
                assert scram(conn, "SCRAM-SHA-512", "root", ROOT_PASSWORD).error_code == ErrorCode.none
                assert metadata_works(conn)
            failed = scram(conn, "SCRAM-SHA-512", "bob", "builder")  # another principal
            assert failed.error_code == ErrorCode.sasl_authentication_failed
            assert closed(conn)
        with KafkaConnection(gw.kafka_address) as conn:
            assert plain(conn, "bob", "builder").error_code == ErrorCode.none
            http(gw, "ALTER USER bob PASS 'changed'")
            assert metadata_works(conn)  # a changed password ends the session at its lifetime, not at once
            time.sleep(0.4)
            assert refused(conn)  # expired and not re-authenticated


def test_scram_credentials_apis_create_a_user_that_then_logs_in(secured: Gateway):
    salt, iterations, password = b"pepper-and-salt", 8192, "kafka-pw"
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    with KafkaConnection(secured.kafka_address) as conn:
        assert plain(conn, "root", ROOT_PASSWORD).error_code == ErrorCode.none
        altered = call(conn, 51, 0, deletions=[{"name": "alice", "mechanism": 1}, {"name": "ghost", "mechanism": 2}],
                       upsertions=[{"name": "kafka", "mechanism": 2, "iterations": iterations, "salt": salt,
                                    "salted_password": salted},
                                   {"name": "weak", "mechanism": 2, "iterations": 1000, "salt": salt,
                                    "salted_password": salted},
                                   {"name": "odd", "mechanism": 9, "iterations": 4096, "salt": salt,
                                    "salted_password": salted}])
        assert [(r.user, r.error_code) for r in altered.results] == [
            ("alice", ErrorCode.none), ("ghost", ErrorCode.resource_not_found), ("kafka", ErrorCode.none),
            ("weak", ErrorCode.unacceptable_credential), ("odd", ErrorCode.unsupported_sasl_mechanism)]
        described = call(conn, 50, 0, users=None)
        assert [(r.user, [(c.mechanism, c.iterations) for c in r.credential_infos]) for r in described.results] == [
            ("alice", [(2, 4096)]), ("kafka", [(2, 8192)]), ("root", [(1, 4096), (2, 4096)])]
        missing = call(conn, 50, 0, users=[{"name": "ghost"}]).results[0]
        assert missing.error_code == ErrorCode.resource_not_found
    with KafkaConnection(secured.kafka_address) as conn:
        assert scram(conn, "SCRAM-SHA-512", "kafka", password).error_code == ErrorCode.none
    # the same store: SQL sees the user, and its password works over HTTP though only a SCRAM-SHA-512 key is kept
    assert [row[0] for row in http(secured, "SHOW USERS", "kafka", password)["data"]] == ["alice", "kafka", "root"]


def test_a_user_named_like_a_cluster_node_never_authenticates_with_a_password(secured: Gateway):
    """``walgate-node-<id>`` names are the cluster nodes' (kafka/sasl.py): only the node token's credential
    authenticates them, never a password of the user store, so a user of that name gains no node's rights (and a
    single node, which has no token, takes no such login at all)."""
    http(secured, "CREATE USER `walgate-node-1` PASS 'Not-a-node-1'")
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        with KafkaConnection(secured.kafka_address) as conn:
            if mechanism == "PLAIN":
                answer = plain(conn, "walgate-node-1", "Not-a-node-1")
            else:  # refused at its first token: no credential to answer with
                client = ScramClient([mechanism], "walgate-node-1", "Not-a-node-1")
                assert handshake(conn, mechanism).error_code == ErrorCode.none
                answer = authenticate(conn, client.get_client_first().encode())
            assert answer.error_code == ErrorCode.sasl_authentication_failed, mechanism
    with KafkaConnection(secured.kafka_address) as conn:  # the user store still works
        assert plain(conn, "alice", "wonderland").error_code == ErrorCode.none


def test_a_plaintext_listener_answers_sasl_with_illegal_sasl_state(tmp_path: Path):
    with gateway_thread(tmp_path) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert handshake(conn, "PLAIN").error_code == ErrorCode.illegal_sasl_state
        assert metadata_works(conn)  # nothing else changes without security


def test_http_basic_auth(secured: Gateway, caplog: pytest.LogCaptureFixture):
    host, port = secured.http_address
    assert http(secured, "", user="", path="/healthz")["status"] == "ok"
    assert http(secured, "", user="", path="/readyz")["status"] == "ready"
    for user, password in (("", ""), ("alice", "wrong"), ("nobody", "wrong"), ("alice", "")):
        with pytest.raises(urllib.error.HTTPError) as refused_request:
            http(secured, "SHOW USERS", user, password)
        assert refused_request.value.code == 401
        assert refused_request.value.headers["WWW-Authenticate"].startswith('Basic realm="walgate"')
    for path in ("/ui", "/metrics", "/ui/api/topics"):
        request = urllib.request.Request(f"http://{host}:{port}{path}")
        with pytest.raises(urllib.error.HTTPError) as refused_request:
            urllib.request.urlopen(request, timeout=30)
        assert refused_request.value.code == 401
    assert http(secured, "SHOW USERS", "alice", "wonderland")["rows"] == 2
    assert http(secured, "SHOW USERS", "alice", "wonderland")["rows"] == 2  # the verified password is remembered
    assert "wonderland" not in caplog.text and ROOT_PASSWORD not in caplog.text


def test_a_generated_root_password_is_printed_once_and_never_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     caplog: pytest.LogCaptureFixture):
    monkeypatch.delenv("WALGATE_ROOT_PASSWORD", raising=False)
    caplog.set_level(logging.INFO)
    with gateway_thread(tmp_path, http_auth="basic") as gw:
        printed = capsys.readouterr().err
        [password] = re.findall(r"the generated password of user root is (\S+) \(shown once\)", printed)
        assert http(gw, "SHOW USERS", "root", password)["data"][0][:2] == ["root", 1]
    assert password not in caplog.text and "printed once on stderr" in caplog.text
    with gateway_thread(tmp_path, http_auth="basic") as gw:  # the next start keeps root as it is
        assert "generated password" not in capsys.readouterr().err
        assert http(gw, "SHOW USERS", "root", password)["rows"] == 1
    with gateway_thread(tmp_path / "plain") as gw:  # no authentication configured: no user is made, nothing printed
        assert "root" not in capsys.readouterr().err and sql(gw, "SHOW USERS")["rows"] == 0


def test_walgate_sql_logs_in_with_walgate_user_and_password(secured: Gateway):
    host, port = secured.http_address
    argv = [sys.executable, "-m", "walgate.gateway.cli", "sql", "--url", f"http://{host}:{port}", "--json",
            "SHOW USERS"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WALGATE_")}
    anonymous = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert anonymous.returncode == 1 and "Authentication failure" in anonymous.stderr
    logged_in = subprocess.run(argv, env=env | {"WALGATE_USER": "alice", "WALGATE_PASSWORD": "wonderland"},
                               capture_output=True, text=True, timeout=60)
    assert logged_in.returncode == 0 and json.loads(logged_in.stdout)["rows"] == 2
