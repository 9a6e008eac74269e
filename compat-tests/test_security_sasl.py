"""Real clients authenticate over SASL_PLAINTEXT: confluent-kafka (librdkafka) with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512, kafka-python and aiokafka with PLAIN and SCRAM-SHA-512, kcat (Debian's librdkafka 2.0.2, which
echoes the SCRAM nonce its own way), kafkajs and @confluentinc/kafka-javascript with SCRAM-SHA-512, Java
kafka-clients 4.3 and 3.9 with SCRAM-SHA-512 (and the Admin's describe/alterUserScramCredentials creating a user
that then logs in, and KIP-368 re-authentication under a consumer); each produces a record and reads it back. A
wrong password fails with the client's own authentication error (not a hang), with no traceback and no password in
the server's log.

The server: one ``walgate serve`` whose one Kafka listener is ``SASL_PLAINTEXT://127.0.0.1:PORT``
(``WALGATE_LISTENERS``), root's password from ``WALGATE_ROOT_PASSWORD``; users are made with SQL over HTTP Basic auth
as root (sasl_node.py, shared with the SASL_SSL tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from compat_procs import Run
from sasl_node import ROOT_PASSWORD, SaslNode, check_clean_log, create_topic, events, serve

TOPIC = "secured"
USERS = {"alice": "wonder-land", "bob": "build3r"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslNode]:
    with serve(tmp_path_factory.mktemp("walgate-sasl")) as node:
        for user, password in USERS.items():
            node.sql(f"CREATE USER {user} PASS '{password}'")
        create_topic(node, TOPIC)
        yield node
        check_clean_log(node, *USERS.values(), "not-the-password")


PYTHON_CASES = [("ck", "PLAIN"), ("ck", "SCRAM-SHA-256"), ("ck", "SCRAM-SHA-512"), ("kp", "PLAIN"),
                ("kp", "SCRAM-SHA-512"), ("aio", "PLAIN"), ("aio", "SCRAM-SHA-512")]


@pytest.mark.parametrize(("library", "mechanism"), PYTHON_CASES)
def test_clients_log_in(secured: SaslNode, pyclient: Callable[..., Run], library: str, mechanism: str):
    run = pyclient("sasl_login.py", library, secured.bootstrap, mechanism, "alice", USERS["alice"], TOPIC, timeout=60)
    assert events(run)[-1] == {"event": "ok", "library": library, "value": f"hello from {library} over {mechanism}"}


# each client's own error for a refused authentication: kafka-python and aiokafka log the broker's
# SASL_AUTHENTICATION_FAILED answer and fail their bootstrap
AUTH_ERRORS = {"ck": "_AUTHENTICATION", "kp": "KafkaTimeoutError", "aio": "KafkaConnectionError"}


@pytest.mark.parametrize(("library", "mechanism"), [("ck", "SCRAM-SHA-512"), ("ck", "PLAIN"), ("kp", "PLAIN"),
                                                    ("aio", "SCRAM-SHA-512")])
def test_a_wrong_password_is_the_clients_authentication_error(secured: SaslNode, pyclient: Callable[..., Run],
                                                              library: str, mechanism: str):
    run = pyclient("sasl_login.py", library, secured.bootstrap, mechanism, "alice", "not-the-password", TOPIC,
                   timeout=60)
    last = events(run)[-1]
    assert last["event"] == "error" and last["name"] == AUTH_ERRORS[library], last
    assert "Authentication failed: Invalid username or password" in run.stdout + run.stderr


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_kcat_logs_in(secured: SaslNode, kcat: Callable[..., Run], tmp_path: Path, mechanism: str):
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}",
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


@pytest.mark.parametrize("mechanism", ["scram-sha-512", "plain"])
def test_kafkajs_logs_in(secured: SaslNode, node: Callable[..., Run], mechanism: str):
    run = node("kjs_sasl.js", secured.bootstrap, mechanism, "bob", USERS["bob"], TOPIC)
    assert events(run)[-1] == {"event": "ok", "value": "hello from kafkajs"}
    wrong = node("kjs_sasl.js", secured.bootstrap, mechanism, "bob", "not-the-password", TOPIC, check=False)
    assert events(wrong)[-1]["event"] == "error" and events(wrong)[-1]["name"] == "KafkaJSSASLAuthenticationError"


@pytest.mark.parametrize("mechanism", ["scram-sha-512", "plain"])
def test_kafka_javascript_logs_in(secured: SaslNode, node: Callable[..., Run], mechanism: str):
    run = node("ckjs_sasl.js", secured.bootstrap, mechanism, "bob", USERS["bob"], TOPIC)
    assert events(run)[-1] == {"event": "ok", "value": "hello from kafka-javascript"}


@pytest.mark.parametrize("clients", ["4.3.0", "3.9"])
def test_java_scram_sha_512_the_scram_credentials_admin_and_reauthentication(secured: SaslNode, tmp_path: Path,
                                                                             java: Callable[..., Run], clients: str):
    with serve(tmp_path, connections_max_reauth_ms="1500") as reauth:  # sessions of 1.5 s
        create_topic(reauth, TOPIC)
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
        log = reauth.server.log()
        assert log.count("re-authenticated as User:root") >= 2
        assert "expired" not in log and "Traceback" not in log
