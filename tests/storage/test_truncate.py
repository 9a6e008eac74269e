"""A vnode cut back to a WAL version (replication's follower truncation, issue 25 step 6): its WAL and every state
derived from it equal those of a vnode that only ever had the entries below the cut, also after a reopen and after
the next append; the cut is all or nothing when the disk refuses a step or the process is killed mid-way."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clocks import ManualClock
from faults import FAULT_KINDS, Faults
from fuzzing import fuzz_settings
from hypothesis import given
from hypothesis import strategies as st

from walgate.storage.batch_cache import BatchCache
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError, StorageUnavailable
from walgate.storage.wal import Wal, WalOptions
from walgate.storage.wal_truncate import INTENT
from walgate.wire import encode_batch

SMALL_SEGMENTS = 300  # bytes: the appends roll segments, so cuts fall in sealed ones too

# ------------------------------------------------------------------ a history of appends, and the state it derives

Op = tuple[Any, ...]

OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 3), st.integers(0, 9)),  # the first into a table creates it (meta)
    st.tuples(st.just("drop"), st.integers(0, 3)),  # a meta entry (when the table is there)
    st.tuples(st.just("produce"), st.integers(1, 2), st.integers(1, 3)),  # an idempotent batch
    st.tuples(st.just("txn"), st.integers(1, 3)),  # a transactional batch of producer 3
    st.tuples(st.just("marker"), st.booleans()),  # its transaction ended: commit or abort
), min_size=1, max_size=14)


def engine(path: Path) -> Engine:
    """An engine with a TDengine database (two topics over it, one WITH META) and a Kafka-native topic, each of one
    vnode with small segments."""
    fresh = not path.exists()
    e = Engine.open(path, clock=ManualClock())
    if fresh:
        e.execute("CREATE DATABASE db VGROUPS 1")
        e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        e.execute("CREATE TOPIC tp AS SELECT ts, v FROM db.st WHERE v > 2")
        e.execute("CREATE TOPIC tm WITH META AS DATABASE db")
        e.create_kafka_topic("k", 1, {})
    for vnode in (e.vnodes["db"][0], kafka_vnode(e)):
        vnode.wal.options = vnode.wal.options.__class__(**{**vnode.wal.options.__dict__,
                                                           "segment_bytes": SMALL_SEGMENTS})
    return e


def kafka_vnode(e: Engine) -> Any:
    return e.vnodes[e.catalog.topics["k"].db][0]


def apply(e: Engine, ops: list[Op], sequences: dict[int, int] | None = None) -> None:
    """Run ``ops`` in order (``sequences``: each producer's next sequence, carried on; the same history gives the same
    sequences, so two engines given one history append the same entries)."""
    seqs = {} if sequences is None else sequences
    for op in ops:
        if op[0] == "insert":
            e.execute(f"INSERT INTO db.t{op[1]} USING db.st TAGS ({op[1]}) VALUES ({1_000 + op[2]}, {op[2]})")
        elif op[0] == "drop":
            if any(t.name == f"t{op[1]}" and not t.dropped for t in e.vnodes["db"][0].tables()):
                e.execute(f"DROP TABLE db.t{op[1]}")
        elif op[0] in ("produce", "txn"):
            pid = op[1] if op[0] == "produce" else 3
            n = op[2] if op[0] == "produce" else op[1]
            seq = seqs.get(pid, 0)
            e.append_batches("k", 0, [encode_batch(0, [2_000 + seq] * n, [None] * n, [b"v%d" % seq] * n,
                                                   producer_id=pid, producer_epoch=0, base_sequence=seq,
                                                   is_transactional=op[0] == "txn")])
            seqs[pid] = seq + n
        else:
            e.native.write_markers(3, 0, 0, op[1], [("k", 0)], 5_000)


def ends(e: Engine) -> tuple[int, int]:
    return e.vnodes["db"][0].wal.next_version, kafka_vnode(e).wal.next_version


def state(e: Engine) -> dict[str, Any]:
    """Everything the two vnodes derive from their WALs, as values."""
    db, kv = e.vnodes["db"][0], kafka_vnode(e)
    out: dict[str, Any] = {
        "tables": [(t.name, t.stable, t.tags, t.columns, t.version, t.created_ts, t.dropped) for t in db.tables()],
        "live": db.live_count,  # (not meta_version: a lower bound, which an open raises to the WAL end)
        "ends": ends(e), "epochs": (db.epochs.entries, kv.epochs.entries),
        "rows": sorted(map(tuple, e.execute("SELECT tbname, ts, v FROM db.st").rows)),
    }
    for topic in ("tp", "tm", "k"):
        idx = e.indexes[(topic, 0)]
        out[topic] = (list(idx.offsets), list(idx.versions), list(idx.counts), list(idx.running_max),  # (not the
                      idx.end_offset, idx.start_offset, e.watermarks(topic, 0))  # indexed_to cursor: an open lowers it)
        out[topic + " records"] = [(o, v, c, e.kafka_rows(topic, 0, v).__dict__ if topic != "k" else
                                    e.kafka_batch("k", 0, v)) for o, v, c in e.index_entries(topic, 0, 0)]
    out["producers"] = (e.native.active_producers("k", 0), e.store.producers[("k", 0)].ongoing(),
                        e.native.last_stable_offset("k", 0), e.native.aborted_transactions("k", 0, 0, 1 << 40))
    return out


@fuzz_settings(20)
@given(ops=OPS, data=st.data())
def test_a_cut_vnode_derives_what_one_that_only_had_the_prefix_does(tmp_path_factory: pytest.TempPathFactory,
                                                                      ops: list[Op], data: st.DataObject) -> None:
    base = tmp_path_factory.mktemp("cut")
    cut, fresh = engine(base / "cut"), engine(base / "fresh")
    marks, seqs = [ends(cut)], {}
    for op in ops:
        apply(cut, [op], seqs)
        marks.append(ends(cut))
    k = data.draw(st.integers(0, len(ops)), label="cut after ops")
    prefix_seqs: dict[int, int] = {}
    apply(fresh, ops[:k], prefix_seqs)
    db_version, kafka_version = marks[k]
    cut.truncate_vnode("db", 0, db_version)
    cut.truncate_vnode(cut.catalog.topics["k"].db, 0, kafka_version)
    assert state(cut) == state(fresh)
    cut.close()
    cut = engine(base / "cut")
    assert state(cut) == state(fresh)
    nxt = ops[k:k + 1] or [("insert", 0, 5)]  # the next append numbers as on the replica that never had the cut
    apply(cut, nxt, dict(prefix_seqs))
    apply(fresh, nxt, prefix_seqs)
    assert state(cut) == state(fresh)
    cut.close()
    fresh.close()
