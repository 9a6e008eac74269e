"""The transaction coordinator through the Kafka port, in process with a real Engine: InitProducerId with a
transactional id, AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit / EndTxn, Describe/ListTransactions,
FindCoordinator key type 1, timeouts, restarts, ACLs. Requests are kio's (Kafka's JSON schemas), not ours."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, build, gateway_thread, kio_classes, sql
from kio.schema.errors import ErrorCode

from tests.storage.faults import Faults
from walgate.wire import encode_batch

TID = "tx-app"
GROUP = "g-txn"
AUTHORIZER = {"authorizer_class_name": "kafka.security.authorizer.AclAuthorizer"}


def call(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


def init(conn: KafkaConnection, tid: str = TID, timeout: int = 60_000, version: int = 5, **more: int) -> Any:
    return call(conn, 22, version, {"transactional_id": tid, "transaction_timeout": timeout, "producer_id": -1,
                                    "producer_epoch": -1, **more})


def create_topic(conn: KafkaConnection, name: str, partitions: int = 2) -> None:
    r = call(conn, 19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                           "timeout": 10_000})
    assert r.topics[0].error_code == ErrorCode.none


def add_partitions(conn: KafkaConnection, pid: int, epoch: int, topics: dict[str, list[int]], version: int = 3,
                   tid: str = TID) -> dict[tuple[str, int], ErrorCode]:
    r = call(conn, 24, version, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def add_offsets(conn: KafkaConnection, pid: int, epoch: int, version: int = 4, tid: str = TID) -> ErrorCode:
    return call(conn, 25, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                    "group_id": GROUP}).error_code


def txn_commit(conn: KafkaConnection, pid: int, epoch: int, offsets: dict[tuple[str, int], int],
               version: int = 4, **more: Any) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                                         "committed_metadata": ""})
    r = call(conn, 28, version, {"transactional_id": TID, "group_id": GROUP, "producer_id": pid,
                                 "producer_epoch": epoch, "generation_id": -1, "member_id": "",
                                 "group_instance_id": None,
                                 "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], **more})
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def end(conn: KafkaConnection, pid: int, epoch: int, commit: bool, version: int = 4) -> ErrorCode:
    return call(conn, 26, version, {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch,
                                    "committed": commit}).error_code


def committed(conn: KafkaConnection, topic: str, partitions: list[int]) -> dict[int, int]:
    r = call(conn, 9, 7, {"group_id": GROUP, "topics": [{"name": topic, "partition_indexes": partitions}]})
    return {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions}


def describe(conn: KafkaConnection, *tids: str) -> Any:
    return call(conn, 65, 0, {"transactional_ids": list(tids)}).transaction_states


def test_find_coordinator_names_this_node_for_transactional_ids(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        one = call(conn, 10, 3, {"key": TID, "key_type": 1})
        assert (one.error_code, one.node_id, one.port) == (ErrorCode.none, 0, gw.kafka_address[1])
        many = call(conn, 10, 4, {"key_type": 1, "coordinator_keys": [TID, "other"]}).coordinators
        assert [(c.key, c.error_code) for c in many] == [(TID, ErrorCode.none), ("other", ErrorCode.none)]
        assert call(conn, 10, 4, {"key_type": 7, "coordinator_keys": ["x"]}).coordinators[0].error_code == \
            ErrorCode.invalid_request


def test_offsets_in_a_transaction_are_seen_only_once_it_commits_and_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, "in")
        first = init(conn)
        assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
        pid = first.producer_id
        assert add_offsets(conn, pid, 0) == ErrorCode.none
        assert txn_commit(conn, pid, 0, {("in", 0): 5, ("in", 1): 7}) == {("in", 0): ErrorCode.none,
                                                                            ("in", 1): ErrorCode.none}
        assert committed(conn, "in", [0, 1]) == {0: -1, 1: -1}  # pending: nobody sees them
        assert end(conn, pid, 0, False) == ErrorCode.none
        assert committed(conn, "in", [0, 1]) == {0: -1, 1: -1}  # aborted: dropped
        assert txn_commit(conn, pid, 0, {("in", 0): 9}) == {("in", 0): ErrorCode.transaction_abortable}  # not added
        assert txn_commit(conn, pid, 0, {("in", 0): 9}, version=3) == {("in", 0): ErrorCode.invalid_txn_state}
        assert add_offsets(conn, pid, 0) == ErrorCode.none
        assert txn_commit(conn, pid, 0, {("in", 0): 10, ("in", 1): 11}) == {("in", 0): ErrorCode.none,
                                                                              ("in", 1): ErrorCode.none}
        assert txn_commit(conn, pid, 0, {("in", 0): 12, ("nope", 0): 1}) == {
            ("in", 0): ErrorCode.none, ("nope", 0): ErrorCode.unknown_topic_or_partition}
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # restarted mid-transaction
        [state] = describe(conn, TID)
        assert (state.error_code, state.transaction_state, state.producer_id) == (ErrorCode.none, "Ongoing", pid)
        assert end(conn, pid, 0, True) == ErrorCode.none
        assert committed(conn, "in", [0, 1]) == {0: 12, 1: 11}
        assert end(conn, pid, 0, True) == ErrorCode.none  # a retry of a finished commit
        assert end(conn, pid, 0, False) == ErrorCode.invalid_txn_state
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert committed(conn, "in", [0, 1]) == {0: 12, 1: 11}
        assert describe(conn, TID)[0].transaction_state == "CompleteCommit"


@pytest.mark.parametrize("level", [1, 2])
def test_a_second_init_fences_the_zombie_with_the_error_its_version_knows(tmp_path: Path, level: int) -> None:
    # the abort of a fenced transaction bumps the fenced epoch once more at transaction.version 2, as Kafka 4's
    fenced = 1 if level < 2 else 2
    with gateway_thread(tmp_path / "data", transaction_version=level) as gw, \
            KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, "out")
        zombie = init(conn)
        assert add_offsets(conn, zombie.producer_id, 0) == ErrorCode.none  # an ongoing transaction
        fencing = init(conn)
        assert fencing.error_code == ErrorCode.concurrent_transactions  # its transaction is aborted first
        again = init(conn)
        assert (again.error_code, again.producer_id, again.producer_epoch) == \
            (ErrorCode.none, zombie.producer_id, fenced + 1)
        assert add_offsets(conn, zombie.producer_id, 0) == ErrorCode.producer_fenced
        assert add_offsets(conn, zombie.producer_id, 0, version=1) == ErrorCode.invalid_producer_epoch
        assert end(conn, zombie.producer_id, 0, True) == ErrorCode.producer_fenced
        assert end(conn, zombie.producer_id, 0, True, version=1) == ErrorCode.invalid_producer_epoch
        assert add_partitions(conn, zombie.producer_id, 0, {"out": [0]}) == {("out", 0): ErrorCode.producer_fenced}
        assert txn_commit(conn, zombie.producer_id, 0, {("out", 0): 1}) == {
            ("out", 0): ErrorCode.invalid_producer_epoch}
        # KIP-360: the fenced producer naming its old epoch is fenced too; the current one may bump
        assert init(conn, producer_id=zombie.producer_id, producer_epoch=0).error_code == ErrorCode.producer_fenced
        assert init(conn, version=3, producer_id=zombie.producer_id, producer_epoch=0).error_code == \
            ErrorCode.invalid_producer_epoch
        bumped = init(conn, producer_id=zombie.producer_id, producer_epoch=fenced + 1)
        assert (bumped.error_code, bumped.producer_epoch) == (ErrorCode.none, fenced + 2)


def test_bad_requests_are_refused_with_kafkas_codes(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data", transaction_max_timeout_ms=10_000) as gw, \
            KafkaConnection(gw.kafka_address) as conn:
        assert init(conn, timeout=10_001).error_code == ErrorCode.invalid_transaction_timeout
        assert init(conn, tid="").error_code == ErrorCode.invalid_request
        assert init(conn, producer_id=5).error_code == ErrorCode.invalid_request  # an id without an epoch
        assert end(conn, 77, 0, True) == ErrorCode.invalid_producer_id_mapping
        pid = init(conn, timeout=10_000).producer_id
        assert end(conn, pid, 0, True) == ErrorCode.invalid_txn_state  # no transaction
        create_topic(conn, "native")
        sql(gw, "CREATE DATABASE power VGROUPS 2")
        sql(gw, "CREATE STABLE power.meters (ts TIMESTAMP, v INT) TAGS (loc INT)")
        sql(gw, "CREATE TOPIC td AS STABLE power.meters")
        assert add_partitions(conn, pid, 0, {"native": [0, 9], "td": [0]}) == {
            ("native", 0): ErrorCode.operation_not_attempted, ("native", 9): ErrorCode.unknown_topic_or_partition,
            ("td", 0): ErrorCode.unsupported_for_message_format}
        listed = call(conn, 66, 0, {"state_filters": [], "producer_id_filters": []}).transaction_states
        assert [t.transaction_state for t in listed] == ["Empty"]  # nothing was added
        assert add_partitions(conn, pid, 0, {"native": [0, 1]}) == {("native", 0): ErrorCode.none,
                                                                    ("native", 1): ErrorCode.none}
        # the brokers' forms (v4+, verify-only or not): only another cluster node may send them (kafka/node_auth.py)
        for version in (4, 5):
            for verify_only in (True, False):
                r = call(conn, 24, version, {"transactions": [{
                    "transactional_id": TID, "producer_id": pid, "producer_epoch": 0, "verify_only": verify_only,
                    "topics": [{"name": "native", "partitions": [1, 0]}, {"name": "other", "partitions": [0]}]}]})
                assert (r.error_code, r.results_by_transaction) == (ErrorCode.cluster_authorization_failed, ())
        state, unknown = describe(conn, TID, "unknown")
        assert (state.transaction_state, state.transaction_timeout.total_seconds(),
                [(t.topic, sorted(t.partitions)) for t in state.topics]) == ("Ongoing", 10.0, [("native", [0, 1])])
        assert unknown.error_code == ErrorCode.transactional_id_not_found


def test_list_transactions_filters(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        a = init(conn, tid="a").producer_id
        init(conn, tid="b")
        assert add_offsets(conn, a, 0, tid="a") == ErrorCode.none
        listed = call(conn, 66, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
        assert sorted((t.transactional_id, t.transaction_state) for t in listed.transaction_states) == [
            ("a", "Ongoing"), ("b", "Empty")]
        ongoing = call(conn, 66, 0, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": []})
        assert [t.transactional_id for t in ongoing.transaction_states] == ["a"]
        assert list(ongoing.unknown_state_filters) == ["Bogus"]
        by_pid = call(conn, 66, 0, {"state_filters": [], "producer_id_filters": [a]})
        assert [t.transactional_id for t in by_pid.transaction_states] == ["a"]


@pytest.mark.parametrize("level", [1, 2])
def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path: Path, level: int) -> None:
    settings = {"transaction_abort_timed_out_transaction_cleanup_interval_ms": 50, "transaction_version": level}
    with gateway_thread(tmp_path / "data", **settings) as gw, KafkaConnection(gw.kafka_address) as conn:
        pid = init(conn, timeout=100).producer_id
        assert add_offsets(conn, pid, 0) == ErrorCode.none
        txn_commit(conn, pid, 0, {("in", 0): 1})
        deadline = time.monotonic() + 30
        while describe(conn, TID)[0].transaction_state != "CompleteAbort":
            assert time.monotonic() < deadline, "the timed-out transaction was not aborted"
            time.sleep(0.05)
        assert describe(conn, TID)[0].producer_epoch == level  # version 2: fenced, then bumped by the abort
        assert end(conn, pid, 0, True) == ErrorCode.producer_fenced


def test_an_ongoing_transaction_keeps_its_timeout_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # the default check: every 10 s
        pid = init(conn, timeout=200).producer_id
        assert add_offsets(conn, pid, 0) == ErrorCode.none
    settings = {"transaction_abort_timed_out_transaction_cleanup_interval_ms": 50}
    with gateway_thread(data, **settings) as gw, KafkaConnection(gw.kafka_address) as conn:
        deadline = time.monotonic() + 30
        while describe(conn, TID)[0].transaction_state != "CompleteAbort":
            assert time.monotonic() < deadline, "the transaction that timed out while the node was down stayed open"
            time.sleep(0.05)
        assert describe(conn, TID)[0].producer_epoch == 2  # fenced, then bumped by the abort (version 2)


ME = "User:ANONYMOUS"


def test_transactional_id_acls(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data, super_users=(ME,), **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        pid = init(conn, tid="mine").producer_id
        init(conn, tid="theirs")
        create_acls = [
            {"resource_type": 5, "resource_name": "mine", "resource_pattern_type": 3, "principal": ME, "host": "*",
             "operation": 4, "permission_type": 3},  # Write (implies Describe) on the transactional id "mine"
            {"resource_type": 3, "resource_name": GROUP, "resource_pattern_type": 3, "principal": ME, "host": "*",
             "operation": 3, "permission_type": 3},  # Read on the group
        ]
        assert all(r.error_code == ErrorCode.none for r in call(conn, 30, 3, {"creations": create_acls}).results)
    with gateway_thread(data, **AUTHORIZER) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert init(conn, tid="theirs").error_code == ErrorCode.transactional_id_authorization_failed
        assert call(conn, 10, 4, {"key_type": 1, "coordinator_keys": ["mine", "theirs"]}).coordinators[1].error_code \
            == ErrorCode.transactional_id_authorization_failed
        again = init(conn, tid="mine")
        assert (again.error_code, again.producer_id) == (ErrorCode.none, pid)
        assert add_offsets(conn, pid, 1, tid="mine") == ErrorCode.none
        assert add_partitions(conn, pid, 1, {"t": [0]}, tid="mine") == {("t", 0): ErrorCode.topic_authorization_failed}
        assert add_partitions(conn, pid, 1, {"t": [0]}, tid="theirs") == {
            ("t", 0): ErrorCode.transactional_id_authorization_failed}
        assert [s.error_code for s in describe(conn, "mine", "theirs")] == [
            ErrorCode.none, ErrorCode.transactional_id_authorization_failed]
        listed = call(conn, 66, 0, {"state_filters": [], "producer_id_filters": []}).transaction_states
        assert [t.transactional_id for t in listed] == ["mine"]
        assert call(conn, 24, 5, {"transactions": []}).error_code == ErrorCode.cluster_authorization_failed


def listed_states(conn: KafkaConnection) -> dict[str, str]:
    r = call(conn, 66, 0, {"state_filters": [], "producer_id_filters": []})
    return {t.transactional_id: t.transaction_state for t in r.transaction_states}


@pytest.mark.parametrize(("op", "kind"), [("write", "enospc"), ("write", "short"), ("fsync", "eio")])
def test_a_refused_log_write_changes_nothing_and_the_node_starts_again(tmp_path: Path, op: str, kind: str) -> None:
    data = tmp_path / "data"
    faults = Faults()
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        pid = init(conn).producer_id
        with faults.active():
            faults.fail_kind(op, kind)
            assert add_offsets(conn, pid, 0) == ErrorCode.coordinator_not_available  # clients retry it
            faults.clear()
            assert listed_states(conn) == {TID: "Empty"}
            assert add_offsets(conn, pid, 0) == ErrorCode.none
        assert faults.injected == 1
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        assert listed_states(conn) == {TID: "Ongoing"}
        assert sql(gw, "SHOW QUARANTINE")["data"] == []


def test_markers_the_disk_refuses_leave_the_transaction_decided_until_the_check_finishes_it(tmp_path: Path) -> None:
    settings = {"transaction_abort_timed_out_transaction_cleanup_interval_ms": 50}
    faults = Faults()
    with gateway_thread(tmp_path / "data", **settings) as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, "out")
        pid = init(conn).producer_id
        assert add_partitions(conn, pid, 0, {"out": [0, 1]}) == {("out", 0): ErrorCode.none, ("out", 1): ErrorCode.none}
        with faults.active():
            # the decision's write goes through, then the disk is full: no marker can be written
            faults.fail("write", at=2, times=1_000_000)
            faults.fail("pwrite", times=1_000_000)
            assert end(conn, pid, 0, True) == ErrorCode.none  # decided: answered, the markers come later
            assert listed_states(conn) == {TID: "PrepareCommit"}
            assert add_partitions(conn, pid, 0, {"out": [0]}) == {("out", 0): ErrorCode.concurrent_transactions}
            faults.clear()
        deadline = time.monotonic() + 30
        while listed_states(conn) != {TID: "CompleteCommit"}:
            assert time.monotonic() < deadline, "the decided transaction was not finished"
            time.sleep(0.05)


def test_a_retried_transaction_writes_only_the_markers_still_missing(tmp_path: Path) -> None:
    """Partition 0's marker is durable, partition 1's refused (ENOSPC once): the retry writes partition 1's only,
    partition 0 holds one marker (its end offset 1), not one more per retry (Kafka resends only what is pending)."""
    def ends() -> list[int]:
        r = call(conn, 2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "out", "partitions": [
            {"partition_index": p, "timestamp": -1, "current_leader_epoch": -1} for p in (0, 1)]}]})
        return [p.offset for t in r.topics for p in t.partitions]

    faults = Faults()
    with gateway_thread(tmp_path / "data", transaction_abort_timed_out_transaction_cleanup_interval_ms=50) as gw, \
            KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, "out")
        pid = init(conn).producer_id
        assert add_partitions(conn, pid, 0, {"out": [0, 1]}) == {("out", 0): ErrorCode.none, ("out", 1): ErrorCode.none}
        with faults.active():
            # the decision, then partition 0's marker go through; partition 1's is refused, and so is every write of
            # the retries while the faults are active (one that succeeded before ends() looked would race it)
            faults.fail("write", at=4, times=1 << 30)
            assert end(conn, pid, 0, True) == ErrorCode.none
            assert (listed_states(conn), ends()) == ({TID: "PrepareCommit"}, [1, 0])
            assert faults.injected >= 1
        deadline = time.monotonic() + 30
        while listed_states(conn) != {TID: "CompleteCommit"}:
            assert time.monotonic() < deadline, "the decided transaction was not finished"
            time.sleep(0.05)
        assert ends() == [1, 1]


def test_require_stable_offset_fetch_answers_unstable_while_a_transaction_holds_offsets(tmp_path: Path) -> None:
    def v7(stable: bool) -> dict[int, tuple[ErrorCode, int]]:
        r = call(conn, 9, 7, {"group_id": GROUP, "topics": [{"name": "in", "partition_indexes": [0, 1]}],
                              "require_stable": stable})
        assert r.error_code == ErrorCode.none
        return {p.partition_index: (p.error_code, p.committed_offset) for t in r.topics for p in t.partitions}

    def v8() -> dict[int, tuple[ErrorCode, int]]:
        r = call(conn, 9, 8, {"groups": [{"group_id": GROUP, "topics": None}], "require_stable": True})
        return {p.partition_index: (p.error_code, p.committed_offset) for t in r.groups[0].topics
                for p in t.partitions}

    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, "in")
        pid = init(conn).producer_id
        assert add_offsets(conn, pid, 0) == ErrorCode.none
        assert set(txn_commit(conn, pid, 0, {("in", 0): 5, ("in", 1): 6}).values()) == {ErrorCode.none}
        assert end(conn, pid, 0, True) == ErrorCode.none
        assert add_offsets(conn, pid, 0) == ErrorCode.none
        assert txn_commit(conn, pid, 0, {("in", 1): 8}) == {("in", 1): ErrorCode.none}  # pending on 1 only
        unstable = (ErrorCode.unstable_offset_commit, -1)
        assert v7(True) == {0: (ErrorCode.none, 5), 1: unstable}
        assert v7(False) == {0: (ErrorCode.none, 5), 1: (ErrorCode.none, 6)}  # read_uncommitted: the last commit
        assert v8() == {0: (ErrorCode.none, 5), 1: unstable}
        assert end(conn, pid, 0, True) == ErrorCode.none
        assert v7(True) == {0: (ErrorCode.none, 5), 1: (ErrorCode.none, 8)}
        assert v8() == {0: (ErrorCode.none, 5), 1: (ErrorCode.none, 8)}


def test_a_batch_of_a_partition_not_added_is_transaction_abortable_from_produce_v11(tmp_path: Path) -> None:
    def produce(version: int, pid: int) -> ErrorCode:
        batch = encode_batch(0, [1000], [None], [b"x"], producer_id=pid, producer_epoch=0, base_sequence=0,
                             is_transactional=True)
        r = call(conn, 0, version, {"transactional_id": TID, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "out", "partition_data": [{"index": 1, "records": batch}]}]})
        return r.responses[0].partition_responses[0].error_code

    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, "out")
        pid = init(conn).producer_id
        assert add_partitions(conn, pid, 0, {"out": [0]}) == {("out", 0): ErrorCode.none}
        assert produce(11, pid) == ErrorCode.transaction_abortable
        assert produce(10, pid) == ErrorCode.invalid_txn_state
