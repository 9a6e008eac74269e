"""The periodic fsyncs' schedule (walgate/storage/sync_schedule.py): the sync task's call asks only the WALs whose
period is due, not every vnode of the node (a node of thousands of Kafka-native topics held the storage thread and
the GIL for milliseconds at each call), and every WAL still gets its fsync when its period is due: a WAL opened after
the schedule was built, a period shortened, a WAL closed."""

from __future__ import annotations

from pathlib import Path

import pytest
from clocks import ManualClock

from walgate.storage.engine import Engine
from walgate.storage.sync_schedule import NEVER, SyncSchedule
from walgate.storage.wal import PendingSync, Wal, WalOptions
from walgate.wire import encode_batch

TOPICS = 30


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directory of every WAL :meth:`Wal.sync_due` is called on, in order."""
    calls: list[Path] = []
    real = Wal.sync_due

    def counted(self: Wal, now: float) -> tuple[float, PendingSync | None]:
        calls.append(self.dir)
        return real(self, now)

    monkeypatch.setattr(Wal, "sync_due", counted)
    return calls


def _synced(pending: list[PendingSync]) -> list[Path]:
    """Run and finish ``pending`` (as the sync task does); their WALs' directories."""
    for sync in pending:
        sync.run()
        sync.done()
    return [sync.wal.dir for sync in pending]


def _append(e: Engine, topic: str) -> None:
    e.append_batches(topic, 0, [encode_batch(0, [1_000], [None], [b"v"])])


def test_a_call_asks_only_the_wals_due(tmp_path: Path, asked: list[Path]):
    clock = ManualClock()
    e = Engine.open(tmp_path, clock=clock)
    try:
        for i in range(TOPICS):  # WAL_LEVEL 1, fsync period 180 s (flush.ms's default, capped)
            e.create_kafka_topic(f"t{i}", 1, {})
        e.execute("CREATE DATABASE fast VGROUPS 1 WAL_LEVEL 1 WAL_FSYNC_PERIOD 100")
        delay, pending = e.sync_due(clock.monotonic())
        assert len(asked) == TOPICS + 1 and pending == []  # the first call asks every WAL
        assert delay == pytest.approx(0.1)
        fast = e.store.vnodes["fast"][0].wal.dir
        for _ in range(5):
            asked.clear()
            clock.advance(0.1)
            delay, pending = e.sync_due(clock.monotonic())
            assert asked == [fast]  # the one WAL due (main asked all 31 each time)
            assert delay == pytest.approx(0.1)
    finally:
        e.close()


def test_every_wal_still_gets_its_periodic_fsync(tmp_path: Path, asked: list[Path]):
    clock = ManualClock()
    e = Engine.open(tmp_path, clock=clock)
    try:
        for i in range(TOPICS):
            e.create_kafka_topic(f"t{i}", 1, {})
        e.sync_due(clock.monotonic())  # the schedule is built
        e.create_kafka_topic("late", 1, {})  # opened after it
        e.alter_topic_configs("t3", {"flush.ms": "1000"})  # a period shortened: due in 1 s, not 180
        e.create_kafka_topic("gone", 1, {})
        _append(e, "gone")
        gone = e.store.vnodes[e.catalog.topics["gone"].db][0].wal.dir
        e.sync_due(clock.monotonic())
        e.drop_topic("gone")  # closed: never asked again
        for topic in ("late", "t3", "t7"):
            _append(e, topic)
        wal = {t: e.store.vnodes[e.catalog.topics[t].db][0].wal for t in ("late", "t3", "t7")}
        clock.advance(1.0)
        assert _synced(e.sync_due(clock.monotonic())[1]) == [wal["t3"].dir]
        assert wal["t3"].durable_version == 1 and wal["late"].durable_version == 0
        asked.clear()
        clock.advance(179.0)
        synced = _synced(e.sync_due(clock.monotonic())[1])
        assert sorted(synced) == sorted([wal["late"].dir, wal["t7"].dir])  # the others appended nothing
        assert wal["late"].durable_version == 1 and wal["t7"].durable_version == 1
        assert gone not in asked
        assert len(asked) == TOPICS + 1  # every open WAL was due once: none twice, the dropped one not
    finally:
        e.close()


def test_the_schedule_alone(tmp_path: Path):
    clock = ManualClock()
    wals = [Wal.open(tmp_path / f"w{i}", WalOptions(level=1, fsync_period_ms=1000 * (i + 1)), clock=clock)
            for i in range(3)]
    never = Wal.open(tmp_path / "never", WalOptions(level=2, fsync_period_ms=0), clock=clock)
    try:
        schedule = SyncSchedule()
        assert schedule.due(clock.monotonic(), 1, []) == (NEVER, [])
        assert schedule.due(clock.monotonic(), 2, [*wals, never]) == (1.0, [])
        assert len(schedule) == 4
        for wal in wals:
            wal.append([(1, 1, 0, b"x")])
        clock.advance(2.0)  # w0 (1 s) and w1 (2 s) are due, w2 (3 s) is not
        delay, pending = schedule.due(clock.monotonic(), 2, [])
        assert sorted(p.wal.dir.name for p in pending) == ["w0", "w1"] and delay == pytest.approx(1.0)
        assert len(schedule) == 4
    finally:
        for wal in [*wals, never]:
            wal.close()
