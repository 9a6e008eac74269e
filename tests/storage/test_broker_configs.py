"""Kafka's dynamic broker configs (walgate/storage/broker_configs.py): which names are dynamic at which level, and
the values refused, with Kafka's messages."""

from __future__ import annotations

import pytest

from walgate.storage.broker_configs import default_of, is_dynamic, spec_of, validate
from walgate.storage.errors import InvalidValue

STATIC = {"background.threads": "10", "num.io.threads": "8", "log.cleaner.threads": "1"}


def test_kafkas_dynamic_configs_are_taken_per_broker_and_cluster_wide() -> None:
    per_broker = {"sasl.kerberos.min.time.before.relogin": "58000", "ssl.client.auth": "required",
                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                  "listener.name.plain.ssl.keystore.password": "secret",
                  "listener.name.sasl.plain.sasl.jaas.config": "x required;",
                  "listener.name.plain.max.connections": "100", "sasl.login.refresh.window.factor": "0.5"}
    cluster = {"background.threads": "9", "log.cleanup.policy": "delete,compact", "log.retention.ms": "-1",
               "message.max.bytes": "2000000", "max.connections.per.ip": "50", "producer.id.expiration.ms": "1000",
               "leader.replication.throttled.rate": "1000000",
               "metric.reporters": "", "max.connections": "10", "num.network.threads": "6"}
    validate({**per_broker, **cluster}, True, STATIC)
    validate(cluster, False, STATIC)
    assert is_dynamic("background.threads") and is_dynamic("ssl.keystore.location") and not is_dynamic("broker.id")
    assert not is_dynamic("listener.name.plain.ssl.keystore.password")  # Kafka answers these read-only
    assert default_of("sasl.kerberos.min.time.before.relogin") == "60000" and default_of("ssl.provider") is None
    assert spec_of("listener.name.plain.ssl.key.password").type == "PASSWORD"  # type: ignore[union-attr]


@pytest.mark.parametrize(("configs", "per_broker", "why"), [
    ({"broker.id": "3"}, True, r"Cannot update these configs dynamically: Set\(broker.id\)"),
    ({"log.retention.hours": "1", "node.id": "2"}, True, r"dynamically: Set\(log.retention.hours, node.id\)"),
    ({"no.such.config": "1"}, True, "dynamically"),
    ({"listeners": "PLAINTEXT://:9093"}, True, "dynamically"),
    ({"listener.name.plain.log.retention.ms": "1"}, True, "dynamically"),
    ({"ssl.keystore.location": "/k.jks"}, True, "only per-listener using the listener prefix"),
    ({"sasl.kerberos.min.time.before.relogin": "58000"}, False,
     r"at default cluster level, broker id must be specified: Set\(sasl.kerberos.min.time.before.relogin\)"),
    ({"listener.name.plain.ssl.key.password": "x"}, False, "default cluster level"),
    ({"sasl.kerberos.min.time.before.relogin": "soon"}, True,
     "Invalid value soon for configuration sasl.kerberos.min.time.before.relogin: Not a number of type LONG"),
    ({"sasl.login.refresh.buffer.seconds": "40000"}, True, "Not a number of type SHORT"),
    ({"sasl.login.refresh.window.factor": "0.2"}, True, "sasl.login.refresh.window.factor: Value must be"),
    ({"ssl.client.auth": "maybe"}, True, "String must be one of: required, requested, none"),
    ({"transaction.partition.verification.enable": "yes"}, False, "either true or false"),
    ({"log.retention.ms": "-2"}, False, "retention.ms"),
    ({"log.cleanup.policy": "delete,nonsense"}, False, "String must be one of"),
    ({"background.threads": "0"}, False, "background.threads: Value must be at least 1"),
    ({"num.replica.fetchers": "0"}, True, "num.replica.fetchers=0, value should be at least 1"),
    ({"background.threads": "4"}, False, "at least half the current value 10"),
    ({"num.io.threads": "17"}, True, "not be greater than double the current value 8"),
    ({"log.cleaner.threads": "3"}, False, "Log cleaner threads cannot be increased to more than double"),
])
def test_what_kafka_refuses_is_refused_with_its_message(configs: dict[str, str], per_broker: bool, why: str) -> None:
    with pytest.raises(InvalidValue, match=why):
        validate(configs, per_broker, STATIC)


def test_a_thread_count_is_checked_against_the_value_in_force_and_only_when_it_changes() -> None:
    validate({"background.threads": "40"}, False, {"background.threads": "20"})
    validate({"background.threads": "40"}, False, {"background.threads": "40"})
    with pytest.raises(InvalidValue, match="double the current value 10"):
        validate({"background.threads": "40"}, False, {})  # Kafka's default, 10, is in force
    # the node sets its own: a cluster-wide value does not change what is in force here (Kafka checks nothing)
    validate({"background.threads": "40"}, False, {"background.threads": "10"}, overridden={"background.threads"})
    with pytest.raises(InvalidValue, match="double the current value 10"):
        validate({"background.threads": "40"}, True, {"background.threads": "10"}, overridden={"background.threads"})
