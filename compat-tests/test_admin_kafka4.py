"""walgate only: issue 17's admin surface as Kafka 4 has it, with real clients.

* the Java Admin (kafka-clients 4.3): ``describeTopics`` / ``describeCluster`` with ``includeAuthorizedOperations``
  (every operation of the resource type: no authorizer), GROUP config resources (KIP-848
  ``consumer.heartbeat.interval.ms``) and dynamic BROKER configs (``log.retention.ms`` cluster-wide,
  ``log.segment.bytes`` for the node) through ``incrementalAlterConfigs`` / ``describeConfigs``, a topic's configs
  then following the broker's (DYNAMIC_DEFAULT_BROKER_CONFIG / DYNAMIC_BROKER_CONFIG), a read-only broker config
  refused with InvalidRequestException; Kafka's per-broker (``sasl.kerberos.min.time.before.relogin``, a listener's
  password) and cluster-wide (``background.threads``, ``log.cleanup.policy`` APPEND) dynamic configs, their
  synonyms, and what Kafka refuses, with its exceptions and messages; a topic's configs with their synonyms in
  Kafka's order (``includeSynonyms``); Kafka's unit synonyms (``log.retention.hours``) refused at run time and its
  thread-count and requirement checks (``num.network.threads``, ``log.cleaner.threads``,
  ``log.cleaner.dedupe.buffer.size``) with Kafka's messages;
* confluent-kafka's ``describe_configs`` of a topic: its synonyms (the topic's, the broker's ``log.retention.ms``, the
  static ``log.retention.hours`` default);
* confluent-kafka's ``AdminClient.alter_configs`` (legacy AlterConfigs) on BROKER resources: whole-set replace;
* kafka-python's admin ``alter_configs(incremental=False)``: the legacy AlterConfigs API (key 33);
* a confluent-kafka (librdkafka) producer to an invalid topic name: its delivery report is
  TOPIC_EXCEPTION (Kafka's INVALID_TOPIC_EXCEPTION in Metadata), not a message timeout; a Java producer's send
  fails with InvalidTopicException, not a TimeoutException after ``max.block.ms``.
"""

from __future__ import annotations

import json

import pytest
from compat_brokers import Walgate
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigSource
from confluent_kafka.admin import ConfigResource as ConfluentConfigResource
from confluent_kafka.admin import NewTopic as NewConfluentTopic
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic


def steps(run) -> dict[str, dict]:
    return {d["step"]: d for d in (json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))}


TOPIC_OPS = ["ALTER", "ALTER_CONFIGS", "CREATE", "DELETE", "DESCRIBE", "DESCRIBE_CONFIGS", "READ", "WRITE"]
CLUSTER_OPS = ["ALTER", "ALTER_CONFIGS", "CLUSTER_ACTION", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS",
               "IDEMPOTENT_WRITE"]


def test_java_admin_authorized_operations_group_and_broker_configs(walgate: Walgate, java) -> None:
    run = java("AdminKafka4.java", walgate.bootstrap, "k4-topic", "k4-group", timeout=120, check=False)
    got = steps(run)
    assert "error" not in got and run.returncode == 0, run.describe()
    assert got["authorized"]["topic"] == TOPIC_OPS, run.describe()
    assert got["authorized"]["cluster"] == CLUSTER_OPS, run.describe()
    assert got["group_default"]["session"] == ["45000", "DEFAULT_CONFIG"], run.describe()
    assert got["group_set"]["heartbeat"] == ["6000", "DYNAMIC_GROUP_CONFIG"], run.describe()
    assert got["broker_set"] == {
        "step": "broker_set", "broker_retention": ["3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        "broker_segment": ["2097152", "DYNAMIC_BROKER_CONFIG"],
        "topic_retention": ["3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        "topic_segment": ["2097152", "DYNAMIC_BROKER_CONFIG"]}, run.describe()
    assert got["read_only"]["error"] == "InvalidRequestException", run.describe()
    kerberos = "sasl.kerberos.min.time.before.relogin"
    assert got["dynamic"] == {
        "step": "dynamic", "kerberos": ["58000", "DYNAMIC_BROKER_CONFIG"],
        "kerberos_synonyms": [["58000", "DYNAMIC_BROKER_CONFIG"], ["60000", "DEFAULT_CONFIG"]],
        "threads": ["9", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        "threads_synonyms": [["9", "DYNAMIC_DEFAULT_BROKER_CONFIG"], ["10", "DEFAULT_CONFIG"]],
        "policy": ["delete,compact", "DYNAMIC_DEFAULT_BROKER_CONFIG"], "broker_id_read_only": True,
        "password": [None, True], "cluster": ["9", "DYNAMIC_DEFAULT_BROKER_CONFIG"], "cluster_kerberos": None}, run.describe()
    refused = got["dynamic_refused"]
    assert refused["per_broker_on_cluster"] == [
        "InvalidRequestException", "Cannot update these configs at default cluster level, broker id must be "
        f"specified: Set({kerberos})"], run.describe()
    assert refused["doubled"][0] == "InvalidRequestException" and "double the current value 9" in refused["doubled"][1]
    assert refused["bad_type"] == ["InvalidRequestException", f"Invalid value soon for configuration {kerberos}: "
                                                              "Not a number of type LONG"], run.describe()
    assert refused["append_not_list"] == ["InvalidConfigurationException", "Config value append is not allowed for "
                                                                           f"config key: {kerberos}"], run.describe()
    assert refused["unknown"] == ["InvalidRequestException",
                                  "Cannot update these configs dynamically: Set(no.such.config)"], run.describe()
    assert got["topic_synonyms"] == {
        "step": "topic_synonyms", "retention": ["5000", "DYNAMIC_TOPIC_CONFIG"],
        "retention_synonyms": [["retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG"],
                               ["log.retention.ms", "7200000", "DYNAMIC_BROKER_CONFIG"],
                               ["log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
                               ["log.retention.hours", "168", "DEFAULT_CONFIG"]],
        "segment": ["2097152", "DYNAMIC_BROKER_CONFIG"],
        "segment_synonyms": [["log.segment.bytes", "2097152", "DYNAMIC_BROKER_CONFIG"],
                             ["log.segment.bytes", "67108864", "DEFAULT_CONFIG"]],
        "policy_synonyms": [["log.cleanup.policy", "delete,compact", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
                            ["log.cleanup.policy", "delete", "DEFAULT_CONFIG"]],
        "roll_synonyms": []}, run.describe()  # log.roll.ms is null in Kafka: log.roll.hours is not listed
    wrapped = "Invalid value org.apache.kafka.common.config.ConfigException: {} for configuration Invalid dynamic " \
              "configuration"
    assert got["checks_refused"] == {
        "step": "checks_refused",
        "hours": ["InvalidRequestException", "Cannot update these configs dynamically: Set(log.retention.hours)"],
        "network_threads": ["InvalidRequestException", wrapped.format(
            "Dynamic thread count update validation failed for num.network.threads=7, value should not be greater "
            "than double the current value 3")],
        "cleaner_threads": ["InvalidRequestException", "/ by zero"],
        "dedupe": ["InvalidRequestException", "requirement failed: log.cleaner.dedupe.buffer.size must be at least "
                                              "1MB per cleaner thread."]}, run.describe()


def test_confluent_kafka_legacy_alter_configs_on_the_broker(walgate: Walgate) -> None:
    """librdkafka's AlterConfigs (key 33) on a BROKER resource: the node's whole set replaced, a static config
    refused with Kafka's message."""
    admin = AdminClient({"bootstrap.servers": walgate.bootstrap})
    kerberos = "sasl.kerberos.min.time.before.relogin"

    def alter(name: str, configs: dict[str, str]) -> None:
        resource = ConfluentConfigResource("BROKER", name, set_config=configs)
        for future in admin.alter_configs([resource], request_timeout=30).values():
            future.result(30)

    def node(*keys: str) -> dict[str, tuple[str | None, str]]:
        [future] = admin.describe_configs([ConfluentConfigResource("BROKER", "0")], request_timeout=30).values()
        entries = future.result(30)
        return {k: (entries[k].value, ConfigSource(entries[k].source).name) for k in keys}

    alter("0", {kerberos: "58000", "sasl.login.refresh.window.factor": "0.9"})
    assert node(kerberos, "sasl.login.refresh.window.factor") == {
        kerberos: ("58000", "DYNAMIC_BROKER_CONFIG"), "sasl.login.refresh.window.factor": ("0.9", "DYNAMIC_BROKER_CONFIG")}
    alter("0", {kerberos: "59000"})  # the whole set: the window factor goes back to Kafka's default
    assert node(kerberos, "sasl.login.refresh.window.factor") == {
        kerberos: ("59000", "DYNAMIC_BROKER_CONFIG"), "sasl.login.refresh.window.factor": ("0.8", "DEFAULT_CONFIG")}
    with pytest.raises(KafkaException) as refused:  # (librdkafka itself refuses the cluster default's name "")
        alter("0", {"broker.id": "3"})
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST, refused.value
    assert "Cannot update these configs dynamically: Set(broker.id)" in refused.value.args[0].str()
    assert node(kerberos) == {kerberos: ("59000", "DYNAMIC_BROKER_CONFIG")}  # a refused set changes nothing
    assert "AlterConfigs broker 0 (replaced by " in walgate.log()


def test_confluent_kafka_describes_a_topics_config_synonyms(walgate: Walgate) -> None:
    """librdkafka's DescribeConfigs (with synonyms) of a topic: the topic's own value, then its broker config
    (``log.retention.ms``) at each level that sets it, then the static ``log.retention.hours`` default."""
    admin = AdminClient({"bootstrap.servers": walgate.bootstrap})
    node = ConfluentConfigResource("BROKER", "0", incremental_configs=[
        ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    topic = ConfluentConfigResource("TOPIC", "synonyms-topic", incremental_configs=[
        ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.create_topics([NewConfluentTopic("synonyms-topic", 1, 1)], request_timeout=30).values():
        future.result(30)
    for resource in (node, topic):
        for future in admin.incremental_alter_configs([resource], request_timeout=30).values():
            future.result(30)
    try:
        [future] = admin.describe_configs([ConfluentConfigResource("TOPIC", "synonyms-topic")],
                                          request_timeout=30).values()
        retention = future.result(30)["retention.ms"]
    finally:
        node = ConfluentConfigResource("BROKER", "0", incremental_configs=[
            ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
        for future in admin.incremental_alter_configs([node], request_timeout=30).values():
            future.result(30)
    assert (retention.value, ConfigSource(retention.source).name) == ("5000", "DYNAMIC_TOPIC_CONFIG")
    synonyms = [(s.name, s.value, ConfigSource(s.source).name) for s in retention.synonyms.values()]
    # confluent-kafka keys the synonyms by name: the levels of log.retention.ms collapse into one (the last)
    assert [name for name, _, _ in synonyms] == ["retention.ms", "log.retention.ms", "log.retention.hours"], synonyms
    assert synonyms[0] == ("retention.ms", "5000", "DYNAMIC_TOPIC_CONFIG"), synonyms
    assert synonyms[-1] == ("log.retention.hours", "168", "DEFAULT_CONFIG"), synonyms


def test_kafka_python_legacy_alter_configs(walgate: Walgate) -> None:
    admin = KafkaAdminClient(bootstrap_servers=walgate.bootstrap, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic("legacy-configs", 1, 1, topic_configs={"segment.bytes": "1048576"})])
        result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "legacy-configs",
                                                     configs={"retention.ms": "7200000"})], incremental=False)
        assert result == {"topic": {"legacy-configs": "OK"}}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "legacy-configs")],
                                           config_filter="modified")
    finally:
        admin.close()
    values = {k: v["value"] for k, v in described["topic"]["legacy-configs"].items()}
    assert values["retention.ms"] == "7200000"
    assert values["segment.bytes"] == "1048576"  # the client re-sends the other dynamic configs it found
    assert "AlterConfigs topic legacy-configs (replaced by " in walgate.log()


def test_a_producer_to_an_invalid_topic_name_gets_topic_exception(walgate: Walgate) -> None:
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": walgate.bootstrap, "message.timeout.ms": 120_000})
    producer.produce("bad$#!name", b"v", on_delivery=lambda err, msg: reports.append(err))
    producer.flush(60)  # well under message.timeout.ms: only an answer from the broker ends it in time
    assert len(reports) == 1 and reports[0] is not None, reports
    assert reports[0].code() == KafkaError.TOPIC_EXCEPTION, reports[0]


def test_a_java_producer_to_an_invalid_topic_name_gets_invalid_topic_exception(walgate: Walgate, java) -> None:
    run = java("Producer.java", walgate.bootstrap, "bad$#!name", "none", "1", "--partitions", "1",
               "--max-block-ms", "60000", timeout=120, check=False)
    [summary] = [d for d in (json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))
                 if d["event"] == "summary"]
    assert summary["delivered"] == 0 and len(summary["errors"]) == 1, run.describe()
    assert summary["errors"][0]["error"].startswith("InvalidTopicException"), run.describe()  # not a TimeoutException
