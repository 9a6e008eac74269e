"""Kafka's dynamic broker configs (walgate/storage/broker_configs.py): which names are dynamic at which level, and
the values refused, with Kafka's messages."""

from __future__ import annotations

import pytest

from walgate.storage.broker_configs import default_of, in_force, is_dynamic, spec_of, synonyms_of, validate
from walgate.storage.errors import InvalidValue

STATIC = {"background.threads": "10", "num.io.threads": "8", "log.cleaner.threads": "1",
          "listeners": "PLAIN://127.0.0.1:9092,SSL://127.0.0.1:9093"}


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
    validate({**per_broker, **cluster}, True, STATIC, {}, {})
    validate(cluster, False, STATIC, {}, {})
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
    ({"log.retention.ms": "0"}, False, r"^requirement failed: log.retention.ms must be unlimited \(-1\) or"),
    ({"log.cleaner.dedupe.buffer.size": "2097152", "log.cleaner.threads": "2"}, True,
     r"^requirement failed: log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.$"),
    ({"log.cleaner.threads": "0"}, False, r"^/ by zero$"),
    ({"max.connections.per.ip": "0"}, False, "can be set to zero only if max.connections.per.ip.overrides"),
    ({"num.network.threads": "7"}, False, r"^Invalid value org.apache.kafka.common.config.ConfigException: Dynamic "
     r"thread count update validation failed for num.network.threads=7, value should not be greater than double "
     r"the current value 3 for configuration Invalid dynamic configuration$"),
    ({"listener.name.ssl.num.network.threads": "7"}, False, "num.network.threads=7, value should not be greater"),
    ({"listener.name.plain.max.connections": "0"}, True, r"ConfigException: Invalid max.connections 0 for"),
    ({"max.connection.creation.rate": "0"}, False, r"ConfigException: Invalid max.connection.creation.rate 0 for"),
])
def test_what_kafka_refuses_is_refused_with_its_message(configs: dict[str, str], per_broker: bool, why: str) -> None:
    with pytest.raises(InvalidValue, match=why):
        validate(configs, per_broker, STATIC, {}, {})


def test_a_thread_count_is_checked_against_the_value_in_force_and_only_when_it_changes() -> None:
    validate({"background.threads": "40"}, False, {"background.threads": "20"}, {}, {})
    validate({"background.threads": "40"}, False, {}, {"background.threads": "40"}, {})
    with pytest.raises(InvalidValue, match="double the current value 10"):
        validate({"background.threads": "40"}, False, {}, {}, {})  # Kafka's default, 10, is in force
    # the node sets its own: a cluster-wide value does not change what is in force here (Kafka checks nothing)
    validate({"background.threads": "40"}, False, STATIC, {}, {"background.threads": "10"})
    with pytest.raises(InvalidValue, match="double the current value 10"):
        validate({"background.threads": "40"}, True, STATIC, {}, {"background.threads": "10"})


def test_kafkas_checks_look_at_each_listener_and_at_what_the_change_puts_in_force() -> None:
    # one listener's own count, checked against its own count in force; the other listener keeps the plain one
    validate({"listener.name.ssl.num.network.threads": "12"}, True, STATIC, {"num.network.threads": "6"}, {})
    with pytest.raises(InvalidValue, match="num.network.threads=13, value should not be greater than double"):
        validate({"listener.name.ssl.num.network.threads": "13"}, True, STATIC, {"num.network.threads": "6"}, {})
    # the cleaner's threads are checked when any log.cleaner config changes, against the count in force
    with pytest.raises(InvalidValue, match="Log cleaner threads cannot be reduced to less than half the current "
                                           "value 4"):
        validate({"log.cleaner.backoff.ms": "100"}, True, STATIC, {"log.cleaner.threads": "1"},
                 {"log.cleaner.threads": "4"})
    validate({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:5"}, False, STATIC, {}, {})


def test_unit_synonyms_are_kafkas_and_a_level_that_sets_one_hides_the_others_below() -> None:
    assert synonyms_of("log.retention.hours") == ("log.retention.ms", "log.retention.minutes", "log.retention.hours")
    assert synonyms_of("log.roll.jitter.ms") == ("log.roll.jitter.ms", "log.roll.jitter.hours")
    assert synonyms_of("listener.name.plain.ssl.key.password") == ("listener.name.plain.ssl.key.password",
                                                                   "ssl.key.password")
    assert synonyms_of("listener.name.sasl.scram-sha-256.sasl.jaas.config", listener_override=False) == (
        "listener.name.sasl.scram-sha-256.sasl.jaas.config",)
    assert in_force({"log.retention.hours": "1", "log.roll.hours": "2"}, {"log.retention.ms": "5"}, {}) == {
        "log.roll.hours": "2", "log.retention.ms": "5"}
    with pytest.raises(InvalidValue, match="must be unlimited"):  # deleting the ms brings 0 hours in force
        validate({}, False, {"log.retention.hours": "0"}, {"log.retention.ms": "5"}, {})
    validate({"log.retention.ms": "1"}, False, {"log.retention.hours": "0"}, {}, {})  # the ms hide the hours


def test_a_requirement_is_checked_only_when_the_change_touches_what_it_reads() -> None:
    small = {**STATIC, "log.cleaner.dedupe.buffer.size": "1024"}  # a valid walgate setting, under Kafka's 1 MiB
    validate({"background.threads": "11"}, False, small, {}, {})
    with pytest.raises(InvalidValue, match="at least 1MB per cleaner thread"):
        validate({"log.cleaner.dedupe.buffer.size": "2048"}, False, small, {}, {})
