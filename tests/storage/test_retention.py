"""Retention in bounded steps (issue 23): :meth:`Engine.sync_due` deletes a few expired segments per call and asks
to be called again at once, so the calls queued behind it on the storage thread (a Produce's append, a Fetch's
read) wait for one step, not for the whole data dir's deletions; between steps the log is whole and served."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from clocks import ManualClock

from walgate.storage.engine import Engine
from walgate.wire import decode_batches, encode_batch

SEGMENTS = 40  # sealed segments made expired: more than one step deletes


def fill(e: Engine, topic: str, segments: int) -> None:
    """``segments`` batches, each in a sealed segment of its own; later appends stay in the active segment."""
    e.create_kafka_topic(topic, 1, {"retention.ms": "60000"})
    wal = e.vnodes[e.catalog.topics[topic].db][0].wal
    wal.options = dataclasses.replace(wal.options, segment_ms=0)  # each append rolls
    for i in range(segments + 1):
        e.append_batches(topic, 0, [encode_batch(0, [1_000], [None], [b"%d" % i])])
    wal.options = dataclasses.replace(wal.options, segment_ms=-1)
    assert len(wal.segments) == segments + 1


def values(e: Engine, topic: str) -> list[bytes | None]:
    """Every record value a consumer reads from the log start, through the index as Fetch reads."""
    start, _ = e.watermarks(topic, 0)
    return [r.value for _, version, _ in e.index_entries(topic, 0, start)
            for b in decode_batches(e.kafka_batch(topic, 0, version)) for r in b.records]


def test_retention_deletes_in_bounded_steps_with_appends_and_reads_in_between(tmp_path: Path) -> None:
    clock = ManualClock.from_now()
    e = Engine.open(tmp_path, clock=clock)
    try:
        fill(e, "t", SEGMENTS)
        wal = e.vnodes[e.catalog.topics["t"].db][0].wal
        clock.advance(3600)  # every sealed segment is past retention.ms
        starts = [e.watermarks("t", 0)[0]]
        delay, steps = 0.0, 0
        while delay == 0.0:
            delay, _ = e.sync_due(clock.monotonic())
            steps += 1
            assert steps < 100
            start, end = e.watermarks("t", 0)
            starts.append(start)
            # between two steps a producer appends and a consumer reads the whole log from its start
            assert e.append_batches("t", 0, [encode_batch(0, [1_000], [None], [b"p%d" % steps])]) == end
            got = values(e, "t")
            assert got[0] == b"%d" % start and got[-1] == b"p%d" % steps and len(got) == end + 1 - start
        first = starts[1] - starts[0]
        assert 0 < first < SEGMENTS  # the first call deleted some, not all (on main: all 40 at once)
        assert all(0 <= b - a <= first for a, b in zip(starts, starts[1:]))  # no step deleted more
        assert starts[-1] == SEGMENTS and wal.first_version == SEGMENTS and steps >= 2
        before = values(e, "t")
    finally:
        e.close()
    e = Engine.open(tmp_path)  # what the steps left is what a restart serves
    try:
        assert e.watermarks("t", 0)[0] == SEGMENTS and values(e, "t") == before
    finally:
        e.close()


def test_a_partition_dropped_between_steps_is_skipped_and_the_round_goes_on(tmp_path: Path) -> None:
    clock = ManualClock.from_now()
    e = Engine.open(tmp_path, clock=clock)
    try:
        fill(e, "a", SEGMENTS)
        fill(e, "b", 3)
        clock.advance(3600)
        delay, _ = e.sync_due(clock.monotonic())
        assert delay == 0.0 and 0 < e.watermarks("a", 0)[0] < SEGMENTS  # a step inside a's deletions
        e.drop_topic("a")
        for _ in range(100):
            delay, _ = e.sync_due(clock.monotonic())
            if delay > 0:
                break
        assert delay > 0 and e.watermarks("b", 0)[0] == 3 and values(e, "b") == [b"3"]
    finally:
        e.close()
