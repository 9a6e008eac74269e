"""DescribeConfigs of the broker describes every static setting walgate was started with, with its real value and
STATIC_BROKER_CONFIG, read by the Java Admin (kafka-clients 4.3) as ``kafka-configs --describe --entity-type
brokers`` does: a walgate started from a ``server.properties`` with a PLAINTEXT, a SASL_PLAINTEXT and an SSL listener,
``sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512``, ``connections.max.reauth.ms=10000`` (and a listener's own value),
an SSL key password (described as Kafka does a password: null and sensitive), ``offsets.topic.num.partitions=3``
(the group coordinator's partitions of the data dir it makes). librdkafka's 0142_reauthentication
reads ``connections.max.reauth.ms`` this way to decide whether the broker re-authenticates.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from compat_procs import wait_accepting

from livewalgate import free_port, running_walgate
from testcerts import make_certs


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    work = tmp_path_factory.mktemp("static-configs")
    certs = make_certs(work / "certs")
    plain, sasl, tls = free_port(), free_port(), free_port()
    config = work / "server.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl},SSL://127.0.0.1:{tls}\n"
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512\nconnections.max.reauth.ms=10000\n"
        "listener.name.sasl_plaintext.connections.max.reauth.ms=20000\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={certs.server}\nssl.key.password=not-to-be-shown\n"
        "group.initial.rebalance.delay.ms=1500\nsuper.users=User:root;User:admin\noffsets.topic.num.partitions=3\n"
    )
    with running_walgate(work / "walgate", "--config", str(config), kafka_port=plain) as server:
        assert wait_accepting(plain, 10, server.proc), server.log()
        yield f"127.0.0.1:{plain}", work


def test_java_admin_describes_the_settings_walgate_was_started_with(started: tuple[str, Path], java) -> None:
    bootstrap, work = started
    names = ["sasl.enabled.mechanisms", "connections.max.reauth.ms",
             "listener.name.sasl_plaintext.connections.max.reauth.ms", "ssl.key.password", "ssl.keystore.location",
             "group.initial.rebalance.delay.ms", "super.users", "log.dirs", "node.id", "offsets.topic.num.partitions"]
    run = java("BrokerConfigs.java", bootstrap, "0", *names, timeout=120)
    got = {d.pop("name"): d for d in map(json.loads, run.stdout.splitlines())}
    static = "STATIC_BROKER_CONFIG"

    def entry(value: str | None, kind: str, *, sensitive: bool = False, read_only: bool = True) -> dict:
        return {"value": value, "source": static, "type": kind, "sensitive": sensitive, "read_only": read_only}

    assert got == {
        "sasl.enabled.mechanisms": entry("PLAIN,SCRAM-SHA-512", "LIST", read_only=False),
        "connections.max.reauth.ms": entry("10000", "LONG"),
        "listener.name.sasl_plaintext.connections.max.reauth.ms": entry("20000", "LONG"),
        "ssl.key.password": entry(None, "PASSWORD", sensitive=True, read_only=False),
        "ssl.keystore.location": entry(str(work / "certs/server.pem"), "STRING", read_only=False),
        "group.initial.rebalance.delay.ms": entry("1500", "INT"),
        "super.users": entry("User:root;User:admin", "STRING"),
        "log.dirs": entry(str(work / "walgate/data"), "STRING"),
        "node.id": entry("0", "INT"),
        "offsets.topic.num.partitions": entry("3", "INT"),  # the data dir's, made by this start
    }, run.describe()
    assert "not-to-be-shown" not in run.stdout
