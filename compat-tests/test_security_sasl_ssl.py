"""Real clients authenticate over SASL_SSL (TLS, then SASL): confluent-kafka (librdkafka), kafka-python, aiokafka,
kafkajs, @confluentinc/kafka-javascript, kcat and Java kafka-clients 4.3 and 3.9 each log in with SCRAM-SHA-512,
trusting the test CA, produce a record and read it back; confluent-kafka and Java 4.3 also with PLAIN (a clear-text
password is fine inside TLS). A wrong password fails with the client's own authentication error. Spark's Kafka
source path (java/SparkSource.java, kafka-clients 3.9 as Spark 4 ships) reads a topic with the ``kafka.*`` options
pipeline/meters.py builds for ``security.protocol=SASL_SSL`` and a password file.

The server: one ``walgate serve`` whose one Kafka listener is ``SASL_SSL://127.0.0.1:PORT`` advertised as
``localhost:PORT``, with testcerts' server certificate (PEM keystore, ``WALGATE_SSL_KEYSTORE_LOCATION``), root's
password from ``WALGATE_ROOT_PASSWORD``, users made with SQL (``CREATE USER ... PASS``) over HTTP Basic auth
(sasl_node.py, shared with the SASL_PLAINTEXT tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from compat_procs import Run
from sasl_node import SaslNode, check_clean_log, create_topic, events, serve

from pipeline import meters
from testcerts import make_certs

TOPIC = "secured_tls"
USERS = {"alice": "wonder-land", "bob": "build3r"}
WRONG = "not-the-password"
REFUSED = "Authentication failed: Invalid username or password"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslNode]:
    work = tmp_path_factory.mktemp("walgate-sasl-ssl")
    certs = make_certs(work / "certs")
    with serve(work / "walgate", "SASL_SSL", "localhost", certs.ca, ssl_keystore_location=str(certs.server)) as secured:
        for user, password in USERS.items():
            secured.sql(f"CREATE USER {user} PASS '{password}'")
        create_topic(secured, TOPIC)
        yield secured
        check_clean_log(secured, *USERS.values(), WRONG)


@pytest.mark.parametrize(("library", "mechanism"), [("ck", "SCRAM-SHA-512"), ("ck", "PLAIN"), ("kp", "SCRAM-SHA-512"),
                                                    ("aio", "SCRAM-SHA-512")])
def test_python_clients_log_in_over_tls(secured: SaslNode, pyclient: Callable[..., Run], library: str, mechanism: str):
    run = pyclient("sasl_login.py", library, secured.bootstrap, mechanism, "alice", USERS["alice"], TOPIC, str(secured.ca),
                   timeout=60)
    assert events(run)[-1] == {"event": "ok", "library": library, "value": f"hello from {library} over {mechanism}"}


def test_confluent_kafka_wrong_password_is_its_authentication_error(secured: SaslNode, pyclient: Callable[..., Run]):
    run = pyclient("sasl_login.py", "ck", secured.bootstrap, "SCRAM-SHA-512", "alice", WRONG, TOPIC, str(secured.ca),
                   timeout=60)
    last = events(run)[-1]
    assert last["event"] == "error" and last["name"] == "_AUTHENTICATION", last
    assert REFUSED in run.stdout + run.stderr


def test_kcat_scram_sha_512_over_tls(secured: SaslNode, kcat: Callable[..., Run], tmp_path: Path):
    auth = ["-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={secured.ca}", "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", "sasl.username=bob"]
    (tmp_path / "records").write_text("hello from kcat over tls\n")
    kcat("-b", secured.bootstrap, *auth, "-X", f"sasl.password={USERS['bob']}", "-P", "-t", TOPIC, "-p", "0",
         "-l", str(tmp_path / "records"))
    read = kcat("-b", secured.bootstrap, *auth, "-X", f"sasl.password={USERS['bob']}", "-C", "-t", TOPIC, "-p", "0",
                "-o", "beginning", "-e", "-q")
    assert "hello from kcat over tls" in read.stdout.splitlines()


def test_kafkajs_scram_sha_512_over_tls(secured: SaslNode, node: Callable[..., Run]):
    run = node("kjs_sasl.js", secured.bootstrap, "scram-sha-512", "bob", USERS["bob"], TOPIC, str(secured.ca))
    assert events(run)[-1] == {"event": "ok", "value": "hello from kafkajs"}
    wrong = node("kjs_sasl.js", secured.bootstrap, "scram-sha-512", "bob", WRONG, TOPIC, str(secured.ca), check=False)
    assert events(wrong)[-1]["event"] == "error" and events(wrong)[-1]["name"] == "KafkaJSSASLAuthenticationError"


def test_kafka_javascript_scram_sha_512_over_tls(secured: SaslNode, node: Callable[..., Run]):
    run = node("ckjs_sasl.js", secured.bootstrap, "scram-sha-512", "bob", USERS["bob"], TOPIC, str(secured.ca))
    assert events(run)[-1] == {"event": "ok", "value": "hello from kafka-javascript"}


def java_properties(secured: SaslNode, path: Path, mechanism: str, user: str, password: str) -> str:
    """A client properties file for SASL_SSL, as a Java application is configured (PEM truststore)."""
    module = meters.LOGIN_MODULES[mechanism]
    path.write_text(f"security.protocol=SASL_SSL\nssl.truststore.type=PEM\nssl.truststore.location={secured.ca}\n"
                    f"sasl.mechanism={mechanism}\n"
                    f'sasl.jaas.config={module} required username="{user}" password="{password}";\n')
    return str(path)


@pytest.mark.parametrize(("clients", "mechanism"), [("4.3.0", "SCRAM-SHA-512"), ("3.9", "SCRAM-SHA-512"),
                                                    ("4.3.0", "PLAIN"), ("3.9", "PLAIN")])
def test_java_logs_in_over_tls(secured: SaslNode, java: Callable[..., Run], tmp_path: Path, clients: str, mechanism: str):
    topic = f"java_{mechanism}_{clients}".replace("-", "_").replace(".", "_")
    run = java("SecureRoundTrip.java", secured.bootstrap, topic, "5",
               java_properties(secured, tmp_path / "client.properties", mechanism, "alice", USERS["alice"]),
               clients=clients)
    assert run.events("cluster") == [{"event": "cluster", "nodes": [secured.bootstrap]}], run.describe()
    assert run.events("consumed") == [{"event": "consumed", "count": 5, "values_ok": True}], run.describe()


def test_java_wrong_password_is_a_sasl_authentication_exception(secured: SaslNode, java: Callable[..., Run],
                                                                tmp_path: Path):
    run = java("SecureRoundTrip.java", secured.bootstrap, TOPIC, "1",
               java_properties(secured, tmp_path / "client.properties", "SCRAM-SHA-512", "alice", WRONG), check=False)
    [error] = run.events("error")
    assert run.returncode == 2 and error["name"] == "SaslAuthenticationException", run.describe()
    assert "Invalid username or password" in error["message"], run.describe()


def test_spark_source_reads_over_sasl_ssl_with_the_pipelines_options(secured: SaslNode, java: Callable[..., Run],
                                                                     tmp_path: Path):
    from confluent_kafka import Producer

    topic = "spark_sasl_ssl"
    create_topic(secured, topic, partitions=2)
    producer = Producer(secured.librdkafka())
    values = [f"spark-{i}" for i in range(6)]
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), key=f"k{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    secret = tmp_path / "password"
    secret.write_text(USERS["alice"] + "\n")  # as a Docker secret
    args = meters.parser().parse_args(["--out", str(tmp_path / "out"), "--kafka-option", "security.protocol=SASL_SSL",
                                       "--kafka-option", "ssl.truststore.type=PEM",
                                       "--kafka-option", f"ssl.truststore.location={secured.ca}",
                                       "--sasl-user", "alice", "--sasl-password-file", str(secret)])
    options = [arg for key, value in meters.client_options(args).items() for arg in (f"--kafka.{key}", value)]
    run = java("SparkSource.java", "--bootstrap", secured.bootstrap, "--topic", topic, *options, clients="3.9",
               check=False)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    assert [p["leader"] for p in run.events("describe")[0]["partitions"]] == [secured.bootstrap] * 2, run.describe()
    assert sorted(r["value"] for r in run.events("record")) == values, run.describe()
    assert run.events("summary")[0]["records"] == len(values), run.describe()
