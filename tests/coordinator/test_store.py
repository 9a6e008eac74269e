"""EngineOffsetStore over a real engine: a commit answers each record on its own (issue 13, item 4; since issue 23
each group's records are one write to its coordinator partition: a write the disk refuses fails that group's records
only, the other groups' records are committed)."""

from __future__ import annotations

from pathlib import Path

from tests.storage.faults import Faults
from walgate.coordinator.offsets import OffsetCommitRecord
from walgate.coordinator.store import EngineOffsetStore
from walgate.storage.engine import Engine
from walgate.storage.errors import NotFound, StorageUnavailable


def record(group: str, topic: str, partition: int, offset: int) -> OffsetCommitRecord:
    return OffsetCommitRecord(group, topic, partition, offset, -1, "", 1_700_000_000_000)


def test_a_commit_answers_each_record_its_own_error(tmp_path: Path) -> None:
    engine = Engine.open(tmp_path / "data")
    engine.create_kafka_topic("t", 2, {})
    store = EngineOffsetStore(engine)
    faults = Faults()
    with faults.active():
        assert store.commit([record("g0", "t", 0, 1)]) == [None]
        assert faults.calls["write"] == 1, "a group's commit is one write, through walgate.storage.fileio"
        faults.fail("write")  # g1's records are committed first (one write), then g2's: g1's write fails
        errors = store.commit([record("g1", "t", 0, 10), record("g2", "t", 1, 20), record("g1", "t", 1, 11),
                               record("g2", "t", 0, 21), record("g1", "gone", 0, 12)])
    assert [type(e) if e else None for e in errors] == [StorageUnavailable, None, StorageUnavailable, None, NotFound]
    offsets = {(g, p): c.offset for g in ("g0", "g1", "g2") for p in (0, 1) if (c := store.fetch(g, "t", p)) is not None}
    assert offsets == {("g0", 0): 1, ("g2", 0): 21, ("g2", 1): 20}
    engine.close()
