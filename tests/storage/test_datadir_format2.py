"""Format 2 -> 3 (issue 23): committed offsets (each vnode's ``commits.log``) and group records (``groups.log``) are
folded into the group coordinator's partitions (``coordinator/offsets-<p>.log``) once, crash-safely: a kill -9 at any
step leaves a data dir that opens, finishes the migration and serves every committed offset and group record."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from format2_datadir import OLD_COMMIT, summary
from old_release import REPO, made_by

from walgate.storage import datadir, lines
from walgate.storage.coordinator_partitions import DEFAULT_PARTITIONS, java_hash, partition_for
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine

HERE = Path(__file__).parent
FIXTURE = HERE / "format2_datadir.tar.gz"

# Run as a child: prepare the data dir, SIGKILLing itself at the n-th file system change (write, rename, replace,
# unlink); exit code 0 when the migration ended first.
KILLER = """
import os, signal, sys
from pathlib import Path
from walgate.storage import datadir
from walgate.storage.damage import DamageLog

n, seen = int(sys.argv[2]), [0]
def wrap(real):
    def op(*args, **kwargs):
        seen[0] += 1
        if seen[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return op
for name in ("write", "rename", "replace", "unlink"):
    setattr(os, name, wrap(getattr(os, name)))
datadir.prepare(Path(sys.argv[1]), DamageLog(Path(sys.argv[1])))
"""


def unpack(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data", orjson.loads((tmp_path / "expected.json").read_bytes())


def check_migrated(data: Path, expected: dict[str, Any]) -> None:
    e = Engine.open(data)
    try:
        assert orjson.loads(orjson.dumps(summary(e))) == expected
        assert e.damage() == []
    finally:
        e.close()
    assert lines.decode((data / "walgate.json").read_bytes()[:-1]) == {
        "format": 3, "coordinator_partitions": DEFAULT_PARTITIONS}
    assert not list(data.glob("db/*/vnode*/commits.log")) and not (data / "groups.log").exists()
    assert not (data / "coordinator.tmp").exists()


def test_a_format2_data_dir_migrates_with_every_offset_and_group_record(tmp_path: Path):
    data, expected = unpack(tmp_path)
    assert len(list(data.glob("db/*/vnode*/commits.log"))) == 7 and (data / "groups.log").exists()
    check_migrated(data, expected)
    check_migrated(data, expected)  # once: the second start finds format 3


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed to run the format-2 release")
def test_a_data_dir_made_by_the_format2_code_migrates(tmp_path: Path):
    """The same, with a data dir the format-2 code itself writes now (the fixture above is its frozen copy)."""
    data, expected = made_by(OLD_COMMIT, HERE / "format2_datadir.py", tmp_path)
    assert lines.decode((data / "walgate.json").read_bytes()[:-1]) == {"format": 2}
    check_migrated(data, expected)


def test_a_kill_9_at_any_step_of_the_migration_leaves_a_data_dir_that_migrates(tmp_path: Path):
    """A real SIGKILL at each file system change of the migration in turn, then a start on what it left."""
    n = 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    while True:
        n += 1
        data, expected = unpack(tmp_path / str(n))
        run = subprocess.run([sys.executable, "-c", KILLER, str(data), str(n)], env=env, capture_output=True,
                             timeout=60)
        assert run.returncode in (0, -signal.SIGKILL), run.stderr.decode()
        check_migrated(data, expected)
        if run.returncode == 0:
            break
        shutil.rmtree(tmp_path / str(n))
    assert n > 10  # every partition file, rename and removal was a kill point


def test_damage_in_a_format2_file_is_reported_and_the_rest_migrates(tmp_path: Path):
    data, expected = unpack(tmp_path)
    commits = sorted(data.glob("db/*/vnode*/commits.log"))[0]
    raw = bytearray(commits.read_bytes())
    first = lines.decode(bytes(raw[: raw.index(b"\n")]))
    raw[12] ^= 0x01  # the first line's JSON
    commits.write_bytes(bytes(raw))
    e = Engine.open(data)
    try:
        [damage] = e.damage()
        assert damage.file == str(commits.relative_to(data)) and (data / damage.kept).exists()
        got = {(g, t, p) for g, t, p, _ in e.all_committed()}
        want = {(g, t, p) for g, t, p, *_ in expected["committed"]}
        assert got == want - {(first["g"], first["t"], first["p"])}
    finally:
        e.close()


def test_a_groups_partition_is_kafkas(tmp_path: Path):
    """partition = Utils.abs(groupId.hashCode) % N, as Kafka's GroupCoordinator.partitionFor (the hashes are what
    Java's String.hashCode answered, run by hand with ``java H.java``)."""
    assert java_hash("") == 0 and java_hash("group-1") == 293427299 and java_hash("é😀") == 1996812
    assert java_hash("my-group") == -1906497762 and partition_for("my-group", 50) == 1906497762 % 50
    assert java_hash("polygenelubricants") == -(1 << 31) and partition_for("polygenelubricants", 50) == 0
    root = tmp_path / "data"
    assert datadir.prepare(root, DamageLog(root), coordinator_partitions=4) == 4
    e = Engine.open(root)
    try:
        for g in ("a", "b", "group-1", "x" * 40):
            e.write_group_records([(g, {"g": g})])
        assert len(e.store.coordinator.logs) == 4
    finally:
        e.close()
    for g in ("a", "b", "group-1", "x" * 40):
        assert f'"g":"{g}"'.encode() in (root / "coordinator" / f"offsets-{partition_for(g, 4)}.log").read_bytes()


def test_the_number_of_coordinator_partitions_is_fixed_when_the_data_dir_is_made(tmp_path: Path):
    e = Engine.open(tmp_path, coordinator_partitions=3)
    e.commit_offsets("g", [], 1)
    e.write_group_records([("a", 1), ("b", 2), ("group-1", 3)])
    e.close()
    e = Engine.open(tmp_path, coordinator_partitions=7)  # an existing data dir keeps its N
    assert e.coordinator_partitions == 3 and dict(e.group_records()) == {"a": 1, "b": 2, "group-1": 3}
    e.close()
    (tmp_path / "walgate.json").write_bytes(b"\x00garbage")  # damaged: N is found from the partition files
    e = Engine.open(tmp_path)
    assert e.coordinator_partitions == 3 and dict(e.group_records()) == {"a": 1, "b": 2, "group-1": 3}
    assert [d.file for d in e.damage()] == ["walgate.json"]
    e.close()
    assert lines.decode((tmp_path / "walgate.json").read_bytes()[:-1]) == {"format": 3, "coordinator_partitions": 3}
