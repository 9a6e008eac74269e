"""One minimal valid request for every (api key, version) walgate advertises, over a real socket.

The cases come from the handler table (``handlers.advertised()``, what ApiVersions answers), so a new API or
version is covered as soon as it is registered, and fails here until this file knows a request for it. One
in-process Gateway (a real Engine in a temp dir) serves the module. Each request is encoded, and its response
decoded, by an independent library: kio (generated from Kafka's JSON schemas) for every version Kafka 4 still
has, kafka-python's hand-written classes for the older ones walgate still serves (ListOffsets v0, OffsetCommit
v0-1, ...). A response must decode whole (its error codes into Kafka's enum of defined codes), answer the
request's correlation id and the version's header, succeed as Kafka would answer the same valid request (every
error code NONE, but MEMBER_ID_REQUIRED for a first JoinGroup v4+), and leave the connection usable.
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import kafka.protocol.old
import pytest
from gateway_helpers import (
    KafkaConnection,
    build,
    error_codes,
    gateway_thread,
    kio_classes,
)
from kafka.protocol.old.types import Array, Schema, String
from kafka.record.memory_records import MemoryRecordsBuilder
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0

from walgate.gateway.kafka.handlers import advertised

TOPIC = "t"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC_RESOURCE = 2  # DescribeConfigs / IncrementalAlterConfigs resource type of a topic
ADVERTISED = advertised()
CASES = [(key, version) for key, (low, high) in ADVERTISED.items() for version in range(low, high + 1)]

FIRST_JOIN = 4
"""JoinGroup v4+ (KIP-394): a member's first join is answered MEMBER_ID_REQUIRED with the id to join with."""


SASL_APIS = (17, 36)
"""SaslHandshake / SaslAuthenticate: the module's listener has no SASL, so Kafka's KafkaApis answers
ILLEGAL_SASL_STATE."""


def expected(api_key: int, version: int) -> ErrorCode:
    """The one error code of the answer: every request here is valid, so it succeeds, as Kafka answers it."""
    if api_key in SASL_APIS:
        return ErrorCode.illegal_sasl_state
    if api_key in (27, 83, 84, 85, 86, 87) or (api_key, version >= 4) == (24, True):
        # WriteTxnMarkers, AddPartitionsToTxn v4+ (the brokers' form), the share-group state RPCs: only a cluster
        # node, authenticated with the node token, may send them, and a single node has no other (kafka/node_auth.py)
        return ErrorCode.cluster_authorization_failed
    if (api_key, version) == (43, 0):  # ElectLeaders v0 names a partition that leads where it is (elect_leaders below)
        return ErrorCode.election_not_needed
    return ErrorCode.member_id_required if (api_key, version >= FIRST_JOIN) == (11, True) else ErrorCode.none


@dataclass(frozen=True)
class Node:
    """The module's gateway and what the setup made: topic ``t`` (1 partition, 1 record) and its id."""

    address: tuple[str, int]
    topic_id: uuid.UUID


def call(conn: KafkaConnection, api_key: int, values: dict[str, Any]) -> Any:
    """A request of the newest advertised version that kio has (a preparation step; its answer must be NONE)."""
    request_cls, _ = kio_classes(api_key, ADVERTISED[api_key][1])
    response = conn.request(build(request_cls, values))
    assert set(error_codes(response)) <= {ErrorCode.none}, response
    return response


def records() -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=b"key", value=b"value")
    builder.close()
    return bytes(builder.buffer())


def create_topic(conn: KafkaConnection, name: str) -> None:
    call(conn, 19, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout": 10_000})


def commit(conn: KafkaConnection, group: str) -> None:
    call(conn, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                   "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]})


def join(conn: KafkaConnection, group: str) -> dict[str, Any]:
    """A classic group with one member (JoinGroup twice: the second with the member id the first assigned)."""
    values = {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": "",
              "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    request_cls, _ = kio_classes(11, ADVERTISED[11][1])
    first = conn.request(build(request_cls, values))
    assert first.error_code == ErrorCode.member_id_required
    joined = call(conn, 11, values | {"member_id": first.member_id})
    return {"group_id": group, "member_id": joined.member_id, "generation_id": joined.generation_id,
            "protocol_type": "consumer", "protocol_name": "range"}


def _partitions(**fields: Any) -> list[dict[str, Any]]:
    return [{"partition_index": 0, "partition": 0, "index": 0, **fields}]


Values = Callable[[KafkaConnection, Node, int], dict[str, Any]]
REQUESTS: dict[int, Values] = {}
"""Per API, one minimal valid request as a version-agnostic mapping (each version takes the fields it has), made
after any preparation it needs on the same connection."""


def request(api_key: int) -> Callable[[Values], Values]:
    def register(fn: Values) -> Values:
        REQUESTS[api_key] = fn
        return fn

    return register


@request(0)
def produce(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"acks": -1, "timeout": 10_000,
            "topic_data": [{"name": TOPIC, "partition_data": _partitions(records=records())}]}


@request(1)
def fetch(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "replica_id": -1,
            "topics": [{"topic": TOPIC, "topic_id": node.topic_id, "partitions": _partitions(
                fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=-1, log_start_offset=-1,
                last_fetched_epoch=-1)}]}


@request(2)
def list_offsets(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": _partitions(
        timestamp=-2, current_leader_epoch=-1, max_num_offsets=1)}]}


@request(3)
def metadata(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False}


@request(8)
def offset_commit(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": "committer", "generation_id_or_member_epoch": -1, "member_id": "", "retention_time": -1,
            "topics": [{"name": TOPIC, "partitions": _partitions(committed_offset=1, committed_metadata="",
                                                                 commit_timestamp=-1)}]}


@request(9)
def offset_fetch(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    commit(conn, "fetcher")
    topics = [{"name": TOPIC, "partition_indexes": [0]}]
    return {"group_id": "fetcher", "topics": topics, "groups": [{"group_id": "fetcher", "topics": topics}]}


@request(10)
def find_coordinator(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"key": "g", "key_type": 0, "coordinator_keys": ["g"]}


@request(11)
def join_group(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": f"join-v{version}", "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}


@request(12)
def heartbeat(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return join(conn, f"heartbeat-v{version}")


@request(13)
def leave_group(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    member = join(conn, f"leave-v{version}")
    return member | {"members": [{"member_id": member["member_id"]}]}


@request(14)
def sync_group(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    member = join(conn, f"sync-v{version}")
    return member | {"assignments": [{"member_id": member["member_id"], "assignment": b""}]}


@request(15)
def describe_groups(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    commit(conn, "described")
    return {"groups": ["described"]}


@request(16)
def list_groups(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {}


@request(18)
def api_versions(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"client_software_name": "walgate-tests", "client_software_version": "1.0"}


@request(19)
def create_topics(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"topics": [{"name": f"created-v{version}", "num_partitions": 1, "replication_factor": 1}],
            "timeout": 10_000, "validate_only": False}


@request(20)
def delete_topics(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    name = f"deleted-v{version}"
    create_topic(conn, name)
    return {"topic_names": [name], "topics": [{"name": name}], "timeout": 10_000}


@request(21)
def delete_records(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC, "partitions": _partitions(offset=0)}], "timeout": 10_000}


@request(22)
def init_producer_id(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1}


@request(23)
def offset_for_leader_epoch(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"replica_id": -1,
            "topics": [{"topic": TOPIC, "partitions": _partitions(leader_epoch=0, current_leader_epoch=-1)}]}


def begin(conn: KafkaConnection, tid: str) -> dict[str, Any]:
    """A transaction with the group ``g`` in it (no partition, so no marker), its producer fields."""
    init = call(conn, 22, {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": -1,
                           "producer_epoch": -1})
    fields = {"transactional_id": tid, "producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
    call(conn, 25, fields | {"group_id": "g"})
    return fields


@request(24)
def add_partitions_to_txn(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    tid = f"add-partitions-v{version}"
    init = call(conn, 22, {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": -1,
                           "producer_epoch": -1})
    topics = [{"name": TOPIC, "partitions": [0]}]
    return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": init.producer_id,
            "v3_and_below_producer_epoch": init.producer_epoch, "v3_and_below_topics": topics,
            "transactions": [{"transactional_id": tid, "producer_id": init.producer_id,
                              "producer_epoch": init.producer_epoch, "verify_only": False, "topics": topics}]}


@request(25)
def add_offsets_to_txn(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return begin(conn, f"add-offsets-v{version}") | {"group_id": "other"}


@request(26)
def end_txn(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return begin(conn, f"end-v{version}") | {"committed": True}


@request(27)
def write_txn_markers(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                         "transaction_version": 2, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}


@request(28)
def txn_offset_commit(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return begin(conn, f"txn-commit-v{version}") | {
        "group_id": "g", "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": _partitions(committed_offset=1, committed_leader_epoch=-1,
                                                             committed_metadata="")}]}


@request(65)
def describe_transactions(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    begin(conn, f"described-v{version}")
    return {"transactional_ids": [f"described-v{version}"]}


@request(66)
def list_transactions(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1}


@request(32)
def describe_configs(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": TOPIC, "configuration_keys": None}]}


@request(33)
def alter_configs(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"validate_only": False, "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": TOPIC, "configs": [
        {"name": "retention.ms", "value": "604800000"}]}]}  # replaces the topic's configs by its default


@request(37)
def create_partitions(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    name = f"grown-v{version}"
    create_topic(conn, name)
    return {"topics": [{"name": name, "count": 2, "assignments": None}], "timeout": 10_000, "validate_only": False}


@request(42)
def delete_groups(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    commit(conn, f"deleted-v{version}")
    return {"groups_names": [f"deleted-v{version}"]}


@request(43)
def elect_leaders(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    # v1+: every partition (null): on a single node each leads where it is, so none is answered (as Kafka leaves out
    # those whose election was not needed) and the request's error code is NONE; v0 has none: one partition named
    named = [{"topic": TOPIC, "partitions": [0]}] if version == 0 else None
    return {"election_type": 0, "topic_partitions": named, "timeout": 10_000}


@request(44)
def incremental_alter_configs(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"validate_only": False, "resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": TOPIC, "configs": [
        {"name": "retention.ms", "config_operation": 0, "value": "604800000"}]}]}  # SET, to its default


@request(45)
def alter_partition_reassignments(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    # nothing named: answered NONE (a move of a single node's one-copy partition is refused: test_kafka_reassignments)
    return {"timeout": 10_000, "allow_replication_factor_change": True, "topics": []}


@request(46)
def list_partition_reassignments(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"timeout": 10_000, "topics": None}


@request(47)
def offset_delete(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    commit(conn, f"offsets-deleted-v{version}")
    return {"group_id": f"offsets-deleted-v{version}", "topics": [{"name": TOPIC, "partitions": _partitions()}]}


@request(48)
def describe_client_quotas(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"components": [{"entity_type": "user", "match_type": 0, "match": f"user-v{version}"}], "strict": False}


@request(49)
def alter_client_quotas(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"validate_only": False, "entries": [{"entity": [{"entity_type": "user", "entity_name": f"user-v{version}"}],
                                                 "ops": [{"key": "producer_byte_rate", "value": 1e9, "remove": False}]}]}


@request(60)
def describe_cluster(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"include_cluster_authorized_operations": False, "endpoint_type": 1}


@request(61)
def describe_producers(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}


@request(68)
def consumer_group_heartbeat(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": f"consumer-v{version}", "member_id": str(uuid.uuid4()), "member_epoch": 0,
            "rebalance_timeout": 30_000, "subscribed_topic_names": [TOPIC], "topic_partitions": []}


@request(69)
def consumer_group_describe(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    call(conn, 68, consumer_group_heartbeat(conn, node, version) | {"group_id": f"described-v{version}"})
    return {"group_ids": [f"described-v{version}"]}


@request(76)
def share_group_heartbeat(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": f"share-v{version}", "member_id": str(uuid.uuid4()), "member_epoch": 0,
            "subscribed_topic_names": [TOPIC]}


@request(77)
def share_group_describe(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    call(conn, 76, share_group_heartbeat(conn, node, version) | {"group_id": f"share-described-v{version}"})
    return {"group_ids": [f"share-described-v{version}"], "include_authorized_operations": True}


def _share_member(conn: KafkaConnection, node: Node, group_id: str) -> str:
    """A member of share group ``group_id`` with an open share session (its next epoch: 1)."""
    member = share_group_heartbeat(conn, node, 1) | {"group_id": group_id}
    call(conn, 76, member)
    call(conn, 78, {"group_id": group_id, "member_id": member["member_id"], "share_session_epoch": 0, "max_wait": 0,
                    "min_bytes": 1, "max_records": 10, "batch_size": 10, "forgotten_topics_data": [],
                    "topics": [{"topic_id": node.topic_id, "partitions": [{"partition_index": 0,
                                                                            "acknowledgement_batches": []}]}]})
    return str(member["member_id"])


@request(78)
def share_fetch(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    member = _share_member(conn, node, f"share-fetch-v{version}")
    return {"group_id": f"share-fetch-v{version}", "member_id": member, "share_session_epoch": 1, "max_wait": 0,
            "min_bytes": 1, "max_records": 10, "batch_size": 10, "forgotten_topics_data": [],
            "topics": [{"topic_id": node.topic_id, "partitions": [{"partition_index": 0,
                                                                    "acknowledgement_batches": []}]}]}


@request(79)
def share_acknowledge(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    member = _share_member(conn, node, f"share-ack-v{version}")
    return {"group_id": f"share-ack-v{version}", "member_id": member, "share_session_epoch": 1,
            "topics": [{"topic_id": node.topic_id, "partitions": [{"partition_index": 0,
                                                                    "acknowledgement_batches": []}]}]}


def _empty_share_group(conn: KafkaConnection, node: Node, group_id: str) -> None:
    """Share group ``group_id`` with share-partition state (partition 0 of TOPIC) and no members."""
    member = _share_member(conn, node, group_id)
    call(conn, 79, {"group_id": group_id, "member_id": member, "share_session_epoch": -1, "topics": []})
    call(conn, 76, {"group_id": group_id, "member_id": member, "member_epoch": -1})


@request(90)
def describe_share_group_offsets(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    _empty_share_group(conn, node, f"share-offsets-v{version}")
    return {"groups": [{"group_id": f"share-offsets-v{version}", "topics": [{"topic_name": TOPIC,
                                                                          "partitions": [0]}]}]}


@request(91)
def alter_share_group_offsets(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    _empty_share_group(conn, node, f"share-alter-v{version}")
    return {"group_id": f"share-alter-v{version}", "topics": [
        {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 0}]}]}


@request(92)
def delete_share_group_offsets(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    _empty_share_group(conn, node, f"share-delete-v{version}")
    return {"group_id": f"share-delete-v{version}", "topics": [{"topic_name": TOPIC}]}


@request(83)
def initialize_share_group_state(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": "share-state", "topics": [{"topic_id": node.topic_id, "partitions": [
        {"partition": 0, "state_epoch": 0, "start_offset": 0}]}]}


@request(84)
def read_share_group_state(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": "share-state", "topics": [{"topic_id": node.topic_id, "partitions": [
        {"partition": 0, "leader_epoch": 0}]}]}


@request(85)
def write_share_group_state(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": "share-state", "topics": [{"topic_id": node.topic_id, "partitions": [
        {"partition": 0, "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": [
            {"first_offset": 0, "last_offset": 0, "delivery_state": 2, "delivery_count": 1}]}]}]}


@request(86)
def delete_share_group_state(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": "share-state", "topics": [{"topic_id": node.topic_id, "partitions": [{"partition": 0}]}]}


@request(87)
def read_share_group_state_summary(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"group_id": "share-state", "topics": [{"topic_id": node.topic_id, "partitions": [
        {"partition": 0, "leader_epoch": 0}]}]}


@request(75)
def describe_topic_partitions(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"topics": [{"name": TOPIC}], "response_partition_limit": 2000}


ACL = {"resource_type": 2, "resource_name": TOPIC, "resource_pattern_type": 3, "pattern_type": 3, "principal": "User:x",
       "host": "*", "operation": 3, "permission_type": 3}
ACL_FILTER = {"resource_type_filter": 2, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
              "host_filter": None, "operation": 1, "permission_type": 1}


@request(29)
def describe_acls(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return ACL_FILTER


@request(30)
def create_acls(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"creations": [ACL | {"resource_name": f"acl-v{version}"}]}


@request(31)
def delete_acls(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"filters": [ACL_FILTER | {"resource_name_filter": f"acl-v{version}"}]}
@request(17)
def sasl_handshake(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"mechanism": "PLAIN"}


@request(36)
def sasl_authenticate(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"auth_bytes": b"\0user\0password"}


@request(50)
def describe_user_scram_credentials(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"users": None}


@request(51)
def alter_user_scram_credentials(conn: KafkaConnection, node: Node, version: int) -> dict[str, Any]:
    return {"deletions": [], "upsertions": [{"name": f"user-v{version}", "mechanism": 2, "iterations": 4096,
                                             "salt": b"salt", "salted_password": bytes(64)}]}


def _kafka_python_classes(api_key: int, version: int) -> tuple[Any, Any]:
    """kafka-python's hand-written (request, response) classes of a version Kafka 4 (and kio) no longer has."""
    found: dict[str, Any] = {}
    for module in pkgutil.iter_modules(kafka.protocol.old.__path__):
        for name, cls in vars(importlib.import_module(f"kafka.protocol.old.{module.name}")).items():
            if getattr(cls, "API_KEY", None) == api_key and name.endswith(f"_v{version}"):
                found["response" if name.removesuffix(f"_v{version}").endswith("Response") else "request"] = cls
    return found["request"], found["response"]


def _kafka_python_value(schema: Schema, values: dict[str, Any]) -> tuple[Any, ...]:
    """kafka-python's positional form of ``values`` (its field names are Kafka's JSON names too; ``timeout_ms``)."""
    out: list[Any] = []
    for name, kind in zip(schema.names, schema.fields):
        key = name if name in values else name.removesuffix("_ms")
        value = values.get(key, "" if isinstance(kind, String) else [] if isinstance(kind, Array) else 0)
        if isinstance(kind, Array) and value is not None:
            value = [_kafka_python_value(kind.array_of, item) if isinstance(kind.array_of, Schema) else item
                     for item in value]
        out.append(value)
    return tuple(out)


def _kafka_python_error_codes(value: Any) -> list[ErrorCode]:
    """Every ``error_code`` in kafka-python's ``to_object()`` form of a response."""
    if isinstance(value, dict):
        return [code for k, v in value.items()
                for code in ([ErrorCode(v)] if k == "error_code" else _kafka_python_error_codes(v))]
    if isinstance(value, list):
        return [code for item in value for code in _kafka_python_error_codes(item)]
    return []


def exchange(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> list[ErrorCode]:
    """Send the request, decode the response (kio, else kafka-python); its error codes."""
    try:
        request_cls, response_cls = kio_classes(api_key, version)
    except KeyError:
        request_cls, response_cls = _kafka_python_classes(api_key, version)
        body = request_cls(*_kafka_python_value(request_cls.SCHEMA, values)).encode()
        correlation_id = conn.send_body(RequestHeaderV1, api_key, version, body)
        frame, start = conn.receive_body(ResponseHeaderV0, correlation_id)
        buffer = io.BytesIO(frame[start:])
        response = response_cls.decode(buffer)
        assert buffer.tell() == len(frame) - start, "bytes after the response"
        return _kafka_python_error_codes(response.to_object())
    return error_codes(conn.request(build(request_cls, values)))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    # ACLs on, the connections' principal (ANONYMOUS) a super user: every check runs and allows
    with gateway_thread(tmp_path_factory.mktemp("every-api") / "data", group_initial_rebalance_delay_ms=0,
                        authorizer_class_name=AUTHORIZER, super_users=("User:ANONYMOUS",)) as gateway:
        with KafkaConnection(gateway.kafka_address) as conn:
            create_topic(conn, TOPIC)
            call(conn, 0, produce(conn, None, 0))  # type: ignore[arg-type]
            [topic] = call(conn, 3, {"topics": [{"name": TOPIC}]}).topics
        yield Node(gateway.kafka_address, topic.topic_id)


def test_every_advertised_api_has_a_request_here() -> None:
    assert sorted(REQUESTS) == sorted(ADVERTISED)


def test_api_versions_answers_the_handler_table(node: Node) -> None:
    with KafkaConnection(node.address) as conn:
        response = call(conn, 18, api_versions(conn, node, 0))
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == ADVERTISED


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"{k}v{v}" for k, v in CASES])
def test_a_minimal_request_gets_a_well_formed_answer(node: Node, api_key: int, version: int) -> None:
    with KafkaConnection(node.address) as conn:
        codes = exchange(conn, api_key, version, REQUESTS[api_key](conn, node, version))
        assert codes and set(codes) == {expected(api_key, version)}
        call(conn, 18, api_versions(conn, node, 0))  # the connection goes on
