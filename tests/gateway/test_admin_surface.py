"""Issue 17's admin surface as Kafka 4 has it, over a real socket (kio encodes the requests and decodes the answers):
INVALID_TOPIC_EXCEPTION for names Kafka could never create, authorized operations when asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes
from kio.schema.errors import ErrorCode

from walgate.security.acl import SUPPORTED_OPERATIONS, ResourceType, authorized_bits
from walgate.storage.engine import Engine

NOT_REQUESTED = -(2**31)
INVALID_NAMES = ["bad$#!", "x" * 250, ".", "..", "spaced name"]
ALL_TOPIC_OPS = authorized_bits(list(SUPPORTED_OPERATIONS[ResourceType.TOPIC]))
ALL_CLUSTER_OPS = authorized_bits(list(SUPPORTED_OPERATIONS[ResourceType.CLUSTER]))
ALL_GROUP_OPS = authorized_bits(list(SUPPORTED_OPERATIONS[ResourceType.GROUP]))


def call(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def create(conn: KafkaConnection, *names: str) -> list[ErrorCode]:
    r = call(conn, 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1} for n in names],
                           "timeout": 10_000})
    return [t.error_code for t in r.topics]


def metadata_errors(conn: KafkaConnection, names: list[str], version: int = 12, auto: bool = True) -> list[ErrorCode]:
    r = call(conn, 3, version, {"topics": [{"name": n} for n in names], "allow_auto_topic_creation": auto})
    by_name = {t.name: t.error_code for t in r.topics}
    return [by_name[n] for n in names]


def test_invalid_topic_names_answer_invalid_topic_exception_with_or_without_auto_create(tmp_path: Path) -> None:
    for settings in ({}, {"auto_create_topic_partitions": 2}):
        with gateway_thread(tmp_path / str(len(settings)), **settings) as gw, \
                KafkaConnection(gw.kafka_address) as conn:
            for version in (1, 4, 12):
                assert metadata_errors(conn, INVALID_NAMES, version) == [ErrorCode.invalid_topic_exception] * 5
            valid = metadata_errors(conn, ["fine.name"])
            assert valid == [ErrorCode.none if settings else ErrorCode.unknown_topic_or_partition]
            r = call(conn, 75, 0, {"topics": [{"name": "bad$#!"}], "response_partition_limit": 10})
            assert r.topics[0].error_code == ErrorCode.invalid_topic_exception
            # CreateTopics refuses them the same way; DeleteTopics/Produce know no such topic, as Kafka answers
            assert create(conn, "bad$#!", "..") == [ErrorCode.invalid_topic_exception] * 2
            deleted = call(conn, 20, 6, {"topics": [{"name": "bad$#!"}], "timeout": 10_000})
            assert deleted.responses[0].error_code == ErrorCode.unknown_topic_or_partition
            produced = call(conn, 0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
                {"name": "bad$#!", "partition_data": [{"index": 0, "records": None}]}]})
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.unknown_topic_or_partition
            listed = call(conn, 2, 7, {"replica_id": -1, "topics": [
                {"name": "bad$#!", "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
            assert listed.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
            assert "bad$#!" not in {t.name for t in call(conn, 3, 12, {"topics": None}).topics}


def test_kafkas_internal_topic_names_are_refused_but_a_data_dir_holding_one_opens(tmp_path: Path) -> None:
    internal = ["__consumer_offsets", "__transaction_state"]
    data = tmp_path / "data"
    with gateway_thread(data, auto_create_topic_partitions=2) as gw, KafkaConnection(gw.kafka_address) as conn:
        answered = call(conn, 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1}
                                                 for n in internal], "timeout": 10_000})
        assert [(t.error_code, t.error_message) for t in answered.topics] == [
            (ErrorCode.invalid_request, f"Creation of internal topic {n} is prohibited.") for n in internal]
        assert metadata_errors(conn, internal) == [ErrorCode.unknown_topic_or_partition] * 2  # not auto-created
        assert create(conn, "__consumer_offsets_not") == [ErrorCode.none]  # only the names themselves
    engine = Engine.open(data)  # one made before the names were reserved (the engine takes any valid name)
    try:
        engine.create_kafka_topic("__consumer_offsets", 1, {}, engine.topic_defaults(0))
    finally:
        engine.close()
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert metadata_errors(conn, ["__consumer_offsets"]) == [ErrorCode.none]


def test_authorized_operations_without_an_authorizer_are_all_of_the_resource_types(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        assert create(conn, "t") == [ErrorCode.none]
        asked = call(conn, 3, 10, {"topics": [{"name": "t"}], "include_cluster_authorized_operations": True,
                                   "include_topic_authorized_operations": True})
        assert (asked.topics[0].topic_authorized_operations, asked.cluster_authorized_operations) == \
            (ALL_TOPIC_OPS, ALL_CLUSTER_OPS)
        plain = call(conn, 3, 10, {"topics": [{"name": "t"}]})
        assert (plain.topics[0].topic_authorized_operations, plain.cluster_authorized_operations) == \
            (NOT_REQUESTED, NOT_REQUESTED)
        assert call(conn, 60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1}
                    ).cluster_authorized_operations == ALL_CLUSTER_OPS
        assert call(conn, 60, 1, {"endpoint_type": 1}).cluster_authorized_operations == NOT_REQUESTED
        paged = call(conn, 75, 0, {"topics": [{"name": "t"}], "response_partition_limit": 10})
        assert paged.topics[0].topic_authorized_operations == ALL_TOPIC_OPS
        call(conn, 68, 1, {"group_id": "g", "member_id": "m" * 22, "member_epoch": 0, "rebalance_timeout": 30_000,
                           "subscribed_topic_names": ["t"], "topic_partitions": []})
        described = call(conn, 69, 1, {"group_ids": ["g"], "include_authorized_operations": True})
        assert described.groups[0].authorized_operations == ALL_GROUP_OPS
        classic = call(conn, 15, 5, {"groups": ["g"], "include_authorized_operations": True})
        assert classic.groups[0].authorized_operations == ALL_GROUP_OPS
        assert call(conn, 15, 5, {"groups": ["g"]}).groups[0].authorized_operations == NOT_REQUESTED


TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND = 0, 1, 2
SOURCES = {1: "TOPIC", 2: "DYNAMIC_BROKER", 3: "DYNAMIC_DEFAULT_BROKER", 4: "STATIC_BROKER", 5: "DEFAULT", 8: "GROUP"}  # Java: DYNAMIC_GROUP_CONFIG


def describe(conn: KafkaConnection, rtype: int, name: str, keys: list[str] | None = None) -> dict[str, tuple[str, str]]:
    [r] = call(conn, 32, 4, {"resources": [{"resource_type": rtype, "resource_name": name,
                                            "configuration_keys": keys}]}).results
    assert r.error_code == ErrorCode.none, r
    return {c.name: (c.value, SOURCES[c.config_source]) for c in r.configs}


def incremental(conn: KafkaConnection, rtype: int, name: str, ops: list[tuple[str, int, str | None]],
                validate_only: bool = False) -> ErrorCode:
    [r] = call(conn, 44, 1, {"validate_only": validate_only, "resources": [
        {"resource_type": rtype, "resource_name": name,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}]}).responses
    return r.error_code


def legacy(conn: KafkaConnection, resources: list[tuple[int, str, dict[str, str | None]]], version: int = 2,
           validate_only: bool = False) -> list[ErrorCode]:
    r = call(conn, 33, version, {"validate_only": validate_only, "resources": [
        {"resource_type": t, "resource_name": n, "configs": [{"name": k, "value": v} for k, v in c.items()]}
        for t, n, c in resources]})
    return [x.error_code for x in r.responses]


def wal_retention(gw: Any, topic: str) -> int:
    """The topic's WAL retention period (s): what its retention.ms amounts to in the storage."""
    engine = gw._engine
    return int(engine.catalog.database(engine.catalog.topics[topic].db).options["WAL_RETENTION_PERIOD"])


def test_legacy_alter_configs_replaces_a_topics_whole_set(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        assert create(conn, "t") == [ErrorCode.none]
        assert incremental(conn, TOPIC, "t", [("retention.ms", SET, "3600000"), ("segment.bytes", SET, "1048576")]) \
            == ErrorCode.none
        for version in (0, 1):
            assert legacy(conn, [(TOPIC, "t", {"retention.ms": "7200000"})], version, validate_only=True) == \
                [ErrorCode.none]
        assert describe(conn, TOPIC, "t", ["retention.ms"]) == {"retention.ms": ("3600000", "TOPIC")}
        assert legacy(conn, [(TOPIC, "t", {"retention.ms": "7200000"})]) == [ErrorCode.none]
        configs = describe(conn, TOPIC, "t")
        assert configs["retention.ms"] == ("7200000", "TOPIC")
        assert configs["segment.bytes"] == ("67108864", "DEFAULT")  # not named: back to its default
        assert wal_retention(gw, "t") == 7200
        assert legacy(conn, [(TOPIC, "t", {"bogus.key": "1"}), (TOPIC, "nowhere", {}),
                             (TOPIC, "t", {})]) == [ErrorCode.invalid_request, ErrorCode.unknown_topic_or_partition,
                                                    ErrorCode.invalid_request]  # t twice: both refused
        assert legacy(conn, [(TOPIC, "t", {"bogus.key": "1"})]) == [ErrorCode.invalid_config]
        assert legacy(conn, [(TOPIC, "t", {"retention.ms": None})]) == [ErrorCode.invalid_request]  # null
        assert legacy(conn, [(8, "0", {})]) == [ErrorCode.invalid_request]  # BROKER_LOGGER: incremental only
        assert describe(conn, TOPIC, "t", ["retention.ms"]) == {"retention.ms": ("7200000", "TOPIC")}


def test_dynamic_broker_configs_default_topics_and_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert create(conn, "old", "own") == [ErrorCode.none] * 2
        assert incremental(conn, TOPIC, "own", [("retention.ms", SET, "5000")]) == ErrorCode.none
        assert incremental(conn, BROKER, "", [("log.retention.ms", SET, "3600000")], validate_only=True) == \
            ErrorCode.none
        assert describe(conn, BROKER, "") == {}
        assert incremental(conn, BROKER, "", [("log.retention.ms", SET, "3600000")]) == ErrorCode.none
        assert incremental(conn, BROKER, "0", [("log.segment.bytes", SET, "2097152")]) == ErrorCode.none
        assert describe(conn, BROKER, "") == {"log.retention.ms": ("3600000", "DYNAMIC_DEFAULT_BROKER")}
        node = describe(conn, BROKER, "0")
        assert node["log.retention.ms"] == ("3600000", "DYNAMIC_DEFAULT_BROKER")
        assert node["log.segment.bytes"] == ("2097152", "DYNAMIC_BROKER")
        assert node["broker.id"] == ("0", "STATIC_BROKER")
        # an existing topic without its own value follows at once; one with its own keeps it; a new one gets it
        assert wal_retention(gw, "old") == 3600 and wal_retention(gw, "own") == 5
        assert create(conn, "new") == [ErrorCode.none]
        assert wal_retention(gw, "new") == 3600
        assert gw._engine.topic_defaults(0)["segment.bytes"] == "2097152"
        assert gw._engine.apply_topic_defaults(0) == []  # every topic already follows them
        configs = describe(conn, TOPIC, "new")
        assert configs["retention.ms"] == ("3600000", "DYNAMIC_DEFAULT_BROKER")
        assert configs["segment.bytes"] == ("2097152", "DYNAMIC_BROKER")
        assert configs["max.message.bytes"] == ("1048588", "DEFAULT")
        assert configs["segment.ms"] == ("604800000", "DEFAULT")  # log.roll.ms: Kafka's null, log.roll.hours
        # read-only and unknown broker configs, bad values, another node: INVALID_REQUEST, as Kafka answers
        for ops in ([("broker.id", SET, "7")], [("listeners", SET, "PLAINTEXT://:1")], [("no.such", SET, "1")],
                    [("log.retention.ms", SET, "-5")], [("log.cleanup.policy", APPEND, "nonsense")]):
            assert incremental(conn, BROKER, "", ops) == ErrorCode.invalid_request, ops
        assert incremental(conn, BROKER, "2", [("log.retention.ms", SET, "1")]) == ErrorCode.invalid_request
        assert legacy(conn, [(BROKER, "0", {"log.flush.interval.ms": "1000"})]) == [ErrorCode.none]
        assert "log.segment.bytes" not in {k for k, (_, s) in describe(conn, BROKER, "0").items()
                                           if s == "DYNAMIC_BROKER"}  # legacy: the whole set replaced
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert describe(conn, BROKER, "") == {"log.retention.ms": ("3600000", "DYNAMIC_DEFAULT_BROKER")}
        assert describe(conn, BROKER, "0")["log.flush.interval.ms"] == ("1000", "DYNAMIC_BROKER")
        assert incremental(conn, BROKER, "", [("log.retention.ms", DELETE, None)]) == ErrorCode.none
        assert wal_retention(gw, "old") == 604800 and wal_retention(gw, "new") == 604800
        assert describe(conn, TOPIC, "old", ["retention.ms"]) == {"retention.ms": ("604800000", "DEFAULT")}
    # a crash between the broker's record and the topics following it: the next start finishes the change
    engine = Engine.open(data)
    try:
        engine.set_resource_configs("broker", "", {"log.retention.ms": "7200000"})
    finally:
        engine.close()
    with gateway_thread(data) as gw:
        assert wal_retention(gw, "old") == 7200 and wal_retention(gw, "own") == 5


def test_group_configs_are_stored_described_and_used_by_the_coordinator(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = {"group_consumer_session_timeout_ms": 45_000, "group_consumer_heartbeat_interval_ms": 5_000}
    with gateway_thread(data, **settings) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert describe(conn, GROUP, "g") == {"consumer.session.timeout.ms": ("45000", "DEFAULT"),
                                              "consumer.heartbeat.interval.ms": ("5000", "DEFAULT"),
                                              "share.auto.offset.reset": ("latest", "DEFAULT"),
                                              "share.isolation.level": ("read_uncommitted", "DEFAULT"),
                                              "share.record.lock.duration.ms": ("30000", "DEFAULT"),
                                              "share.delivery.count.limit": ("5", "DEFAULT")}
        assert incremental(conn, GROUP, "g", [("consumer.heartbeat.interval.ms", SET, "7000")]) == ErrorCode.none
        for ops in ([("consumer.heartbeat.interval.ms", SET, "100")], [("consumer.session.timeout.ms", SET, "x")],
                    [("share.session.timeout.ms", SET, "45000")], [("bogus", SET, "1")]):
            assert incremental(conn, GROUP, "g", ops) == ErrorCode.invalid_config, ops
        assert describe(conn, GROUP, "g")["consumer.heartbeat.interval.ms"] == ("7000", "GROUP")
        assert legacy(conn, [(GROUP, "h", {"consumer.session.timeout.ms": "50000"})]) == [ErrorCode.none]
    with gateway_thread(data, **settings) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert describe(conn, GROUP, "g")["consumer.heartbeat.interval.ms"] == ("7000", "GROUP")
        assert describe(conn, GROUP, "h")["consumer.session.timeout.ms"] == ("50000", "GROUP")
        assert create(conn, "t") == [ErrorCode.none]
        joined = call(conn, 68, 1, {"group_id": "g", "member_id": "m" * 22, "member_epoch": 0,
                                    "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"],
                                    "topic_partitions": []})
        assert joined.error_code == ErrorCode.none and joined.heartbeat_interval.total_seconds() == 7
        other = call(conn, 68, 1, {"group_id": "other", "member_id": "n" * 22, "member_epoch": 0,
                                   "rebalance_timeout": 30_000, "subscribed_topic_names": ["t"],
                                   "topic_partitions": []})
        assert other.heartbeat_interval.total_seconds() == 5
        assert gw._engine.catalog.resource_configs[("group", "h")] == {"consumer.session.timeout.ms": "50000"}
        assert incremental(conn, GROUP, "h", [("consumer.session.timeout.ms", DELETE, None)]) == ErrorCode.none
        assert ("group", "h") not in gw._engine.catalog.resource_configs


def test_describe_topic_partitions_answers_what_the_authorizer_allows(tmp_path: Path) -> None:
    data, authorizer = tmp_path / "data", {"authorizer_class_name": "kafka.security.authorizer.AclAuthorizer"}
    with gateway_thread(data, super_users=("User:ANONYMOUS",), **authorizer) as gw, \
            KafkaConnection(gw.kafka_address) as conn:
        assert create(conn, "t", "secret") == [ErrorCode.none] * 2
        acl = {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3, "principal": "User:ANONYMOUS",
               "host": "*", "operation": 4, "permission_type": 3}  # WRITE on t (implies DESCRIBE)
        assert call(conn, 30, 3, {"creations": [acl]}).results[0].error_code == ErrorCode.none
    with gateway_thread(data, **authorizer) as gw, KafkaConnection(gw.kafka_address) as conn:
        r = call(conn, 75, 0, {"topics": [{"name": "t"}, {"name": "secret"}], "response_partition_limit": 10})
        by_name = {t.name: (t.error_code, t.topic_authorized_operations) for t in r.topics}
        assert by_name == {"t": (ErrorCode.none, (1 << 4) | (1 << 8)),
                           "secret": (ErrorCode.topic_authorization_failed, NOT_REQUESTED)}


def test_kafkas_per_broker_and_cluster_wide_dynamic_configs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    kerberos = "sasl.kerberos.min.time.before.relogin"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        # librdkafka 0081: a per-broker SASL config through the legacy API, on this node; not on the cluster default
        assert legacy(conn, [(BROKER, "0", {kerberos: "58000"})]) == [ErrorCode.none]
        assert legacy(conn, [(BROKER, "", {kerberos: "58000"})]) == [ErrorCode.invalid_request]
        assert incremental(conn, BROKER, "", [("background.threads", SET, "9"),
                                              ("log.cleanup.policy", APPEND, "compact")]) == ErrorCode.none
        assert incremental(conn, BROKER, "0", [("listener.name.plain.ssl.key.password", SET, "secret"),
                                               ("sasl.enabled.mechanisms", APPEND, "PLAIN")]) == ErrorCode.none
        assert incremental(conn, BROKER, "0", [(kerberos, APPEND, "1")]) == ErrorCode.invalid_config  # not a list
        assert create(conn, "t") == [ErrorCode.none]
        assert incremental(conn, TOPIC, "t", [("retention.ms", APPEND, "1")]) == ErrorCode.invalid_config
        assert incremental(conn, TOPIC, "t", [("log.cleanup.policy", APPEND, "compact")]) == ErrorCode.invalid_config
        for ops in ([("background.threads", SET, "40")], [("ssl.keystore.location", SET, "/k")],
                    [("num.io.threads", SET, "many")]):
            assert incremental(conn, BROKER, "", ops) == ErrorCode.invalid_request, ops
        [r] = call(conn, 32, 4, {"include_synonyms": True, "resources": [
            {"resource_type": BROKER, "resource_name": "0", "configuration_keys": [
                kerberos, "background.threads", "log.cleanup.policy", "broker.id", "num.io.threads",
                "listener.name.plain.ssl.key.password", "sasl.enabled.mechanisms"]}]}).results
        got = {c.name: c for c in r.configs}
        assert (got[kerberos].value, got[kerberos].config_source, got[kerberos].read_only) == ("58000", 2, False)
        assert [(s.value, s.source) for s in got[kerberos].synonyms] == [("58000", 2), ("60000", 5)]
        assert [(s.value, s.source) for s in got["background.threads"].synonyms] == [("9", 3), ("10", 5)]
        assert got["log.cleanup.policy"].value == "delete,compact" and got["log.cleanup.policy"].config_source == 3
        assert got["broker.id"].read_only and got["broker.id"].config_source == 4
        assert (got["num.io.threads"].value, got["num.io.threads"].config_source) == ("8", 5)
        password = got["listener.name.plain.ssl.key.password"]
        assert (password.value, password.is_sensitive, password.config_source) == (None, True, 2)
        assert got["sasl.enabled.mechanisms"].value == "GSSAPI,PLAIN"
        assert describe(conn, BROKER, "") == {"background.threads": ("9", "DYNAMIC_DEFAULT_BROKER"),
                                              "log.cleanup.policy": ("delete,compact", "DYNAMIC_DEFAULT_BROKER")}
        # the legacy API replaces node 0's whole set: the SASL configs go, the cluster default stays
        assert legacy(conn, [(BROKER, "0", {"num.io.threads": "16"})]) == [ErrorCode.none]
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        node = describe(conn, BROKER, "0", [kerberos, "num.io.threads", "background.threads"])
        assert node == {kerberos: ("60000", "DEFAULT"), "num.io.threads": ("16", "DYNAMIC_BROKER"),
                        "background.threads": ("9", "DYNAMIC_DEFAULT_BROKER")}
        assert gw._engine.resource_configs("broker", "0") == {"num.io.threads": "16"}


def synonyms_of(conn: KafkaConnection, rtype: int, name: str, keys: list[str]) -> dict[str, list[tuple[str, Any, str]]]:
    """DescribeConfigs with IncludeSynonyms: config -> [(synonym, value, source)], the config's own source first."""
    [r] = call(conn, 32, 4, {"include_synonyms": True, "resources": [
        {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}]}).results
    assert r.error_code == ErrorCode.none, r
    out = {}
    for c in r.configs:
        out[c.name] = [(SOURCES[c.config_source], c.value)] + [(s.name, s.value, SOURCES[s.source])
                                                               for s in c.synonyms]
    return out


def test_topic_configs_answer_their_synonyms_in_kafkas_order(tmp_path: Path) -> None:
    """Kafka's createTopicConfigEntry: the topic's override, then its broker config at every level (per-broker,
    cluster default, static, default), then that config's other units; the static unit synonyms are described
    read-only and refused at run time, as Kafka refuses them."""
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        assert create(conn, "t") == [ErrorCode.none]
        keys = ["retention.ms", "cleanup.policy", "segment.ms", "max.message.bytes", "flush.ms"]
        assert synonyms_of(conn, TOPIC, "t", keys) == {
            # log.retention.ms and log.roll.ms default to null in Kafka: their hours are not listed under them
            "retention.ms": [("DEFAULT", "604800000")], "segment.ms": [("DEFAULT", "604800000")],
            "cleanup.policy": [("DEFAULT", "delete"), ("log.cleanup.policy", "delete", "DEFAULT")],
            "max.message.bytes": [("DEFAULT", "1048588"), ("message.max.bytes", "1048588", "DEFAULT")],
            "flush.ms": [("DEFAULT", "3000")]}
        assert synonyms_of(conn, TOPIC, "t", ["segment.bytes"])["segment.bytes"] == [
            ("DEFAULT", "67108864"), ("log.segment.bytes", "67108864", "DEFAULT")]
        assert incremental(conn, BROKER, "", [("log.retention.ms", SET, "3600000")]) == ErrorCode.none
        assert incremental(conn, BROKER, "0", [("log.retention.ms", SET, "7200000"),
                                               ("log.roll.ms", SET, "60000")]) == ErrorCode.none
        assert incremental(conn, TOPIC, "t", [("retention.ms", SET, "5000")]) == ErrorCode.none
        got = synonyms_of(conn, TOPIC, "t", ["retention.ms", "segment.ms"])
        assert got == {
            "retention.ms": [("TOPIC", "5000"), ("retention.ms", "5000", "TOPIC"),
                             ("log.retention.ms", "7200000", "DYNAMIC_BROKER"),
                             ("log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER"),
                             ("log.retention.hours", "168", "DEFAULT")],
            "segment.ms": [("DYNAMIC_BROKER", "60000"), ("log.roll.ms", "60000", "DYNAMIC_BROKER"),
                           ("log.roll.hours", "168", "DEFAULT")]}
        node = synonyms_of(conn, BROKER, "0", ["log.retention.hours", "log.roll.hours", "log.retention.minutes"])
        assert node == {"log.retention.hours": [("DEFAULT", "168"), ("log.retention.hours", "168", "DEFAULT")],
                        "log.roll.hours": [("DEFAULT", "168"), ("log.roll.hours", "168", "DEFAULT")],
                        "log.retention.minutes": [("DEFAULT", None)]}
        for name in ("log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.roll.jitter.hours"):
            assert incremental(conn, BROKER, "", [(name, SET, "1")]) == ErrorCode.invalid_request, name


def broker_refusal(conn: KafkaConnection, name: str, ops: list[tuple[str, int, str | None]]) -> tuple[int, str]:
    [r] = call(conn, 44, 1, {"validate_only": False, "resources": [
        {"resource_type": BROKER, "resource_name": name,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}]}).responses
    return r.error_code, r.error_message


def test_kafkas_reconfiguration_checks_with_its_messages(tmp_path: Path) -> None:
    wrapped = "Invalid value org.apache.kafka.common.config.ConfigException: {} for configuration Invalid dynamic " \
              "configuration"
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        listener = describe(conn, BROKER, "0", ["listeners"])["listeners"][0].split("://")[0].lower()
        assert broker_refusal(conn, "", [("num.network.threads", SET, "7")]) == (ErrorCode.invalid_request, (
            wrapped.format("Dynamic thread count update validation failed for num.network.threads=7, value should "
                           "not be greater than double the current value 3")))
        assert broker_refusal(conn, "", [("num.network.threads", SET, "6")]) == (ErrorCode.none, None)
        # a listener's own count is checked against that listener's count in force
        assert broker_refusal(conn, "0", [(f"listener.name.{listener}.num.network.threads", SET, "13")])[1] == (
            wrapped.format("Dynamic thread count update validation failed for num.network.threads=13, value should "
                           "not be greater than double the current value 6"))
        assert broker_refusal(conn, "", [("max.connections", SET, "0")]) == (
            ErrorCode.invalid_request, wrapped.format("Invalid max.connections 0"))
        assert broker_refusal(conn, "", [("log.cleaner.dedupe.buffer.size", SET, "1048576")]) == (
            ErrorCode.invalid_request,
            "requirement failed: log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        assert broker_refusal(conn, "", [("log.cleaner.threads", SET, "0")]) == (ErrorCode.invalid_request,
                                                                                 "/ by zero")
        assert broker_refusal(conn, "", [("log.cleaner.threads", SET, "2")]) == (ErrorCode.none, None)
        assert broker_refusal(conn, "0", [("log.cleaner.dedupe.buffer.size", SET, "2097152")])[1] == (
            "requirement failed: log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        assert broker_refusal(conn, "", [("log.retention.ms", SET, "0")])[1] == (
            "requirement failed: log.retention.ms must be unlimited (-1) or, greater than or equal to 1")
        assert broker_refusal(conn, "", [("max.connections.per.ip", SET, "0")])[1].startswith(
            "requirement failed: max.connections.per.ip can be set to zero only if")
        assert broker_refusal(conn, "", [("max.connections.per.ip", SET, "0"),
                                         ("max.connections.per.ip.overrides", SET, "127.0.0.1:5")]) == (
            ErrorCode.none, None)
        assert gw._engine.resource_configs("broker", "")["num.network.threads"] == "6"


def test_offsets_topic_num_partitions_makes_the_coordinator_partitions_of_a_new_data_dir_only(tmp_path: Path) -> None:
    """Kafka's offsets.topic.num.partitions: N of a data dir made by this start (issue 23); an existing data dir keeps
    its N, and DescribeConfigs answers the N the data dir has."""
    data = tmp_path / "data"
    with gateway_thread(data, offsets_topic_num_partitions=4) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert describe(conn, BROKER, "0", ["offsets.topic.num.partitions"]) == {
            "offsets.topic.num.partitions": ("4", "STATIC_BROKER")}
    assert sorted(p.name for p in (data / "coordinator").iterdir()) == [f"offsets-{p}.log" for p in range(4)]
    with gateway_thread(data, offsets_topic_num_partitions=9) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert describe(conn, BROKER, "0", ["offsets.topic.num.partitions"]) == {
            "offsets.topic.num.partitions": ("4", "STATIC_BROKER")}
    assert len(list((data / "coordinator").iterdir())) == 4


def test_create_topics_checks_the_factor_then_the_partitions_then_placement_with_kafkas_texts(tmp_path: Path) -> None:
    """Kafka's order and texts (ReplicationControlManager.createTopic): a non-positive replication factor, then a
    non-positive partition count, then the placer's refusal prefixed with the partition's replication count."""
    topics = [("rf0", 0, 0), ("p0", 0, 3), ("pm2", -2, 1), ("many", 2000, 1), ("rf3", 1, 3), ("ok", -1, -1)]
    with gateway_thread(tmp_path) as gw, KafkaConnection(gw.kafka_address) as conn:
        r = call(conn, 19, 7, {"topics": [{"name": n, "num_partitions": p, "replication_factor": f}
                                          for n, p, f in topics], "timeout": 10_000})
    non_positive = "Number of partitions was set to an invalid non-positive value."
    assert [(t.name, t.error_code, t.error_message) for t in r.topics] == [
        ("rf0", ErrorCode.invalid_replication_factor,
         "Replication factor must be larger than 0, or -1 to use the default value."),
        ("p0", ErrorCode.invalid_partitions, non_positive), ("pm2", ErrorCode.invalid_partitions, non_positive),
        ("many", ErrorCode.invalid_partitions, "partitions must be 1..1024, not 2000"),
        ("rf3", ErrorCode.invalid_replication_factor, "Unable to replicate the partition 3 time(s): The target "
                                                      "replication factor of 3 cannot be reached because only 1 "
                                                      "broker(s) are registered."),
        ("ok", ErrorCode.none, None)]
