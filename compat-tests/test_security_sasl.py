"""Real clients authenticate over SASL_PLAINTEXT: confluent-kafka (librdkafka) with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512, kafka-python and aiokafka with PLAIN and SCRAM-SHA-512, kcat (Debian's librdkafka 2.0.2, which
echoes the SCRAM nonce its own way), kafkajs and @confluentinc/kafka-javascript with SCRAM-SHA-512, Java
kafka-clients 4.3 and 3.9 with SCRAM-SHA-512 (and the Admin's describe/alterUserScramCredentials creating a user
that then logs in, and KIP-368 re-authentication under a consumer); each produces a record and reads it back. A
wrong password fails with the client's own authentication error (not a hang), with no traceback and no password in
the server's log.

The server: one ``walgate serve`` whose one Kafka listener is ``SASL_PLAINTEXT://127.0.0.1:PORT``
(``WALGATE_LISTENERS``), root's password from ``WALGATE_ROOT_PASSWORD``; users are made with SQL over HTTP Basic auth
as root.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from compat_procs import Run

from livewalgate import WalgateServer, free_port, running_walgate, walgate_env

ROOT_PASSWORD = "compat-r00t"
TOPIC = "secured"
USERS = {"alice": "wonder-land", "bob": "build3r"}


@dataclass
class Secured:
    server: WalgateServer

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.kafka_port}"

    def sql(self, statement: str, user: str = "root", password: str = ROOT_PASSWORD) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.server.http_url}/rest/sql", data=statement.encode())
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]


def serve(workdir: Path, **settings: str) -> Any:
    port = free_port()
    env = {**walgate_env(), "WALGATE_LISTENERS": f"SASL_PLAINTEXT://127.0.0.1:{port}", "WALGATE_ROOT_PASSWORD": ROOT_PASSWORD,
           "WALGATE_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
           **{f"WALGATE_{k.upper()}": v for k, v in settings.items()}}
    return running_walgate(workdir, env=env, kafka_port=port)


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "root", "sasl.password": ROOT_PASSWORD})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=30)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with serve(tmp_path_factory.mktemp("walgate-sasl")) as server:
        node = Secured(server)
        for user, password in USERS.items():
            node.sql(f"CREATE USER {user} PASS '{password}'")
        create_topic(node.bootstrap, TOPIC)
        yield node
        assert "Traceback" not in server.log()
        for password in [ROOT_PASSWORD, *USERS.values(), "not-the-password"]:
            assert password not in server.log()


def events(run: Run) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


PYTHON_CASES = [("ck", "PLAIN"), ("ck", "SCRAM-SHA-256"), ("ck", "SCRAM-SHA-512"), ("kp", "PLAIN"),
                ("kp", "SCRAM-SHA-512"), ("aio", "PLAIN"), ("aio", "SCRAM-SHA-512")]


@pytest.mark.parametrize(("library", "mechanism"), PYTHON_CASES)
def test_clients_log_in(secured: Secured, pyclient: Callable[..., Run], library: str, mechanism: str):
    run = pyclient("sasl_login.py", library, secured.bootstrap, mechanism, "alice", USERS["alice"], TOPIC, timeout=60)
    assert events(run)[-1] == {"event": "ok", "library": library, "value": f"hello from {library} over {mechanism}"}


# each client's own error for a refused authentication: kafka-python and aiokafka log the broker's
# SASL_AUTHENTICATION_FAILED answer and fail their bootstrap
AUTH_ERRORS = {"ck": "_AUTHENTICATION", "kp": "KafkaTimeoutError", "aio": "KafkaConnectionError"}


@pytest.mark.parametrize(("library", "mechanism"), [("ck", "SCRAM-SHA-512"), ("ck", "PLAIN"), ("kp", "PLAIN"),
                                                    ("aio", "SCRAM-SHA-512")])
def test_a_wrong_password_is_the_clients_authentication_error(secured: Secured, pyclient: Callable[..., Run],
                                                              library: str, mechanism: str):
    run = pyclient("sasl_login.py", library, secured.bootstrap, mechanism, "alice", "not-the-password", TOPIC,
                   timeout=60)
    last = events(run)[-1]
    assert last["event"] == "error" and last["name"] == AUTH_ERRORS[library], last
    assert "Authentication failed: Invalid username or password" in run.stdout + run.stderr


def test_kcat_scram_sha_512(secured: Secured, kcat: Callable[..., Run], tmp_path: Path):
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", "sasl.username=bob"]
    (tmp_path / "records").write_text("hello from kcat\n")
    kcat("-b", secured.bootstrap, *auth, "-X", f"sasl.password={USERS['bob']}", "-P", "-t", TOPIC, "-p", "0",
         "-l", str(tmp_path / "records"))
    read = kcat("-b", secured.bootstrap, *auth, "-X", f"sasl.password={USERS['bob']}", "-C", "-t", TOPIC, "-p", "0",
                "-o", "beginning", "-e", "-q")
    assert "hello from kcat" in read.stdout.splitlines()
    wrong = kcat("-b", secured.bootstrap, *auth, "-X", "sasl.password=not-the-password", "-L", "-m", "2",
                 check=False)
    assert wrong.returncode != 0 and "Authentication failed: Invalid username or password" in wrong.stderr


def test_kafkajs_scram_sha_512(secured: Secured, node: Callable[..., Run]):
    run = node("kjs_sasl.js", secured.bootstrap, "scram-sha-512", "bob", USERS["bob"], TOPIC)
    assert events(run)[-1] == {"event": "ok", "value": "hello from kafkajs"}
    wrong = node("kjs_sasl.js", secured.bootstrap, "scram-sha-512", "bob", "not-the-password", TOPIC, check=False)
    assert events(wrong)[-1]["event"] == "error" and events(wrong)[-1]["name"] == "KafkaJSSASLAuthenticationError"


def test_kafka_javascript_scram_sha_512(secured: Secured, node: Callable[..., Run]):
    run = node("ckjs_sasl.js", secured.bootstrap, "scram-sha-512", "bob", USERS["bob"], TOPIC)
    assert events(run)[-1] == {"event": "ok", "value": "hello from kafka-javascript"}


@pytest.mark.parametrize("clients", ["4.3.0", "3.9"])
def test_java_scram_sha_512_the_scram_credentials_admin_and_reauthentication(secured: Secured, tmp_path: Path,
                                                                             java: Callable[..., Run], clients: str):
    with serve(tmp_path, connections_max_reauth_ms="1500") as reauth_server:  # sessions of 1.5 s
        reauth = Secured(reauth_server)
        create_topic(reauth.bootstrap, TOPIC)
        run = java("SaslClients.java", secured.bootstrap, reauth.bootstrap, TOPIC, ROOT_PASSWORD, "alice",
                   USERS["alice"], timeout=120, clients=clients)
        steps = {e["step"]: e for e in events(run)}
        assert "error" not in steps, run.stdout + run.stderr
        assert steps["produced"] and steps["refused"]["type"] == "SaslAuthenticationException"
        assert "Invalid username or password" in steps["refused"]["message"]
        assert steps["altered"]["user"] == "carol" and steps["described"]["carol"] == ["SCRAM_SHA_512:8192"]
        consumed = [e for e in events(run) if e["step"] == "consumed"]
        assert consumed == [{"step": "consumed", "value": "hello from java alice"},
                            {"step": "consumed", "value": "hello from java carol"},  # made by the Admin, logged in
                            {"step": "consumed", "records": 4}]  # a consumer kept working across re-authentications
        assert "carol" in [row[0] for row in secured.sql("SHOW USERS")["data"]]  # the same store as SQL's
        secured.sql("DROP USER carol")  # for the next run
        log = reauth_server.log()
        assert log.count("re-authenticated as User:root") >= 2
        assert "expired" not in log and "Traceback" not in log
