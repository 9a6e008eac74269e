"""A Kafka-native topic's files made beforehand, off the storage thread (``Engine.prepare_kafka_topic``, issue 23):
the creation then only opens them. Every file operation of a prepare refused in turn leaves no directory; a creation
whose catalog write the disk refuses keeps nothing once its prepared directory is discarded; a prepared topic is the
same topic after a restart, and a directory no topic was created with is removed."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from faults import WRITE_FAULTS, Faults, refused

from walgate.storage.engine import Engine
from walgate.storage.errors import AlreadyExists, StorageUnavailable
from walgate.wire import encode_batch


def _db_dirs(root: Path) -> list[str]:
    return sorted(os.listdir(root / "db")) if (root / "db").exists() else []


def _ids(e: Engine) -> list[str]:
    return sorted(d.id for d in e.catalog.databases.values())


@pytest.mark.parametrize("op", ["open", "fsync"])
def test_each_file_operation_of_a_prepare_refused_leaves_nothing(tmp_path: Path, op: str):
    e = Engine.open(tmp_path)
    try:
        faults = Faults()
        with faults.active():
            e.discard_prepared(e.prepare_kafka_topic(2))
            made = faults.calls[op]  # the calls of op one prepare of 2 vnodes makes
            assert made > 0
            for at in range(1, made + 1):
                faults.fail(op, at=at, error=errno.ENOSPC if at % 2 else errno.EIO)
                with pytest.raises(StorageUnavailable, match="vnodes could not be created"):
                    e.prepare_kafka_topic(2)
                faults.clear()
                assert _db_dirs(tmp_path) == []
        prepared = e.prepare_kafka_topic(2)  # the disk has room again
        e.create_kafka_topic("t", 2, {}, prepared=prepared)
        e.discard_prepared(prepared)
        assert _db_dirs(tmp_path) == _ids(e) == [prepared]
    finally:
        e.close()


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_catalog_write_keeps_no_prepared_directory(tmp_path: Path, op: str, kind: str):
    e = Engine.open(tmp_path)
    try:
        size = (tmp_path / "catalog.log").stat().st_size if (tmp_path / "catalog.log").exists() else 0
        prepared = e.prepare_kafka_topic(2)
        faults = Faults()
        with faults.active():
            refused(faults, op, kind, lambda: e.create_kafka_topic("t", 2, {}, prepared=prepared))
        e.discard_prepared(prepared)
        assert "t" not in e.catalog.topics and _db_dirs(tmp_path) == []
        assert ((tmp_path / "catalog.log").stat().st_size if (tmp_path / "catalog.log").exists() else 0) == size
    finally:
        e.close()


def test_a_prepared_topic_is_served_and_survives_a_restart(tmp_path: Path):
    e = Engine.open(tmp_path)
    try:
        prepared = e.prepare_kafka_topic(3)
        e.create_kafka_topic("t", 3, {"retention.ms": "60000"}, prepared=prepared)
        e.discard_prepared(prepared)  # it was created with it: kept
        for p in range(3):
            e.append_batches("t", p, [encode_batch(0, [1_000], [None], [b"v%d" % p])])
        unused = e.prepare_kafka_topic(1)
        with pytest.raises(AlreadyExists):
            e.create_kafka_topic("t", 1, {}, prepared=unused)
        e.discard_prepared(unused)  # not created with it: removed
        assert _db_dirs(tmp_path) == _ids(e) == [prepared]
    finally:
        e.close()
    e = Engine.open(tmp_path)
    try:
        assert e.partition_count("t") == 3 and [e.watermarks("t", p) for p in range(3)] == [(0, 1)] * 3
        assert e.damage() == [] and _db_dirs(tmp_path) == [prepared]
    finally:
        e.close()
