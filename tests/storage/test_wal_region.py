"""What Fetch sends (issue 13, the corruption sweep's bug 3): :meth:`Wal.region` checks an entry's body CRC the
first time it serves it and never serves an entry known damaged; :meth:`NativeTopics.kafka_region` (what Fetch reads
through the partition interface) checks the 16 bytes of a stored batch its own CRC does not cover (base offset,
length, leader epoch). Without them a damaged batch went to the socket unread: librdkafka (``check.crcs=false``)
delivered flipped values, and a flipped base offset put a batch at the wrong offset, which no client can detect."""

from __future__ import annotations

from pathlib import Path

import pytest

from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.wal import HEADER_SIZE, KIND_KAFKA, CorruptEntry, Wal, WalOptions
from walgate.wire import encode_batch

OPTS = WalOptions(segment_bytes=250)  # three entries of 76 bytes per segment


def _flip(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_damaged_body_in_a_trusted_sealed_segment_is_never_served(tmp_path):
    wal = Wal.open(tmp_path / "wal", OPTS)
    for i in range(6):
        wal.append([(KIND_KAFKA, 2, i, bytes([i + 1]) * 40)])
    wal.close()
    sealed = sorted((tmp_path / "wal").glob("*.log"))[0]  # versions 0..5, its index sealed: opened unread
    _flip(sealed, (HEADER_SIZE + 40) + HEADER_SIZE + 3)  # a body byte of the entry at version 2
    damage = DamageLog(tmp_path)
    wal = Wal.open(tmp_path / "wal", OPTS, damage=damage)
    assert not damage.records  # trusted by its seal: the damage is found when served
    assert wal.region(0, KIND_KAFKA).read() == bytes([1]) * 40
    for _ in range(2):  # reported once, refused every time
        with pytest.raises(CorruptEntry):
            wal.region(3, KIND_KAFKA)
    [record] = damage.records
    assert (record.file, record.first_version, record.end_version) == (f"wal/{sealed.name}", 2, 4)
    with pytest.raises(CorruptEntry):
        wal.read(2)
    assert wal.region(4, KIND_KAFKA).read() == bytes([3]) * 40
    assert wal.region(0, KIND_KAFKA).read() == bytes([1]) * 40  # served again (checked once)
    wal.close()


def _batch(n: int) -> bytes:
    return encode_batch(0, [1_700_000_000_000 + i for i in range(n)], [b"k"] * n, [b"v%d" % i for i in range(n)],
                        [[] for _ in range(n)])


@pytest.mark.parametrize("byte", [7, 11, 15], ids=["base offset", "batch length", "leader epoch"])
def test_a_batch_header_that_its_crc_does_not_cover_is_checked(tmp_path, byte):
    """A batch appended in this process is served without reading its body; its 16-byte header is checked."""
    e = Engine.open(tmp_path / "data")
    try:
        e.create_kafka_topic("t", 1, {})
        e.append_batches("t", 0, [_batch(3)])
        e.append_batches("t", 0, [_batch(2)])
        [_, (base, version, _)] = list(e.index_entries("t", 0, 0))
        assert base == 3 and e.native.kafka_region("t", 0, version).read() == e.kafka_batch("t", 0, version)
        [segment] = (tmp_path / "data").glob("db/*/vnode0/wal/*.log")
        _flip(segment, 2 * HEADER_SIZE + len(_batch(3)) + byte)
        for _ in range(2):
            with pytest.raises(CorruptEntry):
                e.native.kafka_region("t", 0, version)
        assert [(d.first_version, d.end_version) for d in e.damage()] == [(version, version + 2)]
        with pytest.raises(CorruptEntry):
            e.kafka_batch("t", 0, version)
        assert e.native.kafka_region("t", 0, 0).read() == e.kafka_batch("t", 0, 0)
    finally:
        e.close()
