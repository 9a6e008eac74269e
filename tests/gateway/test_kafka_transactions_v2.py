"""Transaction version 2 (KIP-890 part 2) through the Kafka port, in process with a real Engine: the
``transaction.version`` feature in ApiVersions, Produce v12 adding partitions implicitly, EndTxn v5 bumping the epoch
(markers carry the bumped one), TxnOffsetCommit v5 adding the group, a decided transaction finished after a restart
with the right epoch, records of a log written before version 2, ListTransactions v2's pattern, and a completion
retried after its Complete record failed re-applying no offset. Requests are kio's (Kafka's JSON schemas)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, gateway_thread
from kio.schema.errors import ErrorCode

from tests.gateway.test_kafka_transactions import (
    GROUP,
    TID,
    call,
    committed,
    create_topic,
    describe,
    init,
    listed_states,
    txn_commit,
)
from tests.storage.faults import Faults
from walgate.gateway.config import Config, ConfigError, load_config
from walgate.storage.transactions_log import TRANSACTIONS_LOG, TransactionLog
from walgate.wire import decode_batches, encode_batch

TOPIC = "out"


def features(conn: KafkaConnection, version: int = 4) -> tuple[dict[str, Any], dict[str, Any], int]:
    r = call(conn, 18, version, {"client_software_name": "t", "client_software_version": "1"})
    return ({f.name: (f.min_version, f.max_version) for f in r.supported_features},
            {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features},
            r.finalized_features_epoch)


def produce(conn: KafkaConnection, pid: int, epoch: int, seq: int, partitions: list[int], version: int = 12,
            value: bytes = b"x") -> dict[int, ErrorCode]:
    batch = encode_batch(0, [1000], [None], [value], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         is_transactional=True)
    r = call(conn, 0, version, {"transactional_id": TID, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": p, "records": batch} for p in partitions]}]})
    return {p.index: p.error_code for p in r.responses[0].partition_responses}


def end(conn: KafkaConnection, pid: int, epoch: int, commit: bool, version: int = 5) -> tuple[ErrorCode, int, int]:
    r = call(conn, 26, version, {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch,
                                 "committed": commit})
    return r.error_code, getattr(r, "producer_id", -1), getattr(r, "producer_epoch", -1)


def read_committed(conn: KafkaConnection, partition: int) -> tuple[list[bytes], list[tuple[int, int]]]:
    """The committed values of a partition, and its producers' (id, epoch) as DescribeProducers answers them."""
    r = call(conn, 1, 12, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
        "session_id": 0, "session_epoch": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
             "log_start_offset": -1, "last_fetched_epoch": -1}]}]})
    part = r.responses[0].partitions[0]
    starts = {(a.producer_id, a.first_offset) for a in part.aborted_transactions or ()}
    values, aborting = [], set()
    for b in decode_batches(bytes(part.records or b"")):
        if b.is_control:
            aborting.discard(b.producer_id)
            continue
        if (b.producer_id, b.base_offset) in starts:
            aborting.add(b.producer_id)
        if b.producer_id not in aborting:
            values += [rec.value for rec in b.records]
    d = call(conn, 61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [partition]}]})
    producers = [(p.producer_id, p.producer_epoch) for p in d.topics[0].partitions[0].active_producers]
    return values, producers


def test_api_versions_advertises_the_finalized_transaction_version(tmp_path: Path) -> None:
    for level, finalized in ((2, {"transaction.version": (2, 2)}), (1, {"transaction.version": (1, 1)}), (0, {})):
        with gateway_thread(tmp_path / f"d{level}", transaction_version=level) as gw, \
                KafkaConnection(gw.kafka_address) as conn:
            supported, got, epoch = features(conn)
            assert (supported, got) == ({"transaction.version": (0, 2)}, finalized)
            assert epoch > 0  # clients take finalized features only from an epoch >= 0
            assert features(conn, 3)[:2] == ({}, finalized)  # v3 leaves out features supported from 0
            versions = {k.api_key: k.max_version for k in call(conn, 18, 3, {"client_software_name": "t",
                                                                              "client_software_version": "1"}).api_keys}
            assert (versions[0], versions[26], versions[28], versions[66]) == (12, 5, 5, 2)


def test_produce_v12_adds_partitions_and_end_txn_v5_bumps_the_epoch(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, TOPIC)
        pid = init(conn).producer_id
        # version 11 still needs the client's AddPartitionsToTxn; version 12 adds the partitions itself
        assert produce(conn, pid, 0, 0, [0], version=11) == {0: ErrorCode.transaction_abortable}
        assert produce(conn, pid, 0, 0, [0, 1], value=b"a1") == {0: ErrorCode.none, 1: ErrorCode.none}
        [state] = describe(conn, TID)
        assert (state.transaction_state, [(t.topic, list(t.partitions)) for t in state.topics]) == \
            ("Ongoing", [(TOPIC, [0, 1])])
        assert end(conn, pid, 0, True) == (ErrorCode.none, pid, 1)
        assert read_committed(conn, 0) == ([b"a1"], [(pid, 1)])  # the marker carried the bumped epoch
        assert end(conn, pid, 0, True) == (ErrorCode.none, pid, 1)  # a retry answers the same
        # the next transaction at the new epoch, its sequences from 0; aborted
        assert produce(conn, pid, 1, 0, [0], value=b"b1") == {0: ErrorCode.none}
        assert end(conn, pid, 1, False) == (ErrorCode.none, pid, 2)
        assert read_committed(conn, 0) == ([b"a1"], [(pid, 2)])
        assert produce(conn, pid, 1, 1, [0]) == {0: ErrorCode.invalid_producer_epoch}  # the old epoch is fenced
        assert end(conn, pid, 1, True)[0] == ErrorCode.invalid_txn_state
        assert end(conn, pid, 5, True) == (ErrorCode.producer_fenced, -1, -1)
        # an abort of nothing (the client's abortTransaction before any send) bumps too
        assert end(conn, pid, 2, False) == (ErrorCode.none, pid, 3)
        assert produce(conn, pid, 3, 0, [1], value=b"c1") == {1: ErrorCode.none}
        assert produce(conn, pid, 3, 0, [9]) == {9: ErrorCode.unknown_topic_or_partition}  # nothing added
        assert end(conn, pid, 3, True) == (ErrorCode.none, pid, 4)
        assert read_committed(conn, 1) == ([b"a1", b"c1"], [(pid, 4)])


def test_txn_offset_commit_v5_adds_the_group(tmp_path: Path) -> None:
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, TOPIC)
        pid = init(conn).producer_id
        assert txn_commit(conn, pid, 0, {(TOPIC, 0): 5}) == {(TOPIC, 0): ErrorCode.transaction_abortable}  # v4
        assert txn_commit(conn, pid, 0, {(TOPIC, 0): 5}, version=5) == {(TOPIC, 0): ErrorCode.none}
        assert committed(conn, TOPIC, [0]) == {0: -1}
        assert end(conn, pid, 0, True) == (ErrorCode.none, pid, 1)
        assert committed(conn, TOPIC, [0]) == {0: 5}
        assert txn_commit(conn, pid, 0, {(TOPIC, 0): 6}, version=5) == {(TOPIC, 0): ErrorCode.invalid_producer_epoch}


def test_a_decided_version_2_transaction_finishes_after_a_restart_with_its_bumped_epoch(tmp_path: Path) -> None:
    data, faults = tmp_path / "data", Faults()
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, TOPIC)
        pid = init(conn).producer_id
        assert produce(conn, pid, 0, 0, [0, 1], value=b"v") == {0: ErrorCode.none, 1: ErrorCode.none}
        assert txn_commit(conn, pid, 0, {(TOPIC, 0): 1}, version=5) == {(TOPIC, 0): ErrorCode.none}
        with faults.active():
            faults.fail("write", at=2, times=1_000_000)  # the decision is written, then the disk is full
            faults.fail("pwrite", times=1_000_000)
            assert end(conn, pid, 0, True) == (ErrorCode.none, pid, 1)  # decided: answered, markers come later
            assert listed_states(conn) == {TID: "PrepareCommit"}
            assert end(conn, pid, 0, True)[0] == ErrorCode.concurrent_transactions
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # finished before serving
        [state] = describe(conn, TID)
        assert (state.transaction_state, state.producer_id, state.producer_epoch) == ("CompleteCommit", pid, 1)
        assert read_committed(conn, 0) == ([b"v"], [(pid, 1)])
        assert read_committed(conn, 1) == ([b"v"], [(pid, 1)])
        assert committed(conn, TOPIC, [0]) == {0: 1}
        assert produce(conn, pid, 1, 0, [0]) == {0: ErrorCode.none}  # the producer goes on at the answered epoch


def test_a_log_written_before_version_2_is_read_as_version_0(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, TOPIC)
        pid = init(conn).producer_id
        produce(conn, pid, 0, 0, [0], version=12)
    tlog = TransactionLog.open(data / TRANSACTIONS_LOG)
    old = {k: v for k, v in tlog.records[TID].items() if k not in ("tv", "next_pid")}
    tlog.append([(TID, old)])  # as a walgate of transaction version 1 wrote it
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:
        [state] = describe(conn, TID)
        assert (state.transaction_state, state.producer_epoch) == ("Ongoing", 0)
        assert end(conn, pid, 0, True, version=4) == (ErrorCode.none, -1, -1)  # v4 answers no producer fields
        assert read_committed(conn, 0) == ([b"x"], [(pid, 0)])  # version 0: no bump
        assert describe(conn, TID)[0].producer_epoch == 0


def test_list_transactions_v2_filters_by_a_pattern(tmp_path: Path) -> None:
    def listed(pattern: str | None) -> tuple[ErrorCode, set[str]]:
        r = call(conn, 66, 2, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                               "transactional_id_pattern": pattern})
        return r.error_code, {t.transactional_id for t in r.transaction_states}

    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        for tid in ("my-special-0", "your-special-1", "plain"):
            init(conn, tid)
        assert listed(".*special-.*") == (ErrorCode.none, {"my-special-0", "your-special-1"})
        assert listed("special") == (ErrorCode.none, set())  # the whole id must match
        assert listed(None) == listed("") == (ErrorCode.none, {"my-special-0", "your-special-1", "plain"})
        assert listed("(ab(cd") == (ErrorCode.invalid_regular_expression, set())


@pytest.mark.parametrize("version", [4, 5])
def test_a_completion_retried_after_its_complete_record_failed_applies_no_offset_twice(tmp_path: Path,
                                                                                       version: int) -> None:
    data, faults = tmp_path / "data", Faults()
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # the check runs every 10 s
        create_topic(conn, TOPIC)
        pid = init(conn).producer_id
        if version == 4:
            call(conn, 25, 4, {"transactional_id": TID, "producer_id": pid, "producer_epoch": 0, "group_id": GROUP})
        assert txn_commit(conn, pid, 0, {(TOPIC, 0): 5}, version=version) == {(TOPIC, 0): ErrorCode.none}
        with faults.active():
            # fsyncs: the decision, the offsets, the Complete record (refused)
            faults.fail("fsync", at=3)
            assert end(conn, pid, 0, True, version=version)[0] == ErrorCode.none
            assert listed_states(conn) == {TID: "PrepareCommit"}
        assert faults.injected == 1
        assert committed(conn, TOPIC, [0]) == {0: 5}
        time.sleep(0.01)
        r = call(conn, 8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                              "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                                  {"partition_index": 0, "committed_offset": 9, "committed_leader_epoch": -1,
                                   "committed_metadata": ""}]}]})
        assert r.topics[0].partitions[0].error_code == ErrorCode.none  # the group moves on meanwhile
    with gateway_thread(data) as gw, KafkaConnection(gw.kafka_address) as conn:  # completed again at the start
        assert listed_states(conn) == {TID: "CompleteCommit"}
        assert committed(conn, TOPIC, [0]) == {0: 9}  # the transaction's 5 was not applied again


def test_transaction_version_is_a_setting_of_kafkas_feature_name(tmp_path: Path) -> None:
    file = tmp_path / "server.properties"
    file.write_text(f"log.dirs={tmp_path / 'data'}\ntransaction.version=1\n")
    assert load_config(file, env={}).transaction_version == 1
    assert Config(tmp_path / "data").transaction_version == 2  # a new Kafka 4 cluster's level
    with pytest.raises(ConfigError, match="transaction_version must be 0, 1 or 2"):
        Config(tmp_path / "data", transaction_version=3)


@pytest.mark.parametrize("kind", ["enospc", "short"])
def test_an_implicit_add_the_log_refuses_writes_nothing_and_is_retriable(tmp_path: Path, kind: str) -> None:
    faults = Faults()
    with gateway_thread(tmp_path / "data") as gw, KafkaConnection(gw.kafka_address) as conn:
        create_topic(conn, TOPIC)
        pid = init(conn).producer_id
        with faults.active():
            faults.fail_kind("write", kind)  # the transaction log's record of the add
            assert produce(conn, pid, 0, 0, [0], value=b"lost") == {0: ErrorCode.not_enough_replicas}  # retried
        assert faults.injected == 1
        assert listed_states(conn) == {TID: "Empty"}
        assert produce(conn, pid, 0, 0, [0], value=b"kept") == {0: ErrorCode.none}  # the client's retry
        assert end(conn, pid, 0, True) == (ErrorCode.none, pid, 1)
        assert read_committed(conn, 0) == ([b"kept"], [(pid, 1)])
