"""The coordinators' lines as Kafka records (walgate/storage/coordinator_records.py): keys round-trip, a partition's
records replay to the map the file logs replay from the same lines, damage is reported and skipped, and the logs
replayed from records never write a file."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.storage.fuzzing import fuzz_settings
from walgate.storage import lines
from walgate.storage.coordinator_log import Committed, CoordinatorLog, record_line
from walgate.storage.coordinator_records import (
    CoordinatorRecordKey,
    ReplayedLogs,
    UnknownRecordKind,
    coordinator_record,
    encode_records,
    parse_key,
    record_key,
    replay_records,
)
from walgate.storage.damage import DamageLog
from walgate.storage.partitions import lost_batch
from walgate.storage.share_state_log import ShareStateLog, share_line
from walgate.storage.transactions_log import TRANSACTIONS_LOG, TransactionLog, transaction_line
from walgate.wire.record_batch import decode_batch, encode_batch, end_txn_marker, rebase

C1 = Committed(5, 2, "meta", 1_700_000_000_000)
C2 = Committed(9, 3, None, 1_700_000_000_500)
TXN = {"pid": 7, "epoch": 1, "state": "Ongoing", "partitions": [["t", 0]]}
HELD = {"pid": 7, "epoch": 1, "state": "Ongoing", "groups": ["g"], "proxy": True}
SHARE = {"s": 10, "e": 14, "r": [[10, 11, 2, 1], [12, 13, 0, 2]]}  # what SharePartition.to_record writes


def batches(*groups: list[tuple[bytes, bytes | None]], start: int = 0) -> list[bytes]:
    """One batch per group of records, at consecutive offsets from ``start`` (as the partition would store them)."""
    out = []
    for records in groups:
        out.append(rebase(encode_records(records, 1_700_000_000_000), start, 0))
        start += len(records)
    return out


def state(logs: ReplayedLogs) -> tuple[dict[Any, Any], dict[str, Any], dict[str, Any]]:
    return dict(logs.offsets.items()), dict(logs.offsets.groups()), dict(logs.transactions.records)


def test_held_offsets_of_an_id_replay_apart_from_its_state():
    """``["h", id]`` records (offsets the partition's groups hold for the id's transaction) go to ``held``, never
    to the id's own state of the same id."""
    logs, reports = replay(batches([coordinator_record(("t", "a"), TXN), coordinator_record(("h", "a"), HELD)],
                                   [coordinator_record(("h", "b"), HELD), coordinator_record(("h", "b"), None)]))
    assert reports == [] and dict(logs.transactions.records) == {"a": TXN} and dict(logs.held.records) == {"a": HELD}


def test_share_partition_states_replay_apart_from_the_offsets_of_the_same_key():
    """``["s", group, topic key, partition]`` records go to ``shares``, never to the group's committed offset of
    the same (group, topic, partition); a tombstone deletes the share-partition's state."""
    logs, reports = replay(batches(
        [coordinator_record(("s", "g", "t", 0), SHARE), coordinator_record(("o", "g", "t", 0), C1),
         coordinator_record(("s", "g", "t", 1), SHARE)],
        [coordinator_record(("s", "g", "t", 1), None), coordinator_record(("s", "h", "t", 0), {"s": 0, "e": 0, "r": []})]))
    assert reports == [] and dict(logs.offsets.items()) == {("g", "t", 0): C1}
    assert dict(logs.shares.states()) == {("g", "t", 0): SHARE, ("h", "t", 0): {"s": 0, "e": 0, "r": []}}


def replay(chunks: list[bytes]) -> tuple[ReplayedLogs, list[str]]:
    reports: list[str] = []
    return replay_records(chunks, reports.append), reports


# ---------------------------------------------------------------------------------------------------------- keys

@pytest.mark.parametrize(("key", "raw"), [
    (("o", "g", "t", 0), b'["o","g","t",0]'),
    (("o", "", "t\u00e9\"\\", 2**31 - 1), b'["o","","t\xc3\xa9\\"\\\\",2147483647]'),
    (("g", "group-1"), b'["g","group-1"]'),
    (("t", "txn \u2603"), b'["t","txn \xe2\x98\x83"]'),
    (("h", "txn"), b'["h","txn"]'),
    (("s", "g", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", 3), b'["s","g","6ba7b810-9dad-11d1-80b4-00c04fd430c8",3]'),
])
def test_every_key_kind_round_trips(key, raw):
    assert record_key(key) == raw
    assert parse_key(raw) == key


@given(st.one_of(
    st.tuples(st.sampled_from(["o", "s"]), st.text(max_size=8), st.text(max_size=8), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.sampled_from(["g", "t", "h"]), st.text(max_size=12)),
))
@fuzz_settings(300)
def test_keys_round_trip(key):
    assert parse_key(record_key(key)) == key


@pytest.mark.parametrize("raw", [
    b"", b"not json", b"{}", b"[]", b'"g"', b"[1, 2]", b'["g"]', b'["g","a","b"]', b'["o","g","t"]',
    b'["o","g","t","0"]', b'["o","g","t",true]', b'["o","g","t",1.0]', b'["o","g",1,0]', b'["t",null]',
    b'["g", "a"]', b'["g","\\u0061"]', b' ["g","a"]', b'["g","a"]\n',  # another encoding of ["g","a"]
    b'["s","g","t"]', b'["s","g","t","0"]', b'["s","g",1,0]', b'["s","g","t",0,1]',
])
def test_a_key_that_is_no_coordinator_key_does_not_parse(raw):
    with pytest.raises(ValueError) as info:
        parse_key(raw)
    assert not isinstance(info.value, UnknownRecordKind)


def test_a_key_of_another_kind_is_told_apart():
    with pytest.raises(UnknownRecordKind):
        parse_key(b'["x","group","topic",0]')


@pytest.mark.parametrize("key", [
    (), ("o", "g", "t"), ("o", "g", "t", "0"), ("o", "g", "t", True), ("g", 1), ("t", None), ("x", "a"),
    (["g"], "a"), ["g", "a"], ("g", "\ud800"), ("s", "g", "t"), ("s", "g", "t", "0"),
])
def test_record_key_refuses_what_is_no_key(key):
    with pytest.raises(ValueError):
        record_key(key)


# ---------------------------------------------------------------------------------------------------------- values

def test_values_are_the_lines_the_file_logs_write(tmp_path):
    offsets = CoordinatorLog.open(tmp_path / "offsets-0.log")
    offsets.commit("g", [("t", 0, C1), ("u", 3, C2)])
    offsets.write_groups([("g", {"generation": 4}), ("h", [1, "x"])])
    offsets.delete("g", "u", 3)
    offsets.write_groups([("h", None)])
    transactions = TransactionLog.open(tmp_path / TRANSACTIONS_LOG)
    transactions.append([("a", TXN), ("b", TXN)])
    transactions.append([("a", None)])
    as_records = [
        coordinator_record(("o", "g", "t", 0), C1), coordinator_record(("o", "g", "u", 3), C2),
        coordinator_record(("g", "g"), {"generation": 4}), coordinator_record(("g", "h"), [1, "x"]),
    ]
    assert b"".join(v or b"" for _, v in as_records) + record_line(("g", "u", 3), None) + record_line("h", None) \
        == (tmp_path / "offsets-0.log").read_bytes()
    assert coordinator_record(("t", "a"), TXN)[1] + coordinator_record(("t", "b"), TXN)[1] \
        + transaction_line("a", None) == (tmp_path / TRANSACTIONS_LOG).read_bytes()
    assert coordinator_record(("o", "g", "u", 3), None) == (b'["o","g","u",3]', None)  # a deletion: a tombstone
    with pytest.raises(ValueError):
        coordinator_record(("o", "g", "t", 0), {"offset": 5})


def test_share_values_are_the_lines_share_groups_log_writes(tmp_path):
    shares = ShareStateLog.open(tmp_path / "share_groups.log")
    shares.write([(("g", "t", 0), SHARE), (("g", "t", 1), SHARE)])
    shares.write([(("g", "t", 1), None)])
    assert coordinator_record(("s", "g", "t", 0), SHARE)[1] + coordinator_record(("s", "g", "t", 1), SHARE)[1] \
        + share_line(("g", "t", 1), None) == (tmp_path / "share_groups.log").read_bytes()
    assert coordinator_record(("s", "g", "t", 1), None) == (b'["s","g","t",1]', None)


def test_a_batch_of_records_is_magic_2_uncompressed_at_offset_0_without_a_producer():
    records = [coordinator_record(("g", "g"), {"x": 1}), coordinator_record(("o", "g", "t", 1), None)]
    batch = decode_batch(encode_records(records, 1234))
    assert (batch.base_offset, batch.magic, batch.compression, batch.producer_id, batch.is_transactional,
            batch.is_control) == (0, 2, None, -1, False, False)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records] == [
        (0, 1234, records[0][0], records[0][1], []), (1, 1234, records[1][0], None, [])]
    with pytest.raises(ValueError):
        encode_records([], 1234)


# ---------------------------------------------------------------------------------------------------------- replay

def test_records_replay_in_order_and_a_tombstone_deletes():
    logs, reports = replay(batches(
        [coordinator_record(("o", "g", "t", 0), C1), coordinator_record(("g", "g"), {"gen": 1}),
         coordinator_record(("t", "a"), TXN)],
        [coordinator_record(("o", "g", "t", 0), C2), coordinator_record(("o", "g", "t", 1), C1),
         coordinator_record(("g", "g"), None), coordinator_record(("t", "a"), None), coordinator_record(("t", "b"), TXN)],
    ))
    assert reports == []
    assert state(logs) == ({("g", "t", 0): C2, ("g", "t", 1): C1}, {}, {"b": TXN})
    assert logs.offsets.get("g", "t", 0) == C2


def test_replaying_more_batches_into_replayed_logs_is_replaying_them_all_at_once():
    chunks = batches([coordinator_record(("o", "g", "t", 0), C1)], [coordinator_record(("o", "g", "t", 0), None)],
                     [coordinator_record(("t", "a"), TXN), coordinator_record(("g", "h"), 3)])
    whole, _ = replay(chunks)
    first = replay_records(chunks[:2])
    assert replay_records(chunks[2:], into=first) is first
    assert state(first) == state(whole) == ({}, {"h": 3}, {"a": TXN})


def test_a_chunk_may_hold_several_batches():
    chunks = batches([coordinator_record(("g", "a"), 1)], [coordinator_record(("g", "b"), 2)],
                     [coordinator_record(("g", "a"), 3)])
    logs, reports = replay([b"".join(chunks)])
    assert reports == [] and state(logs) == state(replay(chunks)[0]) == ({}, {"a": 3, "b": 2}, {})


names = st.text(alphabet="ab\u00e9\"", max_size=2)
committed = st.builds(Committed, st.integers(-1, 2**40), st.integers(-1, 50), st.none() | st.text(max_size=4),
                      st.integers(0, 2**42))
json_values = st.recursive(st.integers(-5, 5) | st.text(max_size=3) | st.booleans(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
                           max_leaves=6)
ops = st.lists(st.one_of(
    st.tuples(st.tuples(st.just("o"), names, names, st.integers(0, 2)), st.none() | committed),
    st.tuples(st.tuples(st.just("g"), names), st.none() | json_values),
    st.tuples(st.tuples(st.just("t"), names), st.none() | st.dictionaries(names, json_values, max_size=3)),
    st.tuples(st.tuples(st.just("s"), names, names, st.integers(0, 2)), st.none() | json_values),
), max_size=40)


def file_line(key: CoordinatorRecordKey, value: Any) -> bytes:
    """The line the file log writes for *value* (None: its tombstone line) of *key*."""
    if key[0] == "t":
        return transaction_line(key[1], value)
    if key[0] == "s":
        return share_line((key[1], key[2], key[3]), value)
    return record_line(key[1] if key[0] == "g" else (key[1], key[2], key[3]), value)


@given(ops, st.lists(st.integers(1, 8), min_size=1, max_size=40), st.lists(st.booleans(), max_size=40), st.data())
@fuzz_settings(200)
def test_records_replay_to_the_map_the_file_logs_replay_from_the_same_lines(ops, sizes, joins, data):
    records = []
    for key, value in ops:
        record = coordinator_record(key, value)
        if value is None and data.draw(st.booleans()):  # a deletion written as the tombstone line: deletes too
            record = (record[0], file_line(key, None))
        records.append(record)
    groups = []
    while records:
        size = sizes[len(groups) % len(sizes)]
        groups.append(records[:size])
        records = records[size:]
    chunks = batches(*groups)
    for i in reversed(range(len(chunks) - 1)):  # some batches read as one chunk, as a WAL read can return them
        if i < len(joins) and joins[i]:
            chunks[i : i + 2] = [chunks[i] + chunks[i + 1]]
    with tempfile.TemporaryDirectory() as tmp:
        offsets_path, txn_path = Path(tmp) / "offsets-0.log", Path(tmp) / TRANSACTIONS_LOG
        shares_path = Path(tmp) / "share_groups.log"
        offsets_path.write_bytes(b"".join(file_line(k, v) for k, v in ops if k[0] in "og"))
        txn_path.write_bytes(b"".join(file_line(k, v) for k, v in ops if k[0] == "t"))
        shares_path.write_bytes(b"".join(file_line(k, v) for k, v in ops if k[0] == "s"))
        damage = DamageLog(Path(tmp))
        from_file = CoordinatorLog.read(offsets_path, damage)
        txns = TransactionLog.open(txn_path, damage)
        shares = ShareStateLog.open(shares_path, damage)
        assert damage.records == []
    logs, reports = replay(chunks)
    assert reports == []
    assert state(logs) == (dict(from_file.items()), dict(from_file.groups()), dict(txns.records))
    assert dict(logs.shares.states()) == dict(shares.states())


# ---------------------------------------------------------------------------------------------------------- damage

GOOD = [coordinator_record(("o", "g", "t", 0), C1), coordinator_record(("g", "g"), {"gen": 1}),
        coordinator_record(("t", "a"), TXN)]
BEFORE = ({("g", "t", 0): C2}, {"h": 1}, {})  # what the first batch of damaged() leaves
AFTER = ({("g", "t", 0): C1}, {"g": {"gen": 1}, "h": 1}, {"a": TXN})  # and the second batch on top


def damaged(second: bytes) -> tuple[list[bytes], int]:
    """A good first batch (offsets 10-11), then *second* at offset 12; the last chunk is a good batch (offset 20)
    recording ``("g", "z")``."""
    first = rebase(encode_records([coordinator_record(("o", "g", "t", 0), C2), coordinator_record(("g", "h"), 1)],
                                  5), 10, 0)
    return [first, second, rebase(encode_records([coordinator_record(("g", "z"), 0)], 5), 20, 0)], 12


def without_z(logs: ReplayedLogs) -> tuple[dict[Any, Any], dict[str, Any], dict[str, Any]]:
    offsets, groups, txns = state(logs)
    assert groups.pop("z") == 0  # the batch after the damaged one counts
    return offsets, groups, txns


def test_a_truncated_batch_is_reported_and_skipped():
    batch = rebase(encode_records(GOOD, 5), 12, 0)
    for cut in range(1, len(batch)):
        chunks, _ = damaged(batch[:cut])
        logs, reports = replay(chunks)
        assert without_z(logs) == BEFORE
        assert len(reports) == 1 and reports[0].startswith("batch at offset 12: truncated" if cut >= 16 else
                                                           f"{cut} bytes after the batches")
        logs, reports = replay([chunks[0] + chunks[1], chunks[2]])  # truncated after a whole batch in one chunk
        assert without_z(logs) == BEFORE and len(reports) == 1


def test_a_flipped_byte_in_a_stored_batch_skips_that_batch_whole_and_is_reported():
    batch = rebase(encode_records(GOOD, 5), 12, 0)
    for pos in range(len(batch)):
        for bit in (0x01, 0x02, 0x80):  # on the length: longer (truncated), shorter, below a header
            flipped = bytearray(batch)
            flipped[pos] ^= bit
            chunks, _ = damaged(bytes(flipped))
            logs, reports = replay(chunks)
            if pos < 8 or 12 <= pos < 16:  # the base offset and leader epoch: the partition's, not the CRC's
                assert without_z(logs) == AFTER and reports == []
            else:  # a shorter length leaves bytes after the batch, reported too
                assert without_z(logs) == BEFORE and reports, (pos, bit)
                assert reports[0].startswith("batch at offset 12: ") and len(reports) <= 2, reports
                assert len(reports) == 1 or 8 <= pos < 12, (pos, bit, reports)


def test_a_flipped_byte_in_a_value_skips_only_that_record():
    for pos in range(len(GOOD[1][1] or b"")):
        value = bytearray(GOOD[1][1] or b"")
        value[pos] ^= 0x04
        chunks, at = damaged(encode_batch(12, [5] * 3, [k for k, _ in GOOD], [GOOD[0][1], bytes(value), GOOD[2][1]]))
        logs, reports = replay(chunks)
        assert without_z(logs) == ({("g", "t", 0): C1}, {"h": 1}, {"a": TXN}), pos  # the group keeps its value
        assert len(reports) == 1 and reports[0].startswith(f"batch at offset {at}, record at offset delta 1: "), pos


def test_a_flipped_byte_in_a_key_never_applies_its_record(caplog):
    key = GOOD[1][0]
    for pos in range(len(key)):
        for bit in (0x01, 0x02, 0x20):
            flipped = bytearray(key)
            flipped[pos] ^= bit
            chunks, at = damaged(encode_batch(12, [5] * 3, [GOOD[0][0], bytes(flipped), GOOD[2][0]],
                                              [v for _, v in GOOD]))
            caplog.clear()
            with caplog.at_level(logging.WARNING, "walgate.storage.coordinator_records"):
                logs, reports = replay(chunks)
            assert without_z(logs) == ({("g", "t", 0): C1}, {"h": 1}, {"a": TXN}), (pos, bit)
            if reports:  # a key that does not parse, or another group's, which its line does not record
                assert len(reports) == 1 and reports[0].startswith(f"batch at offset {at}, record at offset delta 1")
            else:  # a tag flipped to a kind of a later version: skipped with a warning
                assert "skipped records of a later version" in caplog.text, (pos, bit)


def test_a_record_whose_key_does_not_match_its_line_is_reported_and_skipped():
    mismatched = [
        (record_key(("g", "other")), GOOD[1][1]),  # another group's key
        (record_key(("o", "g", "t", 1)), GOOD[0][1]),  # another partition's
        (record_key(("t", "g")), GOOD[1][1]),  # a group record under a transaction key
        (record_key(("g", "a")), GOOD[2][1]),  # a transaction record under a group key
        (record_key(("g", "g")), GOOD[0][1]),  # an offset commit under a group key
        (record_key(("s", "g", "t", 1)), coordinator_record(("s", "g", "t", 0), SHARE)[1]),  # another share-partition's
        (record_key(("s", "g", "t", 0)), GOOD[0][1]),  # an offset commit under a share key
        (record_key(("o", "g", "t", 0)), coordinator_record(("s", "g", "t", 0), SHARE)[1]),  # and the reverse
    ]
    for number, (key, value) in enumerate(mismatched):
        chunks, at = damaged(rebase(encode_records([GOOD[2], (key, value)], 5), 12, 0))
        logs, reports = replay(chunks)
        assert without_z(logs) == (BEFORE[0], BEFORE[1], {"a": TXN}), number
        assert len(reports) == 1 and reports[0].startswith(f"batch at offset {at}, record at offset delta 1: "), \
            reports


@pytest.mark.parametrize(("key", "value", "says"), [
    (None, GOOD[1][1], "a record without a key"),
    (GOOD[1][0], (GOOD[1][1] or b"")[:-1], "no terminating newline"),
    (GOOD[1][0], b"\n", "not a checksummed record line"),
    (GOOD[1][0], lines.encode(["g", 1]), "not an offset commit or group record"),
    (GOOD[1][0], lines.encode(None), "not an offset commit or group record"),  # a line of null is no tombstone
    (GOOD[2][0], GOOD[1][1], "not a transaction record"),
    (record_key(("s", "g", "t", 0)), lines.encode({"g": "g", "t": "t", "p": -1, "v": 1}), "not a share-partition record"),
    (b"garbage", GOOD[1][1], "key is not JSON"),
])
def test_a_record_that_is_no_coordinator_record_is_reported_and_skipped(key, value, says):
    chunks, at = damaged(rebase(encode_records([GOOD[2], (key, value)], 5), 12, 0))
    logs, reports = replay(chunks)
    assert without_z(logs) == (BEFORE[0], BEFORE[1], {"a": TXN})
    assert len(reports) == 1 and reports[0].startswith(f"batch at offset {at}, record at offset delta 1: ") \
        and says in reports[0], reports


def test_transaction_markers_are_skipped_and_lost_entries_reported():
    marker = end_txn_marker(42, 0, 3, True, 5, base_offset=12)
    logs, reports = replay(damaged(marker)[0])
    assert without_z(logs) == BEFORE and reports == []
    logs, reports = replay(damaged(lost_batch(12, 3))[0])
    assert without_z(logs) == BEFORE
    assert reports == ["batch at offset 12: records up to offset 14 are lost (a damaged WAL entry); their keys keep "
                       "their previous values"]


def test_a_transactional_batch_of_data_is_reported_and_skipped():
    batch = encode_batch(12, [5] * 3, [k for k, _ in GOOD], [v for _, v in GOOD], producer_id=42, producer_epoch=0,
                         base_sequence=0, is_transactional=True)
    logs, reports = replay(damaged(batch)[0])
    assert without_z(logs) == BEFORE and len(reports) == 1 and "transactional batch" in reports[0]


def test_records_of_a_later_kind_are_skipped_with_a_warning_not_reported(caplog):
    later = (b'["x","group","topic",0]', b"anything")
    with caplog.at_level(logging.WARNING, "walgate.storage.coordinator_records"):
        logs, reports = replay(damaged(rebase(encode_records([later] + GOOD, 5), 12, 0))[0])
    assert without_z(logs) == AFTER and reports == []
    assert "batch at offset 12: skipped records of a later version (key of unknown kind 'x')" in caplog.text


def test_without_a_callback_damage_is_logged(caplog):
    with caplog.at_level(logging.WARNING, "walgate.storage.coordinator_records"):
        logs = replay_records([b"\x00" * 20])
    assert state(logs) == ({}, {}, {})
    assert "coordinator partition: batch at offset 0: shorter than its header" in caplog.text


@given(st.binary(max_size=200), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4))
@fuzz_settings(300)
def test_replay_never_raises_whatever_the_bytes(noise, flips):
    chunk = bytearray(b"".join(batches(GOOD, [coordinator_record(("g", "z"), 0)])) + noise)
    for pos, byte in flips:
        chunk[pos % len(chunk)] = byte
    replay_records([bytes(chunk)], lambda message: None)


# ---------------------------------------------------------------------------------------------------------- no file

def test_logs_replayed_from_records_never_write_a_file():
    logs, _ = replay(batches(GOOD))
    before = state(logs)
    for write in (lambda: logs.offsets.commit("g", [("t", 0, C2)]), lambda: logs.offsets.delete("g"),
                  lambda: logs.offsets.write_groups([("g", None)]), lambda: logs.transactions.append([("a", None)]),
                  lambda: logs.shares.write([(("g", "t", 0), None)]),
                  lambda: logs.offsets.path, lambda: logs.transactions.path):
        with pytest.raises(RuntimeError, match="has no file"):
            write()
        assert state(logs) == before
        assert logs.offsets.take_sync() is None  # nothing was queued
