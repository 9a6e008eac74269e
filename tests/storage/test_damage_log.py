"""One engine's damage log is reported into from two threads (the coordinator lane at its logs' start, the storage
thread): reports made at once lose nothing.

Two threads, started together by a barrier, each report the same damaged range of the same file many times, each
time with bytes of its own, on a clock that stands still (every report in the same second: the same quarantine
name). Every report is recorded, each kept copy has a name of its own and holds exactly that report's bytes.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tests.storage.clocks import ManualClock
from walgate.storage.damage import Damage, DamageLog

REPORTS = 50  # per thread


def test_two_threads_reporting_at_once_lose_no_report(tmp_path: Path) -> None:
    damage = DamageLog(tmp_path, ManualClock())
    barrier = threading.Barrier(2)
    made: dict[bytes, Damage] = {}

    def report(lane: str) -> None:
        barrier.wait()
        for i in range(REPORTS):
            data = f"{lane} {i}\n".encode()
            made[data] = damage.report(tmp_path / "coordinator" / "transactions.log", 10, 20, "bad checksum",
                                       "quarantined", data)

    threads = [threading.Thread(target=report, args=(lane,)) for lane in ("storage", "coordinator")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == len(damage.records) == 2 * REPORTS
    assert sorted(map(id, damage.records)) == sorted(map(id, made.values()))
    kept = {d.kept for d in damage.records}
    assert "" not in kept and len(kept) == 2 * REPORTS
    for data, d in made.items():
        assert (tmp_path / d.kept).read_bytes() == data
    assert not [p.name for p in (tmp_path / "quarantine").iterdir() if p.name.endswith(".tmp")]


def test_a_name_taken_in_the_same_second_gets_a_suffix(tmp_path: Path) -> None:
    damage = DamageLog(tmp_path, ManualClock())
    first = damage.report(tmp_path / "f.log", 3, 9, "bad", "quarantined", b"one")
    second = damage.report(tmp_path / "f.log", 3, 9, "bad", "quarantined", b"two")
    assert (first.kept, second.kept) == ("quarantine/f.log.3-9.1700000000", "quarantine/f.log.3-9.1700000000.1")
    assert (tmp_path / first.kept).read_bytes() == b"one" and (tmp_path / second.kept).read_bytes() == b"two"
