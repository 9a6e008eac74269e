"""A census of SCRAM server-first answers cannot tell unknown names from users: read with scramp (an independent SCRAM
client) over SaslHandshake + SaslAuthenticate (kio encodes the requests) against a real server, the ``i=`` and the
salt an unknown name gets are drawn like the real users' (iterations, salt length and salt alphabet, in the real
users' proportions), and they are the same at every request and after a restart, as a stored credential's are.

The users: two with SQL's credentials (4096 iterations, 16 random bytes of salt), two made through Kafka's
AlterUserScramCredentials with 8192 iterations and 26-character base-36 salts (as Kafka's Java tools make them), two
with 16384 iterations and 32 random bytes. The counts are bounded at six standard deviations of the binomial draw,
so a correct server fails them with a probability below 1e-8; a server answering every unknown name alike (4096 and
16 bytes) fails at once.
"""

from __future__ import annotations

import base64
import hashlib
import os
import string
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes
from kio.schema.errors import ErrorCode
from scramp import ScramClient
from test_sasl import ROOT_PASSWORD, http, plain

from walgate.gateway.server import Gateway

MECHANISM = "SCRAM-SHA-512"
BASE36 = (string.digits + string.ascii_lowercase).encode()
NAMES = [f"nobody-{i}" for i in range(300)]


def call(conn: KafkaConnection, api_key: int, version: int, **values: Any) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def base36_salt() -> bytes:
    return bytes(BASE36[b % 36] for b in os.urandom(26))


def upsertion(name: str, iterations: int, salt: bytes) -> dict[str, Any]:
    salted = hashlib.pbkdf2_hmac("sha512", b"pw-" + name.encode(), salt, iterations)
    return {"name": name, "mechanism": 2, "iterations": iterations, "salt": salt, "salted_password": salted}


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A data dir whose users are root, alice (SQL), bob, carol (8192, base 36), dave, erin (16384, 32 bytes)."""
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    with gateway_thread(tmp_path, listeners="SASL_PLAINTEXT://127.0.0.1:0") as gw:
        http(gw, "CREATE USER alice PASS 'wonderland'")
        with KafkaConnection(gw.kafka_address) as conn:
            assert plain(conn, "root", ROOT_PASSWORD).error_code == ErrorCode.none
            altered = call(conn, 51, 0, deletions=[], upsertions=[
                upsertion("bob", 8192, base36_salt()), upsertion("carol", 8192, base36_salt()),
                upsertion("dave", 16384, os.urandom(32)), upsertion("erin", 16384, os.urandom(32))])
            assert [r.error_code for r in altered.results] == [ErrorCode.none] * 4
    yield tmp_path


def server_first(gw: Gateway, name: str) -> tuple[int, bytes]:
    """(i, salt) of the server-first message ``name`` is answered with."""
    client = ScramClient([MECHANISM], name, "any-password")
    with KafkaConnection(gw.kafka_address) as conn:
        assert call(conn, 17, 1, mechanism=MECHANISM).error_code == ErrorCode.none
        first = call(conn, 36, 2, auth_bytes=client.get_client_first().encode())
        assert first.error_code == ErrorCode.none
    client.set_server_first(first.auth_bytes.decode())  # scramp parses and checks it
    fields = dict(part.split("=", 1) for part in first.auth_bytes.decode().split(","))
    return int(fields["i"]), base64.b64decode(fields["s"])


def shape(answer: tuple[int, bytes]) -> tuple[int, int, bool]:
    """(iterations, salt length, whether the salt is base 36) of an answer."""
    iterations, salt = answer
    return iterations, len(salt), set(salt) <= set(BASE36)


def test_unknown_names_are_answered_like_the_real_users(data_dir: Path) -> None:
    with gateway_thread(data_dir, listeners="SASL_PLAINTEXT://127.0.0.1:0") as gw:
        users = {name: server_first(gw, name) for name in ("root", "alice", "bob", "carol", "dave", "erin")}
        assert [shape(a) for a in users.values()] == [(4096, 16, False)] * 2 + [(8192, 26, True)] * 2 + [
            (16384, 32, False)] * 2
        unknown = {name: server_first(gw, name) for name in NAMES}
        census = Counter(shape(a) for a in unknown.values())
        assert set(census) == {(4096, 16, False), (8192, 26, True), (16384, 32, False)}, census
        assert all(50 <= n <= 150 for n in census.values()), census  # a third each: 100 +- 6 sd
        assert len({salt for _, salt in unknown.values()}) == len(NAMES)
        assert {name: server_first(gw, name) for name in NAMES[:20]} == {n: unknown[n] for n in NAMES[:20]}
    with gateway_thread(data_dir, listeners="SASL_PLAINTEXT://127.0.0.1:0") as gw:  # restarted: the same answers
        assert {name: server_first(gw, name) for name in NAMES[:20]} == {n: unknown[n] for n in NAMES[:20]}
        assert server_first(gw, "bob") == users["bob"]
