"""A follower's copy of its leader's WAL (issue 25, step 4's storage half): ``Wal.append_verbatim`` refuses entries
that fail a check (a flipped byte, a gap, a partial entry, a newer format, the end of a batch missing) with nothing
written, leaves nothing of a refused write on a failing disk (ENOSPC, EIO, short writes, failed fdatasyncs) and
reopens, and after a kill -9 reopens to a prefix of whole batches; a follower vnode fed a leader engine's entries
(rows, meta entries, ALTER STABLE, a Kafka-native topic's idempotent and transactional batches and markers) in
random chunkings ends with the leader's WAL byte for byte and the same derived state (tables, offset index files,
producer and transaction state, what its topics read), before and after reopening both. The leader's side,
``Wal.batches_from``, serves whole batches of one segment within its limits."""

from __future__ import annotations

import errno
import os
import random
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from faults import FAULT_KINDS, Faults
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from walgate.storage.durability import Unsynced
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable
from walgate.storage.meta_store import META_STORE
from walgate.storage.replicated import append_replicated
from walgate.storage.wal import HEADER_SIZE, KIND_DATA, KIND_KAFKA, KIND_META, Wal, WalOptions
from walgate.storage.wal_format import FLAG_MORE, HEADER, encode_entry
from walgate.storage.wal_verbatim import EntriesRefused, parse
from walgate.wire import encode_batch, rebase

LEVEL1 = WalOptions(level=1, fsync_period_ms=1000, segment_bytes=400)
LEVEL2 = WalOptions(level=2, fsync_period_ms=0, segment_bytes=400)


def _wal_bytes(directory: Path) -> bytes:
    """Every segment's log, in version order: a WAL's entries (segment boundaries are each WAL's own)."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def _batches(raw: bytes) -> list[tuple[int, int, int]]:
    """(start byte, end byte, first version) of each batch of ``raw`` (whole entries of a WAL)."""
    out, pos, start, first = [], 0, 0, None
    while pos < len(raw):
        _, body_len, _, _, flags, _, version, _, _ = HEADER.unpack_from(raw, pos)
        first = version if first is None else first
        pos += HEADER_SIZE + body_len
        if not flags & FLAG_MORE:
            out.append((start, pos, first))
            start, first = pos, None
    return out


def _leader_wal(directory: Path, batches: int = 12) -> Wal:
    """A WAL of ``batches`` appends of one to three entries of every kind, over several segments."""
    wal = Wal.open(directory, LEVEL1)
    rnd = random.Random(7)
    for i in range(batches):
        wal.append([(rnd.choice((KIND_DATA, KIND_META)), rnd.randint(1, 4), 1000 + i, bytes([i % 251 + 1]) * rnd.randint(5, 90))
                    for _ in range(rnd.randint(1, 3))])
    wal.sync()
    return wal


# ------------------------------------------------------------------ refused: nothing written


def test_entries_that_fail_a_check_are_refused_and_nothing_is_written(tmp_path: Path):
    leader = _leader_wal(tmp_path / "leader")
    raw = _wal_bytes(leader.dir)
    cuts = _batches(raw)
    half = cuts[len(cuts) // 2]
    follower = Wal.open(tmp_path / "follower", LEVEL2)
    follower.append_verbatim(parse(raw[: half[0]], 0))
    assert follower.next_version == half[2]
    size, end = follower.segments[-1].size, follower.next_version
    rest = raw[half[0] :]

    def refused(data: bytes, first: int, match: str) -> None:
        with pytest.raises(EntriesRefused, match=match):
            follower.append_verbatim(parse(data, first))
        assert (follower.next_version, follower.segments[-1].size) == (end, size)
        assert _wal_bytes(follower.dir) == raw[: half[0]]

    for at in range(0, len(rest), 7):  # a flipped byte anywhere: a header's or a body's CRC
        flipped = bytearray(rest)
        flipped[at] ^= 0x10
        refused(bytes(flipped), end, "checksum mismatch")
    refused(rest, end + 1, rf"where {end + 1} continues the WAL \(an overlap\)")  # parse's check
    refused(rest, end - 1, rf"where {end - 1} continues the WAL \(a gap\)")
    other = Wal.open(tmp_path / "other", LEVEL2)  # a run parsed for another WAL's end: the WAL's own check
    with pytest.raises(EntriesRefused, match=f"entries from version {end} do not continue the WAL, whose next "
                                             "version is 0"):
        other.append_verbatim(parse(rest, end))
    assert other.next_version == 0 and _wal_bytes(other.dir) == b""
    other.close()
    nxt = _batches(rest)
    refused(rest[: nxt[0][1]] + rest[nxt[1][1] : nxt[2][1]], end, r"a gap")  # a batch left out
    refused(rest[: nxt[0][1]] + rest[: nxt[0][1]], end, r"an overlap")  # one sent twice
    for cut in range(1, nxt[0][1]):  # a partial entry, or whole entries ending inside their batch
        if cut not in {e for _, e, _ in nxt}:
            refused(rest[:cut], end, "partial entry|end inside a batch")
    newer = encode_entry(4, 0, end, 1, 0, b"a kind of a later release")
    refused(newer, end, "newer format")
    flags = encode_entry(KIND_DATA, 0x2, end, 1, 0, b"a flag of a later release")
    refused(flags, end, "newer format")
    refused(encode_entry(KIND_DATA, FLAG_MORE, end, 1, 0, b"x"), end, "end inside a batch")
    follower.append_verbatim(parse(b"", end))
    assert (follower.next_version, _wal_bytes(follower.dir)) == (end, raw[: half[0]])
    follower.append_verbatim(parse(rest, end))
    assert [(e.version, e.body) for e in follower.read_from(end)] == [(e.version, e.body) for e in leader.read_from(end)]
    assert _wal_bytes(follower.dir) == raw
    follower.close()
    reopened = Wal.open(tmp_path / "follower", LEVEL2)
    assert [(e.version, e.body) for e in reopened.read_from(0)] == [(e.version, e.body) for e in leader.read_from(0)]
    reopened.close()
    leader.close()


# ------------------------------------------------------------------ a failing disk


def _ledger(grouped: bool) -> Unsynced | None:
    """A node's group-commit ledger (a gateway opens its WALs with one), or None (an engine opened alone)."""
    return Unsynced(lambda owner: None) if grouped else None


@pytest.mark.parametrize(("options", "grouped"), [(LEVEL1, False), (LEVEL2, False), (LEVEL2, True)],
                         ids=["level1", "level2", "level2-group-commit"])
@pytest.mark.parametrize("rolls", [False, True], ids=["append", "append-rolling"])
def test_every_failing_operation_of_a_verbatim_append_is_refused_and_nothing_is_kept(tmp_path: Path, options, grouped,
                                                                                    rolls):
    """Under group commit too (a node's WALs): a level-2 copy is fsynced by its own append (the test below)."""
    leader = _leader_wal(tmp_path / "leader", batches=16)
    raw = _wal_bytes(leader.dir)
    leader.close()
    cuts = _batches(raw)
    split = cuts[-6][0]  # six batches: more than a segment of 400 bytes holds
    if not rolls:
        options = replace(options, segment_bytes=1 << 20)
    base = tmp_path / "base"
    wal = Wal.open(base, options, unsynced=_ledger(grouped))
    for start, end, version in cuts[:-6]:
        wal.append_verbatim(parse(raw[start:end], version))
    first = wal.next_version
    wal.close()
    faults = Faults()
    with faults.active():  # learn what the append does
        probe = Wal.open(shutil.copytree(base, tmp_path / "probe"), options, unsynced=_ledger(grouped))
        segments = len(probe.segments)
        before = dict(faults.calls)
        probe.append_verbatim(parse(raw[split:], first))
        ops = {op: n - before.get(op, 0) for op, n in faults.calls.items() if n - before.get(op, 0)}
        assert (len(probe.segments) > segments) == rolls
        probe.close()
    cases = [(op, at, kind) for op, n in ops.items() if op in ("write", "pwrite", "fsync", "fdatasync", "open",
                                                                "replace")
             for at in range(1, n + 1) for kind in (FAULT_KINDS if op in ("write", "pwrite") else ("enospc", "eio"))]
    assert any(op == "fdatasync" for op, _, _ in cases) or options.level == 1
    leader = Wal.open(tmp_path / "leader", options)
    expected = [(e.version, e.body) for e in leader.read_from(0)]
    leader.close()
    refused = 0
    for case, (op, at, kind) in enumerate(cases):
        directory = shutil.copytree(base, tmp_path / f"case{case}")
        wal = Wal.open(directory, options, unsynced=_ledger(grouped))
        with faults.active():
            faults.fail_kind(op, kind, at=at)
            try:
                wal.append_verbatim(parse(raw[split:], first))
                assert (op, kind) == ("write", "short"), (op, at, kind)  # half of the empty write creating a file
            except StorageUnavailable as exc:
                refused += 1
                assert "nothing of it was kept" in str(exc), exc
                assert wal.next_version == first and wal.read(first) is None
                assert wal.segments[-1].path.stat().st_size == wal.segments[-1].size
                assert _wal_bytes(directory) == raw[:split]
                wal.append_verbatim(parse(raw[split:], first))  # the disk takes it again
            faults.clear()
        assert _wal_bytes(directory) == raw
        wal.close()
        reopened = Wal.open(directory, options)
        assert [(e.version, e.body) for e in reopened.read_from(0)] == expected
        reopened.close()
        shutil.rmtree(directory)
    assert refused >= len(cases) - 1, (refused, cases)


def test_a_level_2_copy_is_durable_when_its_append_returns_also_under_group_commit(tmp_path: Path):
    """A follower's copy has one writer, which waits for it before fetching on: its append fsyncs it (no need is
    left to group commit's sync service) and wakes the vnode's readers, as a group-commit sync does."""
    leader = _leader_wal(tmp_path / "leader")
    raw = _wal_bytes(leader.dir)
    woken: list[tuple[str, int]] = []
    ledger = Unsynced(woken.append)
    wal = Wal.open(tmp_path / "follower", LEVEL2, unsynced=ledger, owner=("db", 3))
    assert wal.group_commit
    for start, end, version in _batches(raw):
        wal.append_verbatim(parse(raw[start:end], version))
        assert wal.durable_version == wal.next_version == wal.visible_version
        assert ledger.take() == []
    assert woken == [("db", 3)] * len(_batches(raw))
    wal.close()
    leader.close()


def test_a_fenced_wal_refuses_verbatim_appends_until_the_disk_recovers(tmp_path: Path):
    leader = _leader_wal(tmp_path / "leader")
    raw = _wal_bytes(leader.dir)
    leader.close()
    split = _batches(raw)[-1][0]
    wal = Wal.open(tmp_path / "f", replace(LEVEL2, segment_bytes=1 << 20))  # (no roll: the write itself fails)
    wal.append_verbatim(parse(raw[:split], 0))
    first = wal.next_version
    faults = Faults()
    with faults.active():
        faults.fail("fdatasync", at=1, error=errno.EIO)
        faults.fail("ftruncate", at=1, error=errno.EIO, times=1000)
        with pytest.raises(StorageUnavailable, match="could not be undone"):
            wal.append_verbatim(parse(raw[split:], first))
        with pytest.raises(StorageUnavailable, match="read-only"):
            wal.append_verbatim(parse(raw[split:], first))
        faults.clear()
    wal.append_verbatim(parse(raw[split:], first))
    wal.close()
    assert _wal_bytes(tmp_path / "f") == raw


# ------------------------------------------------------------------ kill -9

_CHILD = """
import sys
from dataclasses import replace
from pathlib import Path
from walgate.storage.wal import Wal, WalOptions
raw = Path(sys.argv[2]).read_bytes()
cuts = [int(c) for c in sys.argv[3].split(",")]
wal = Wal.open(Path(sys.argv[1]), WalOptions(level=2, fsync_period_ms=0, segment_bytes=400))
start = 0
for end in cuts:
    wal.append_verbatim(parse(raw[start:end], wal.next_version))
    start = end
    print(start, flush=True)
"""


def test_kill_9_mid_append_reopens_to_a_prefix_of_whole_batches(tmp_path: Path):
    leader = _leader_wal(tmp_path / "leader", batches=200)
    raw = _wal_bytes(leader.dir)
    leader.close()
    (tmp_path / "raw").write_bytes(raw)
    ends = [e for _, e, _ in _batches(raw)]
    chunked = ",".join(str(e) for e in ends[1::3] + [ends[-1]])
    landed = 0
    for kill in range(2):
        directory = tmp_path / f"follower{kill}"
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(directory), str(tmp_path / "raw"), chunked],
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        for _ in range(3 + 15 * kill):
            if not child.stdout.readline():
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        child.stdout.close()
        reopened = Wal.open(directory, LEVEL2)
        held = _wal_bytes(directory)
        assert len(held) in {0, *ends} and raw.startswith(held), (kill, len(held))
        landed += len(held) < len(raw)
        reopened.append_verbatim(parse(raw[len(held) :], reopened.next_version))  # the fetch goes on from there
        reopened.close()
        assert _wal_bytes(directory) == raw
    assert landed, "every kill came after the last append"


# ------------------------------------------------------------------ a follower vnode of a leader engine

NOW = 1_700_000_000_000


def _txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, transactional: bool = True) -> bytes:
    return encode_batch(0, [NOW + seq] * n, [b"k%d" % i for i in range(n)], [b"v%d" % i for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def _leader_engine(directory: Path) -> None:
    """A leader's data dir: a database of two vgroups with a supertable, two TDengine topics, a Kafka-native topic;
    rows, subtables, a normal table, ALTER STABLE, DROP TABLE; idempotent and transactional batches, a commit and
    an abort marker, a transaction left open."""
    e = Engine.open(directory)
    e.execute("CREATE DATABASE db VGROUPS 2")
    e.execute("CREATE STABLE db.m (ts TIMESTAMP, v INT) TAGS (k INT)")
    e.execute("CREATE TOPIC td AS STABLE db.m")
    e.execute("CREATE TOPIC pos AS SELECT ts, v FROM db.m WHERE v > 0")
    e.create_kafka_topic("t", 1, {})
    for i in range(6):
        e.execute(f"INSERT INTO db.c{i} USING db.m TAGS ({i}) VALUES ({NOW + i}, {i - 2}) ({NOW + 100 + i}, {i})")
    e.execute("CREATE TABLE db.plain (ts TIMESTAMP, x INT)")
    e.execute(f"INSERT INTO db.plain VALUES ({NOW}, 1)")
    e.execute("ALTER STABLE db.m ADD COLUMN w INT")
    e.execute(f"INSERT INTO db.c1 VALUES ({NOW + 500}, 7, 70) db.c9 USING db.m TAGS (9) VALUES ({NOW + 501}, 9, 90)")
    e.execute("DROP TABLE db.c2")
    e.append_batches("t", 0, [_txn_batch(3, 0, transactional=False)])
    e.append_batches("t", 0, [_txn_batch(3, 2, transactional=False), _txn_batch(3, 4, 3, transactional=False)])
    e.append_batches("t", 0, [_txn_batch(7, 0)])
    e.append_batches("t", 0, [_txn_batch(8, 0)])
    e.write_txn_markers(7, 0, 3, False, [("t", 0)])
    e.append_batches("t", 0, [_txn_batch(8, 2)])
    e.write_txn_markers(8, 0, 3, True, [("t", 0)])
    e.append_batches("t", 0, [_txn_batch(9, 0)])  # left open
    e.close()


def _empty_vnodes(leader: Path, follower: Path) -> None:
    """``follower``: the leader's data dir (its catalog: what the cluster's shared catalog gives every node) with
    every vnode's files removed, to be filled by replication alone."""
    shutil.copytree(leader, follower)
    for vnode in follower.glob("db/*/vnode*"):
        shutil.rmtree(vnode)


def _vnodes(e: Engine) -> list[Any]:
    return [v for db in sorted(e.vnodes) for v in e.vnodes[db]]


def _state(e: Engine) -> dict[str, Any]:
    """What a vnode's WAL derives, in comparable form."""
    out: dict[str, Any] = {}
    for v in _vnodes(e):
        out[f"tables {v.db.name}/{v.index}"] = v.tables()
        out[f"live {v.db.name}/{v.index}"] = v.live_count
    for (topic, p), idx in sorted(e.indexes.items()):
        out[f"index {topic}/{p}"] = (list(idx.offsets), list(idx.versions), list(idx.counts), list(idx.running_max),
                                     idx.end_offset, idx.start_offset)
        out[f"watermarks {topic}/{p}"] = e.watermarks(topic, p)
        entries = list(e.index_entries(topic, p, 0))
        if e.is_native(topic):
            out[f"read {topic}/{p}"] = [e.kafka_batch(topic, p, v) for _, v, _ in entries]
            out[f"aborted {topic}/{p}"] = e.native.aborted_transactions(topic, p, 0, 1 << 40)
            out[f"producers {topic}/{p}"] = e.partitions.producers(topic, p)
            out[f"lso {topic}/{p}"] = e.partitions.offsets(topic, p).last_stable
        else:
            out[f"read {topic}/{p}"] = [(o, e.kafka_rows(topic, p, v)) for o, v, _ in entries]
    out["ongoing"] = e.ongoing_transactions()
    return out


def _files(directory: Path) -> dict[str, bytes]:
    """Each vnode's WAL (its entries) and topic offset index files, by vnode."""
    out = {}
    for vnode in sorted(directory.glob("db/*/vnode*")):
        out[f"{vnode.parent.name}/{vnode.name} wal"] = _wal_bytes(vnode / "wal")
        for oidx in sorted(vnode.glob("topics/*.oidx")):
            out[f"{vnode.parent.name}/{vnode.name} {oidx.name}"] = oidx.read_bytes()
    return out


class Leader:
    """The leader's data dir, its derived state (reopened) and files, and the follower's empty data dir."""

    def __init__(self, directory: Path) -> None:
        _leader_engine(directory)
        e = Engine.open(directory)
        self.state = _state(e)
        e.close()
        self.files = _files(directory)
        self.template = directory.parent / "follower-template"
        _empty_vnodes(directory, self.template)

    def __repr__(self) -> str:
        return f"Leader({self.template.parent})"


@pytest.fixture(scope="module")
def leader(tmp_path_factory: pytest.TempPathFactory) -> Leader:
    return Leader(tmp_path_factory.mktemp("leader") / "data")


def _replicate(e: Engine, leader_files: dict[str, bytes], chunking: random.Random) -> None:
    """Feed every vnode of ``e`` its leader's entries, whole batches in chunks of one to four."""
    for v in _vnodes(e):
        raw = leader_files[f"{v.dir.parent.name}/{v.dir.name} wal"]
        batches = _batches(raw)
        k = 0
        while k < len(batches):
            n = chunking.randint(1, 4)
            start, end, first = batches[k][0], batches[min(k + n, len(batches)) - 1][1], batches[k][2]
            assert append_replicated(e.store, e.views, v, raw[start:end], first, 0) == v.wal.next_version
            k += n


@settings(max_examples=4, deadline=None, derandomize=True, phases=(Phase.generate,),
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32 - 1))
def test_a_follower_fed_the_leaders_entries_has_its_wal_and_derived_state(leader, tmp_path_factory, seed):
    follower = tmp_path_factory.mktemp("follower") / "data"
    shutil.copytree(leader.template, follower)
    e = Engine.open(follower)
    _replicate(e, leader.files, random.Random(seed))
    assert _state(e) == leader.state
    e.close()
    assert _files(follower) == leader.files  # the WALs byte for byte, and the offset index files
    reopened = Engine.open(follower)
    assert _state(reopened) == leader.state
    reopened.close()
    shutil.rmtree(follower.parent)


def test_a_follower_begins_each_newer_epoch_before_its_entries_and_refuses_an_older_one(leader, tmp_path: Path):
    follower = tmp_path / "data"
    shutil.copytree(leader.template, follower)
    e = Engine.open(follower)
    v = e.vnodes["db"][0]
    raw = leader.files[f"{v.dir.parent.name}/{v.dir.name} wal"]
    batches = _batches(raw)
    for k, (start, end, first) in enumerate(batches):
        append_replicated(e.store, e.views, v, raw[start:end], first, 2 + k // 3)
    epochs = [(2 + k, batches[3 * k][2]) for k in range((len(batches) + 2) // 3)]
    assert len(epochs) > 1 and [(x.epoch, x.start_offset) for x in v.epochs.entries] == epochs
    extra = encode_entry(KIND_META, 0, v.wal.next_version, 1, 0, b'{"op": "noop"}')
    with pytest.raises(EntriesRefused, match="older than the latest"):
        append_replicated(e.store, e.views, v, extra, v.wal.next_version, 1)
    assert _wal_bytes(v.wal.dir) == raw
    e.close()
    reopened = Engine.open(follower)  # the cache was written before each epoch's entries
    assert [(x.epoch, x.start_offset) for x in reopened.vnodes["db"][0].epochs.entries] == epochs
    reopened.close()


def test_an_epoch_the_disk_refuses_to_record_appends_nothing(leader, tmp_path: Path):
    follower = tmp_path / "data"
    shutil.copytree(leader.template, follower)
    e = Engine.open(follower)
    v = e.vnodes["db"][0]
    raw = leader.files[f"{v.dir.parent.name}/{v.dir.name} wal"]
    start, end, first = _batches(raw)[0]
    faults = Faults()
    with faults.active():
        faults.fail("replace", at=1, error=errno.ENOSPC)
        with pytest.raises(StorageUnavailable, match="leader epoch 5 could not be recorded"):
            append_replicated(e.store, e.views, v, raw[start:end], first, 5)
    assert v.wal.next_version == 0 and _wal_bytes(v.wal.dir) == b"" and v.epochs.latest_epoch == 0
    append_replicated(e.store, e.views, v, raw[start:end], first, 5)
    assert [(x.epoch, x.start_offset) for x in v.epochs.entries] == [(5, 0)] and _wal_bytes(v.wal.dir) == raw[:end]
    e.close()


# ------------------------------------------------------------------ refused by what a vnode derives: nothing written


def _follower(leader: Leader, tmp_path: Path, db: str = "db") -> tuple[Path, Engine, Any, bytes]:
    """A follower's data dir opened, its vnode 0 of ``db`` and that vnode's leader WAL bytes."""
    follower = tmp_path / "data"
    shutil.copytree(leader.template, follower)
    e = Engine.open(follower)
    v = e.vnodes[db][0]
    return follower, e, v, leader.files[f"{v.dir.parent.name}/{v.dir.name} wal"]


def _epochs(v: Any) -> list[tuple[int, int]]:
    return [(x.epoch, x.start_offset) for x in v.epochs.entries]


def _entry(raw: bytes, kind: int) -> tuple[int, bytes]:
    """The count and body of the first entry of ``kind`` in ``raw``."""
    pos = 0
    while True:
        _, body_len, _, k, _, _, _, count, _ = HEADER.unpack_from(raw, pos)
        if k == kind:
            return count, raw[pos + HEADER_SIZE : pos + HEADER_SIZE + body_len]
        pos += HEADER_SIZE + body_len


def test_entries_whose_bodies_do_not_decode_are_refused_before_anything_is_written(leader, tmp_path: Path):
    follower, e, v, raw = _follower(leader, tmp_path)
    cuts = _batches(raw)
    append_replicated(e.store, e.views, v, raw[: cuts[0][1]], 0, 2)
    end, epochs, indexes = v.wal.next_version, _epochs(v), {k: i.indexed_to for k, i in e.store.indexes.items()}
    rows, data = _entry(raw, KIND_DATA)
    bad = {
        "not json": (KIND_META, 1, b"not json"),
        "not an object": (KIND_META, 1, b"[1]"),
        "no op": (KIND_META, 1, b'{"name": "x"}'),
        "create without ts": (KIND_META, 1, b'{"op": "create_table", "name": "x"}'),
        "create with a bad column": (KIND_META, 1, b'{"op": "create_table", "name": "x", "ts": 1, "columns": [1]}'),
        "drop without name": (KIND_META, 1, b'{"op": "drop_table"}'),
        "data garbage": (KIND_DATA, 1, b"\x01\x00garbage-garbage"),
        "data cut": (KIND_DATA, rows, data[:-9]),
        "rows not its count": (KIND_DATA, rows + 1, data),
    }
    for name, (kind, count, body) in bad.items():
        run = encode_entry(KIND_META, FLAG_MORE, end, 1, 0, b'{"op": "noop"}') + encode_entry(kind, 0, end + 1, count,
                                                                                              0, body)
        with pytest.raises(EntriesRefused, match="does not decode|holds") as refused:
            append_replicated(e.store, e.views, v, run, end, 5)
        assert f"version {end + 1}" in str(refused.value), name
        assert (v.wal.next_version, _wal_bytes(v.wal.dir), _epochs(v)) == (end, raw[: cuts[0][1]], epochs), name
        assert {k: i.indexed_to for k, i in e.store.indexes.items()} == indexes, name
    append_replicated(e.store, e.views, v, raw[cuts[1][0] : cuts[1][1]], end, 5)  # the leader's own entries go on
    e.close()
    reopened = Engine.open(follower)
    assert _wal_bytes(reopened.vnodes["db"][0].wal.dir) == raw[: cuts[1][1]]
    assert _epochs(reopened.vnodes["db"][0]) == epochs + [(5, end)]
    reopened.close()


def test_a_refused_run_begins_no_epoch_and_a_refused_write_cuts_its_epoch_back(leader, tmp_path: Path):
    follower, e, v, raw = _follower(leader, tmp_path)
    cuts = _batches(raw)
    append_replicated(e.store, e.views, v, raw[: cuts[0][1]], 0, 2)
    append_replicated(e.store, e.views, v, raw[cuts[1][0] : cuts[1][1]], cuts[1][2], 3)
    before = _epochs(v)
    assert before == [(2, 0), (3, cuts[1][2])]
    with pytest.raises(EntriesRefused, match="do not continue"):  # an overlap
        append_replicated(e.store, e.views, v, raw[: cuts[0][1]], 0, 5)
    with pytest.raises(EntriesRefused, match="do not continue"):  # a gap
        append_replicated(e.store, e.views, v, raw[cuts[3][0] : cuts[3][1]], cuts[3][2], 5)
    with pytest.raises(EntriesRefused, match="checksum"):
        append_replicated(e.store, e.views, v, raw[cuts[2][0] : cuts[2][1] - 1] + bytes([raw[cuts[2][1] - 1] ^ 1]),
                          cuts[2][2], 5)
    assert _epochs(v) == before
    faults = Faults()
    with faults.active():
        faults.fail("write", at=2)  # the epoch file's write succeeds, the WAL's fails
        with pytest.raises(StorageUnavailable, match="nothing of it was kept"):
            append_replicated(e.store, e.views, v, raw[cuts[2][0] : cuts[2][1]], cuts[2][2], 5)
    assert _epochs(v) == before and v.wal.next_version == cuts[2][2]
    e.close()
    reopened = Engine.open(follower)
    v = reopened.vnodes["db"][0]
    assert _epochs(v) == before
    append_replicated(reopened.store, reopened.views, v, raw[cuts[2][0] : cuts[2][1]], cuts[2][2], 5)
    assert _epochs(v) == before + [(5, cuts[2][2])]
    assert v.epochs.end_for(3, v.wal.next_version).end_offset == cuts[2][2]
    reopened.close()


def test_kafka_batches_must_continue_the_partitions_offsets_and_span_their_count(leader, tmp_path: Path):
    follower = tmp_path / "data"
    shutil.copytree(leader.template, follower)
    e = Engine.open(follower)
    v = e.vnodes[e.store.catalog.topics["t"].db][0]
    raw = leader.files[f"{v.dir.parent.name}/{v.dir.name} wal"]
    for start, end, first in _batches(raw):
        append_replicated(e.store, e.views, v, raw[start:end], first, 0)
    idx = e.store.indexes[("t", 0)]
    wal_end, next_offset, size = v.wal.next_version, idx.end_offset, len(_wal_bytes(v.wal.dir))
    batch = _txn_batch(20, 0, n=3, transactional=False)

    def run(base: int, count: int = 3, body: bytes | None = None) -> bytes:
        return encode_entry(KIND_KAFKA, 0, wal_end, count, NOW, rebase(batch, base, 0) if body is None else body)

    refusals = {
        "below": (run(0), "below"),  # a stored batch of the partition again: served with offsets not its own
        "one below": (run(next_offset - 1), "below"),
        "count": (run(next_offset, count=2), "spans 2 offsets"),
        "length": (run(next_offset, body=rebase(batch, next_offset, 0) + b"\0"), "not a record batch v2"),
        "short": (run(next_offset, body=batch[:40]), "not a record batch"),
    }
    for name, (entry, match) in refusals.items():
        with pytest.raises(EntriesRefused, match=match):
            append_replicated(e.store, e.views, v, entry, wal_end, 0)
        assert (v.wal.next_version, len(_wal_bytes(v.wal.dir)), idx.end_offset) == (wal_end, size, next_offset), name
    append_replicated(e.store, e.views, v, run(next_offset + 5), wal_end, 0)  # a gap the leader's cleaner left
    assert idx.end_offset == next_offset + 8
    offset, version, _ = list(e.index_entries("t", 0, 0))[-1]
    assert offset == next_offset + 5 and int.from_bytes(bytes(e.kafka_batch("t", 0, version))[:8], "big") == offset
    e.close()


def test_an_entry_on_disk_that_does_not_decode_is_reported_damaged_and_the_node_starts(leader, tmp_path: Path):
    follower, e, v, raw = _follower(leader, tmp_path)
    cuts = _batches(raw)
    append_replicated(e.store, e.views, v, raw[: cuts[0][1]], 0, 0)
    bad, tables = v.wal.next_version, v.tables()
    v.wal.append([(KIND_META, 1, 0, b"not json")])  # as a bug could have written them: their checksums hold
    v.wal.append([(KIND_DATA, 1, 0, b"\x01\x00garbage-garbage")])
    rest = _wal_bytes(v.wal.dir)[len(raw[: cuts[0][1]]) :]
    store = v.dir / META_STORE
    e.close()
    store.unlink()  # the tables are replayed from the WAL's meta entries
    reopened = Engine.open(follower)
    damaged = {(d.first_version, d.action) for d in reopened.store.damage_log.records if d.first_version >= 0}
    assert damaged == {(bad, "quarantined"), (bad + 1, "quarantined")}
    v = reopened.vnodes["db"][0]
    assert v.wal.next_version == bad + 2 and _wal_bytes(v.wal.dir) == raw[: cuts[0][1]] + rest
    assert v.tables() == tables
    assert {topic: len(list(reopened.index_entries(topic, 0, 0))) for topic in ("td", "pos")} == {"td": 1, "pos": 1}
    reopened.close()


# ------------------------------------------------------------------ the leader's side: Wal.batches_from


def test_batches_from_gives_whole_batches_of_one_segment_within_the_limits(tmp_path: Path):
    """What a leader serves a follower (``Wal.batches_from``): runs of whole batches, at least one whatever the limit,
    more only within ``max_bytes``, never past a segment's end or ``stop``; read one after another they are the WAL,
    which a follower appends verbatim; a version no batch starts at (inside an entry, or at a batch's later entry)
    is refused."""
    leader = _leader_wal(tmp_path / "l")
    raw = _wal_bytes(leader.dir)
    sizes = {first: end - start for start, end, first in _batches(raw)}  # batch's first version -> its bytes
    firsts = [seg.first for seg in leader.segments]
    assert len(firsts) > 1
    for limit in (0, 150, 400, 1 << 20):
        follower = Wal.open(tmp_path / f"f{limit}", LEVEL1)
        version, runs = 0, 0
        while (region := leader.batches_from(version, limit, leader.next_version)) is not None:
            chunk = region.read()
            run = parse(chunk, version)  # whole entries continuing ``version``, the last ending a batch
            entries = run.entries
            batches = [e.version for e in entries if e.version in sizes]
            assert batches[0] == version and sum(sizes[b] for b in batches) == len(chunk)
            assert len(batches) == 1 or len(chunk) <= limit
            segment = [f for f in firsts if f <= version][-1]
            later = [f for f in firsts if f > version]
            assert entries[-1].version + entries[-1].count <= (later[0] if later else leader.next_version), segment
            follower.append_verbatim(run)
            version, runs = entries[-1].version + entries[-1].count, runs + 1
        assert version == leader.next_version and _wal_bytes(follower.dir) == raw
        assert runs == len(sizes) if limit == 0 else runs >= len(firsts)  # (limit 0: one batch a run)
    middle = sorted(sizes)[len(sizes) // 2]
    upto = parse(leader.batches_from(0, 1 << 20, middle).read(), 0).entries
    assert upto[-1].version + upto[-1].count <= middle
    assert leader.batches_from(middle, 1 << 20, middle) is None  # nothing starts below ``stop``
    assert leader.batches_from(leader.next_version, 1 << 20, leader.next_version + 10) is None  # at the end
    inside = next(v for v in range(1, leader.next_version) if leader.entry_start(v) != v)
    mid_batch = next(e.version for e in parse(raw, 0).entries if e.version not in sizes)  # an entry, not a batch
    for bad in (leader.next_version + 1, -1, inside, mid_batch):
        with pytest.raises(ValueError):
            leader.batches_from(bad, 1 << 20, leader.next_version)
