"""A cleaner step is bounded by the records it decodes as well as by the bytes it reads (issue 23, step 7): a step's
Python work, which holds the storage thread and the GIL, goes with its records. A log of small records (2 MiB of them
are ~20,000) is passed over in steps of at most :data:`STEP_RECORDS` records and one batch, and the pass keeps each
key's newest record as before."""

from __future__ import annotations

from pathlib import Path

import pytest

import walgate.storage.cleaner as cleaner_module
from walgate.storage.cleaner import MAP_ENTRIES, STEP_RECORDS
from walgate.storage.engine import Engine
from walgate.wire import decode_batches, encode_batch

BATCH, BATCHES, KEYS = 500, 48, 100  # 24,000 records of ~100 bytes: ~2.6 MB, more than one segment of 1 MB
LATER = 4_000_000_000.0  # "now" for a pass that sees every segment as old


def test_a_step_decodes_a_bounded_number_of_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    e = Engine.open(tmp_path)
    try:
        e.create_kafka_topic("t", 1, {"segment.bytes": str(1 << 20)})
        value = b"v" * 90
        for b in range(BATCHES):
            keys = [b"k%d" % ((b * BATCH + i) % KEYS) for i in range(BATCH)]
            e.append_batches("t", 0, [encode_batch(0, [1_000] * BATCH, keys, [value] * BATCH)])
        e.alter_topic_configs("t", {"cleanup.policy": "compact", "segment.bytes": str(1 << 20)})
        decoded = [0]
        real = cleaner_module.decode_batch

        def counted(*args: object, **kwargs: object) -> object:
            out = real(*args, **kwargs)  # type: ignore[arg-type]
            decoded[0] += len(out.records)
            return out

        monkeypatch.setattr(cleaner_module, "decode_batch", counted)
        per_step = []
        stats = None
        for _ in range(1000):  # (bounded)
            decoded[0] = 0
            stats = e.clean(LATER, 0, MAP_ENTRIES)
            per_step.append(decoded[0])
            sync = e.clean_sync()
            if sync is not None:
                sync()
            if stats is None or stats.finished:
                break
        assert stats is not None and stats.finished and stats.segments >= 2
        assert max(per_step) <= STEP_RECORDS + BATCH  # main: ~20,000 in its first step (2 MiB of records)
        start, end = e.watermarks("t", 0)
        kept = [r.key for base, version, _ in e.index_entries("t", 0, start)
                for r in decode_batches(e.kafka_batch("t", 0, version))[0].records]
        assert end == BATCH * BATCHES and len(kept) < BATCH * BATCHES
        newest = {b"k%d" % (i % KEYS): i for i in range(BATCH * BATCHES)}
        assert set(kept) == set(newest)  # every key still has a record (its newest among them)
    finally:
        e.close()
