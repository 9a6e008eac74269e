"""ACLs through the Kafka port and /rest/sql: Create/Describe/DeleteAcls, every check answering Kafka's error code,
GRANT/REVOKE/SHOW USER PRIVILEGES as the same store, durable across a restart.

Connections here do not authenticate, so their principal is User:ANONYMOUS (as on a Kafka PLAINTEXT listener):
the first gateway makes it a super user to set ACLs up, the second does not.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes, sql
from kafka.record.memory_records import MemoryRecordsBuilder
from kio.schema.errors import ErrorCode

from walgate.gateway.server import Gateway

AUTHORIZER = {"authorizer_class_name": "kafka.security.authorizer.AclAuthorizer"}
ME = "User:ANONYMOUS"
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE = 3, 4, 5, 8
ALLOW, DENY = 3, 2


def call(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def acl(rtype: int, name: str, op: int, perm: int = ALLOW, ptype: int = LITERAL, principal: str = ME) -> dict[str, Any]:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": ptype, "principal": principal,
            "host": "*", "operation": op, "permission_type": perm}


def any_filter(**fields: Any) -> dict[str, Any]:
    return {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1, "principal_filter": None,
            "host_filter": None, "operation": 1, "permission_type": 1, **fields}


def records() -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=None, key=b"k", value=b"v")
    builder.close()
    return bytes(builder.buffer())


def produce(conn: KafkaConnection, topic: str) -> ErrorCode:
    r = call(conn, 0, 9, {"acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records()}]}]})
    return r.responses[0].partition_responses[0].error_code


def rest(gateway: Gateway, statement: str) -> tuple[int, dict[str, Any]]:
    try:
        return 200, sql(gateway, statement)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def described(conn: KafkaConnection, **filter_fields: Any) -> set[tuple[int, str, int, str, int, int]]:
    r = call(conn, 29, 3, any_filter(**filter_fields))
    assert r.error_code == ErrorCode.none
    return {(res.resource_type, res.resource_name, res.pattern_type, a.principal, a.operation, a.permission_type)
            for res in r.resources for a in res.acls}


def test_acl_apis_without_an_authorizer_answer_security_disabled(tmp_path: Path):
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        assert call(conn, 30, 3, {"creations": [acl(TOPIC, "t", READ)]}).results[0].error_code == \
            ErrorCode.security_disabled
        assert call(conn, 29, 3, any_filter()).error_code == ErrorCode.security_disabled
        assert call(conn, 31, 3, {"filters": [any_filter()]}).filter_results[0].error_code == ErrorCode.security_disabled


def test_acls_and_grants_are_one_store_checked_by_every_api(tmp_path: Path):
    data = tmp_path / "data"
    with gateway_thread(data, super_users=(ME,), **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        call(conn, 19, 7, {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1} for n in
                                      ("open", "secret")], "timeout": 10_000})
        created = call(conn, 30, 3, {"creations": [
            acl(TOPIC, "open", WRITE), acl(TOPIC, "op", READ, ptype=PREFIXED), acl(GROUP, "g", READ),
            acl(TOPIC, "secret", READ, DENY, principal="User:*"), acl(TOPIC, "gone", READ),
            acl(CLUSTER, "not-kafka-cluster", CREATE), acl(TOPIC, "x", 0)]})
        assert [r.error_code for r in created.results] == [ErrorCode.none] * 5 + [ErrorCode.invalid_request] * 2
        assert "kafka-cluster" in created.results[5].error_message
        deleted = call(conn, 31, 3, {"filters": [any_filter(resource_name_filter="gone"), any_filter(operation=0)]})
        assert [len(f.matching_acls) for f in deleted.filter_results] == [1, 0]
        assert deleted.filter_results[1].error_code == ErrorCode.invalid_request
        assert sql(gw, "CREATE DATABASE power VGROUPS 1")["code"] == 0
        sql(gw, "CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT)")
        sql(gw, "GRANT READ ON power.* TO `ANONYMOUS`")  # unquoted names are lower-cased
        sql(gw, "GRANT WRITE ON power.meters TO bob")
        sql(gw, "GRANT SUBSCRIBE ON secret TO bob")
        sql(gw, "REVOKE SUBSCRIBE ON secret FROM bob")
        # MATCH: what applies to topic "open" (its literal ACL and the "op" prefix); a grant is an ACL
        assert described(conn, resource_type_filter=TOPIC, resource_name_filter="open", pattern_type_filter=2) == {
            (TOPIC, "open", LITERAL, ME, WRITE, ALLOW), (TOPIC, "op", PREFIXED, ME, READ, ALLOW)}
        assert (TOPIC, "power.", PREFIXED, ME, READ, ALLOW) in described(conn)
        assert (TOPIC, "power.meters", LITERAL, "User:bob", WRITE, ALLOW) in described(conn, principal_filter="User:bob")
        rows = sql(gw, "SHOW USER PRIVILEGES")
        assert [c[0] for c in rows["column_meta"]] == ["user_name", "privilege", "db_name", "table_name", "condition",
                                                       "notes"]
        assert ["ANONYMOUS", "read", "power", "*", "", ""] in rows["data"]
        assert ["bob", "write", "power", "meters", "", ""] in rows["data"]
        assert not [r for r in rows["data"] if r[0] == "bob" and r[1] == "subscribe"]  # revoked
        assert ["ANONYMOUS", "read", "g", "", "", "ALLOW READ on GROUP LITERAL g from *"] in rows["data"]

    # ANONYMOUS is no super user any more; the ACLs were durable
    with gateway_thread(data, **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        listed = call(conn, 3, 12, {"topics": None, "include_topic_authorized_operations": True})
        assert [t.name for t in listed.topics] == ["open"]  # secret and power's topics hidden
        assert listed.topics[0].topic_authorized_operations == (1 << READ) | (1 << WRITE) | (1 << DESCRIBE)
        [hidden] = call(conn, 3, 12, {"topics": [{"name": "secret"}]}).topics
        assert hidden.error_code == ErrorCode.topic_authorization_failed and not hidden.partitions
        assert produce(conn, "open") == ErrorCode.none
        assert produce(conn, "secret") == ErrorCode.topic_authorization_failed
        assert produce(conn, "nowhere") == ErrorCode.topic_authorization_failed  # existence not disclosed
        fetched = call(conn, 1, 12, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "replica_id": -1, "topics": [
            {"topic": n, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
            for n in ("open", "secret")]})
        assert [r.partitions[0].error_code for r in fetched.responses] == [ErrorCode.none,
                                                                           ErrorCode.topic_authorization_failed]
        made = call(conn, 19, 7, {"topics": [{"name": "new", "num_partitions": 1, "replication_factor": 1}],
                                  "timeout": 10_000})
        assert made.topics[0].error_code == ErrorCode.topic_authorization_failed
        gone = call(conn, 20, 6, {"topics": [{"name": "open"}], "timeout": 10_000})
        assert gone.responses[0].error_code == ErrorCode.topic_authorization_failed
        assert call(conn, 30, 3, {"creations": [acl(TOPIC, "t", READ)]}).results[0].error_code == \
            ErrorCode.cluster_authorization_failed
        assert call(conn, 29, 3, any_filter()).error_code == ErrorCode.cluster_authorization_failed
        assert call(conn, 48, 1, {"components": [], "strict": False}).error_code == \
            ErrorCode.cluster_authorization_failed  # DescribeConfigs on the cluster
        altered = call(conn, 49, 1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "x"}], "ops": [
            {"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}], "validate_only": False})
        assert altered.entries[0].error_code == ErrorCode.cluster_authorization_failed  # AlterConfigs on the cluster
        elected = call(conn, 43, 2, {"election_type": 0, "topic_partitions": [{"topic": "open", "partitions": [0]}],
                                     "timeout": 10_000})  # ElectLeaders: Alter on the cluster
        assert (elected.error_code, elected.replica_election_results[0].partition_result[0].error_code) == (
            ErrorCode.cluster_authorization_failed, ErrorCode.cluster_authorization_failed)
        moved = call(conn, 45, 1, {"timeout": 10_000, "allow_replication_factor_change": True, "topics": [
            {"name": "open", "partitions": [{"partition_index": 0, "replicas": [0]}]}]})  # Alter on the cluster
        assert (moved.error_code, moved.responses[0].partitions[0].error_code) == (
            ErrorCode.cluster_authorization_failed, ErrorCode.cluster_authorization_failed)
        assert call(conn, 46, 0, {"timeout": 10_000, "topics": None}).error_code == \
            ErrorCode.cluster_authorization_failed  # ListPartitionReassignments: Describe on the cluster
        assert call(conn, 10, 4, {"key_type": 0, "coordinator_keys": ["g", "other"]}).coordinators[1].error_code == \
            ErrorCode.group_authorization_failed
        join = {"session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": "", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]}
        assert call(conn, 11, 9, {"group_id": "other", **join}).error_code == ErrorCode.group_authorization_failed
        assert call(conn, 11, 9, {"group_id": "g", **join}).error_code == ErrorCode.member_id_required
        commit = call(conn, 8, 9, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
            {"name": n, "partitions": [{"partition_index": 0, "committed_offset": 0}]} for n in ("open", "secret")]})
        assert [t.partitions[0].error_code for t in commit.topics] == [ErrorCode.none,  # Read by the "op" prefix
                                                                     ErrorCode.topic_authorization_failed]
        fetched = call(conn, 9, 9, {"groups": [{"group_id": g, "topics": None} for g in ("g", "other")]})
        assert [(g.error_code, [t.name for t in g.topics]) for g in fetched.groups] == [
            (ErrorCode.none, ["open"]), (ErrorCode.group_authorization_failed, [])]
        assert [g.group_id for g in call(conn, 16, 5, {}).groups] == ["g"]
        assert [g.error_code for g in call(conn, 15, 5, {"groups": ["g", "other"]}).groups] == [
            ErrorCode.none, ErrorCode.group_authorization_failed]
        assert call(conn, 42, 2, {"groups_names": ["g"]}).results[0].error_code == ErrorCode.group_authorization_failed
        configs = call(conn, 32, 4, {"resources": [{"resource_type": 2, "resource_name": "secret"},
                                                   {"resource_type": 4, "resource_name": "0"}]})
        assert [r.error_code for r in configs.results] == [ErrorCode.topic_authorization_failed,
                                                           ErrorCode.cluster_authorization_failed]
        in_tx = call(conn, 0, 9, {"transactional_id": "tx", "acks": -1, "timeout": 10_000, "topic_data": [
            {"name": "open", "partition_data": [{"index": 0, "records": records()}]}]})
        assert in_tx.responses[0].partition_responses[0].error_code == ErrorCode.transactional_id_authorization_failed
        assert call(conn, 22, 5, {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1,
                                  "producer_epoch": -1}).error_code == ErrorCode.none  # Write on some topic
        # SQL over HTTP: the same rules
        assert rest(gw, "SELECT * FROM power.meters")[0] == 200  # READ ON power.*
        status, body = rest(gw, "INSERT INTO power.d1 USING power.meters TAGS (1) VALUES (now, 1)")
        assert status == 403 and "WRITE on topic power.d1" in body["desc"]
        assert rest(gw, "DROP DATABASE power")[0] == 403 and rest(gw, "GRANT ALL ON power.* TO ANONYMOUS")[0] == 403
        assert rest(gw, "SHOW USER PRIVILEGES")[0] == 403
        host, port = gw.http_address
        line = urllib.request.Request(f"http://{host}:{port}/influxdb/v1/write?db=power", data=b"meters,loc=1 v=1i 1")
        try:
            urllib.request.urlopen(line, timeout=30)
            raise AssertionError("line protocol into power was accepted without WRITE")
        except urllib.error.HTTPError as e:
            assert e.code == 403
        assert [row[0] for row in sql(gw, "SHOW DATABASES")["data"]] == ["power"]  # Read on power.*: Describe
        assert [row[0] for row in sql(gw, "SHOW TOPICS")["data"]] == ["open"]  # as Metadata lists them
        for path, status in (("/metrics", 403), ("/ui/api/topics", 403), ("/ui/api/tail?topic=secret", 403),
                             ("/ui/api/cluster", 403), ("/healthz", 200)):  # what shows every topic and record is for super users
            try:
                assert urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=30).status == status, path
            except urllib.error.HTTPError as e:
                assert e.code == status, path
