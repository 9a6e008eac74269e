"""``walgate repair`` (issue 22, item 4): a damaged catalog record's database, supertable, topic, user, ACL, quota
or config comes back, from its quarantined bytes or from the directory's own files, crash-safely and idempotently.

Every case builds one data dir holding every kind of catalog record, damages one record's line on the stopped
engine, restarts (the record is gone: skipped and quarantined), repairs, restarts, and compares the catalog and
the data served with the undamaged original. The real server and a stock Kafka client see the same in
tests/gateway/test_repair_cli.py.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from clocks import NOV_2023_NS, ManualClock
from faults import Faults

from walgate.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from walgate.storage import repair
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue
from walgate.wire.record_batch import encode_batch

ACL = AclBinding(ResourceType.TOPIC, "k", PatternType.LITERAL, "User:alice", "*", Operation.READ, Permission.ALLOW)
ROWS = 40
RECORDS = 30
SELECTS = {
    "d": "SELECT COUNT(*) FROM d.st",
    "plain": "SELECT COUNT(*) FROM d.plain",
}


def build(root: Path) -> None:
    """A data dir with one record of every kind (and data behind the databases and topics)."""
    e = Engine.open(root)
    e.execute("CREATE DATABASE d VGROUPS 3 PRECISION 'us'")
    e.execute("CREATE STABLE d.st (ts TIMESTAMP, v INT, s VARCHAR(16)) TAGS (k INT, loc VARCHAR(20))")
    for i in range(ROWS):
        e.execute(f"INSERT INTO d.t{i % 7} USING d.st TAGS ({i % 7}, 'site{i % 7}') VALUES "
                  f"({1_700_000_000_000_000 + i}, {i}, 'x{i}')")
    e.execute("CREATE TABLE d.plain (ts TIMESTAMP, n DOUBLE)")
    e.execute("INSERT INTO d.plain VALUES (1700000000000000, 1.5) (1700000000000001, 2.5)")
    e.execute("ALTER STABLE d.st ADD COLUMN extra INT")
    e.execute("CREATE TOPIC t_db AS DATABASE d")
    e.execute("CREATE TOPIC t_st AS STABLE d.st")
    e.execute("CREATE TOPIC t_sel AS SELECT ts, v FROM d.st WHERE v > 5")
    e.create_kafka_topic("k", 2, {"retention.ms": "86400000"})
    for p in range(2):
        for n in range(RECORDS // 3):
            e.append_batches("k", p, [encode_batch(0, [1_700_000_000_000 + n] * 3, [b"key"] * 3,
                                                   [b"v%d-%d-%d" % (p, n, j) for j in range(3)])])
    e.execute("CREATE USER alice PASS 'secret-pw1'")
    e.catalog.change_acls("create_acls", [ACL])
    e.catalog.set_client_quota((("user", "alice"),), {"producer_byte_rate": 1024.0})
    e.catalog.set_resource_configs("broker", "", {"log.retention.ms": "3600000"})
    e.close()


def state(root: Path) -> tuple[set[bytes], dict[str, object], list[tuple[str, int, int, int]]]:
    """The catalog's records, the SELECT answers and every topic-partition's offsets, of a fresh start."""
    e = Engine.open(root)
    try:
        records = {orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in e.catalog.records()}
        answers = {}
        for key, sql in SELECTS.items():
            try:
                answers[key] = e.execute(sql).rows
            except Exception as exc:  # noqa: BLE001 - a lost database answers an error: part of the state
                answers[key] = type(exc).__name__
        offsets = sorted((s.topic, s.partition, s.log_start, s.high_watermark) for s in e.partitions.stats())
        return records, answers, offsets
    finally:
        e.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[set[bytes], dict[str, object], list]]:
    root = tmp_path_factory.mktemp("repair") / "data"
    build(root)
    return root, state(root)


def copy(template: Path, to: Path) -> Path:
    os.system(f"cp -a {template} {to}")  # noqa: S605 - two paths of the test's own tmp dirs
    return to


def lines_of(root: Path) -> list[bytes]:
    return (root / "catalog.log").read_bytes().split(b"\n")[:-1]


def kinds(root: Path) -> dict[str, int]:
    """The index of one line of each kind of record in the catalog (the first of its op)."""
    out: dict[str, int] = {}
    for i, line in enumerate(lines_of(root)):
        out.setdefault(orjson.loads(line[9:])["op"], i)
    return out


def damage(root: Path, index: int, where: str) -> None:
    """Damage line ``index`` of catalog.log at one byte: ``where`` picks which, and how."""
    data = bytearray((root / "catalog.log").read_bytes())
    start = sum(len(line) + 1 for line in lines_of(root)[:index])
    line = lines_of(root)[index]
    pos, value = {
        "crc": (start + 3, None),  # a hex digit of the checksum
        "space": (start + 8, None),
        "json-start": (start + 9, None),
        "middle": (start + len(line) // 2, None),
        "last": (start + len(line) - 1, None),
        "newline": (start + len(line), None),  # the record runs into the next one
        "becomes-newline": (start + len(line) // 3, 0x0A),  # the line is cut in two
        "nul": (start + 2 * len(line) // 3, 0),
    }[where]
    data[pos] = value if value is not None else data[pos] ^ 0x20
    (root / "catalog.log").write_bytes(bytes(data))


OPS = ["create_db", "create_stable", "create_topic", "create_kafka_topic", "put_user", "create_acls", "client_quota",
       "resource_configs"]  # every record that creates something; alter_stable (a change) is tested below
PLACES = ["crc", "space", "json-start", "middle", "last", "newline", "becomes-newline", "nul"]


def test_the_template_holds_every_kind_of_record(template):
    root, _ = template
    assert set(kinds(root)) == {*OPS, "alter_stable"}
    topics = [orjson.loads(line[9:]) for line in lines_of(root) if b'"create_topic"' in line]
    assert sorted(t["kind"] for t in topics) == ["database", "select", "stable"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("where", PLACES)
def test_one_damaged_byte_in_any_record_is_repaired(template, tmp_path: Path, op: str, where: str):
    src, original = template
    root = copy(src, tmp_path / "data")
    index = kinds(root)[op]
    if where == "newline" and index == len(lines_of(root)) - 1:
        pytest.skip("the last line's newline: the catalog itself keeps that record")
    damage(root, index, where)
    e = Engine.open(root)  # the restart: the record is skipped, its bytes quarantined
    assert any("walgate repair" in d.reason for d in e.damage())  # the report names the way back
    e.close()
    assert state(root)[0] != original[0]
    found = repair.repair(root)
    assert any(f.state == "restore" for f in found), found
    assert state(root) == original  # the catalog as it was, and every row and offset served again
    again = repair.repair(root)  # idempotent: nothing left to do
    assert not any(f.state == "restore" for f in again), again
    assert state(root) == original


def test_a_damaged_change_is_listed_for_the_operator_not_applied(template, tmp_path: Path):
    """An ALTER whose record was lost may have been superseded by a change since: repair shows it, never applies it."""
    src, original = template
    root = copy(src, tmp_path / "data")
    damage(root, kinds(root)["alter_stable"], "middle")
    hurt = state(root)
    found = repair.repair(root)
    manual = [f for f in found if f.state == "manual"]
    assert len(manual) == 1 and manual[0].what == "alter_stable d.st" and '"extra"' in manual[0].detail
    assert state(root) == hurt != original
    e = Engine.open(root)
    e.execute("ALTER STABLE d.st ADD COLUMN extra INT")  # what the operator does
    e.close()
    assert state(root)[1:] == original[1:]


def test_list_writes_nothing(template, tmp_path: Path):
    src, original = template
    root = copy(src, tmp_path / "data")
    damage(root, kinds(root)["create_db"], "middle")
    state(root)
    before = (root / "catalog.log").read_bytes()
    found = repair.repair(root, dry_run=True)
    assert {f.what for f in found if f.state == "restore"} >= {"database d", "create_stable d.st"}
    assert (root / "catalog.log").read_bytes() == before


def wipe(root: Path, index: int) -> None:
    """Damage far more than one byte of line ``index``: its JSON zeroed (the quarantine cannot help)."""
    data = bytearray((root / "catalog.log").read_bytes())
    start = sum(len(line) + 1 for line in lines_of(root)[:index])
    line = lines_of(root)[index]
    data[start + 9 : start + len(line)] = b"\0" * (len(line) - 9)
    (root / "catalog.log").write_bytes(bytes(data))


def test_a_database_is_attached_from_its_own_files_under_its_old_name(template, tmp_path: Path):
    src, original = template
    root = copy(src, tmp_path / "data")
    wipe(root, kinds(root)["create_db"])
    state(root)
    found = repair.repair(root, dry_run=True)
    orphan = next(f for f in found if f.state == "attach")
    assert "3 vgroup(s)" in orphan.what and "st" in orphan.what
    assert next(f for f in found if f.state == "lost")
    with pytest.raises(InvalidValue, match="give the database's old name"):
        repair.repair(root, only=orphan.source, name="other")  # the tables hash to other vnodes under it
    with pytest.raises(InvalidValue, match="precision us"):
        repair.repair(root, only=orphan.source, name="d", precision="ms")
    found = repair.repair(root, only=orphan.source, name="d", clock=ManualClock())
    # the supertable, its alteration and the topics waited for the database in the quarantine: back with it
    assert {f.what for f in found if f.state == "restore"} >= {"database d", "create_stable d.st", "alter_stable d.st"}
    records, answers, offsets = state(root)
    assert answers == original[1] and offsets == original[2]
    db = next(orjson.loads(r) for r in records if b'"create_db"' in r)
    assert db["options"]["PRECISION"] == "us" and db["options"]["VGROUPS"] == 3
    assert db["created_ms"] == NOV_2023_NS // 1_000_000  # attached now, by the repair's clock
    assert not any(f.state == "restore" for f in repair.repair(root))


def _kafka_orphan(src: Path, tmp_path: Path) -> tuple[Path, Any]:
    """A copy of the template whose Kafka-native topic's record was wiped, opened once; its orphaned directory."""
    root = copy(src, tmp_path / "data")
    wipe(root, kinds(root)["create_kafka_topic"])
    state(root)
    return root, next(f for f in repair.repair(root, dry_run=True) if f.state == "attach")


def test_a_kafka_native_topic_is_attached_under_a_new_name(template, tmp_path: Path):
    src, original = template
    root, orphan = _kafka_orphan(src, tmp_path)
    assert orphan.what == "a Kafka-native topic of 2 partition(s)"
    repair.repair(root, only=orphan.source, name="k.back")
    e = Engine.open(root)
    try:
        assert e.catalog.topics["k.back"].kind == "kafka"
        stats = {(s.partition, s.log_start, s.high_watermark) for s in e.partitions.stats() if s.topic == "k.back"}
        assert stats == {(p, s, h) for t, p, s, h in original[2] if t == "k"}  # same offsets, same records
        for p in range(2):
            batch = e.kafka_batch("k.back", p, e.vnodes[e.catalog.topics["k.back"].db][p].wal.first_version)
            assert b"v%d-0-0" % p in batch
    finally:
        e.close()


def test_an_unknown_directory_or_taken_name_is_refused(template, tmp_path: Path):
    root, orphan = _kafka_orphan(template[0], tmp_path)
    with pytest.raises(InvalidValue, match="Topic already exists"):
        repair.repair(root, only=orphan.source, name="t_db")
    with pytest.raises(Exception, match="not an unnamed database directory"):
        repair.repair(root, only="db/" + "0" * 32, name="x")


@pytest.mark.parametrize("op", ["write", "fsync", "replace"])
def test_a_repair_the_disk_refuses_leaves_the_old_catalog_and_runs_again(template, tmp_path: Path, op: str):
    src, original = template
    root = copy(src, tmp_path / "data")
    damage(root, kinds(root)["create_db"], "middle")
    state(root)
    before = (root / "catalog.log").read_bytes()
    faults = Faults()
    with faults.active():
        faults.fail(op, at=1, error=errno.EIO, times=1000)
        with pytest.raises(OSError):
            repair.repair(root)
    assert (root / "catalog.log").read_bytes() == before  # the old catalog, whole
    assert state(root)[0] != original[0]
    repair.repair(root)
    assert state(root) == original


def test_each_file_operation_of_a_repair_failing_leaves_the_old_or_the_repaired_catalog(template, tmp_path: Path):
    """Each file operation of a repair fails in turn (as a kill there stops it): the catalog is the old one or the
    repaired one, never a mix, and a second repair finishes the job."""
    src, original = template
    base = copy(src, tmp_path / "base")
    damage(base, kinds(base)["create_topic"], "middle")
    state(base)
    counting = Faults()
    probe = copy(base, tmp_path / "probe")
    with counting.active():
        repair.repair(probe)
    repaired = (probe / "catalog.log").read_bytes()
    steps = [(op, k) for op, n in sorted(counting.calls.items()) for k in range(1, n + 1)]
    assert ("replace", 1) in steps
    for n, (op, k) in enumerate(steps):
        root = copy(base, tmp_path / f"step{n}")
        before = (root / "catalog.log").read_bytes()
        faults = Faults()
        with faults.active():
            faults.fail(op, at=k, error=errno.EIO)
            try:
                repair.repair(root)
            except OSError:
                pass
        assert faults.injected == 1, (op, k)
        assert (root / "catalog.log").read_bytes() in (before, repaired), (op, k)
        repair.repair(root)
        assert state(root) == original, (op, k)


def test_a_tdengine_topic_lost_beyond_repair_is_created_again_with_the_same_offsets(template, tmp_path: Path):
    src, original = template
    root = copy(src, tmp_path / "data")
    wipe(root, kinds(root)["create_topic"])  # t_db AS DATABASE d: its definition was only in the catalog
    state(root)
    assert [f.state for f in repair.repair(root) if f.source.startswith("quarantine/")] == ["lost"]
    e = Engine.open(root)
    e.execute("CREATE TOPIC t_db AS DATABASE d")
    e.close()
    assert state(root)[2] == original[2]


def test_a_piece_kept_under_a_taken_name_is_repaired(template, tmp_path: Path):
    """The damage log keeps a second report of the same range in the same second as ``<name>.1``: repair reads it."""
    src, original = template
    root = copy(src, tmp_path / "data")
    damage(root, kinds(root)["create_db"], "middle")
    Engine.open(root).close()  # the restart quarantines the record
    for piece in (root / "quarantine").glob("catalog.log.*"):  # the database's record and those that needed it
        piece.rename(piece.with_name(piece.name + ".1"))
    assert state(root)[0] != original[0]
    assert any(f.state == "restore" for f in repair.repair(root))
    assert state(root) == original
