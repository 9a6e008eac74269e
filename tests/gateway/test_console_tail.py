"""The web console's tail (:func:`walgate.gateway.console.views.tail`) reads a partition as a consumer does, through
the partition interface: a stored batch large enough to be a file region (sendfile) is read like any other, a lost
entry is a gap, a TDengine topic's rows come rendered, and the newest ``limit`` records are answered oldest first."""

from __future__ import annotations

from pathlib import Path

import orjson

from walgate.gateway.console.views import tail
from walgate.storage.engine import Engine
from walgate.storage.partitions import SENDFILE_MIN_BYTES
from walgate.wire import encode_batch


def test_the_tail_of_a_native_partition_skips_a_lost_entry_and_reads_a_large_batch(tmp_path: Path) -> None:
    e = Engine.open(tmp_path / "data")
    e.create_kafka_topic("k", 1, {})
    big = b"B" * (SENDFILE_MIN_BYTES + 10)  # its batch is served as a file region; the value shown is cut
    for i, value in enumerate([b"a0", b"LOST", big, b"a3"]):
        assert e.partitions.append("k", [(0, encode_batch(0, [1000 + i], [b"k%d" % i], [value],
                                                          [[("h", b"%d" % i)]]))], 0, 0)[0].base_offset == i
    e.close()
    [segment] = (tmp_path / "data").glob("db/*/vnode0/wal/*.log")
    data = bytearray(segment.read_bytes())
    data[data.index(b"LOST")] ^= 0x10  # that entry fails its checksum: quarantined at open
    segment.write_bytes(bytes(data))
    e = Engine.open(tmp_path / "data")
    try:
        answer = tail(e, "k", 0, 10)
        assert (answer["log_start"], answer["high_watermark"]) == (0, 4)
        assert [(r["offset"], r["timestamp"], r["key"], r["value"][:2], r["headers"], r["truncated"])
                for r in answer["records"]] == [(0, 1000, "k0", "a0", [["h", "0"]], False),
                                                (2, 1002, "k2", "BB", [["h", "2"]], True),
                                                (3, 1003, "k3", "a3", [["h", "3"]], False)]
        assert [r["offset"] for r in tail(e, "k", 0, 2)["records"]] == [2, 3]
    finally:
        e.close()


def test_the_tail_of_a_tdengine_topic_shows_its_rows(tmp_path: Path) -> None:
    e = Engine.open(tmp_path / "data")
    try:
        e.execute("CREATE DATABASE db VGROUPS 1 PRECISION 'ms'")
        e.execute("CREATE STABLE db.st (ts TIMESTAMP, v INT) TAGS (site INT)")
        e.execute("CREATE TOPIC rows AS SELECT ts, v FROM db.st")
        for i in range(5):
            e.execute(f"INSERT INTO db.d{i % 2} USING db.st TAGS ({i % 2}) VALUES ({1000 + i}, {i})")
        records = tail(e, "rows", 0, 3)["records"]
        assert [(r["offset"], r["timestamp"], r["key"], orjson.loads(r["value"])["v"]) for r in records] == [
            (2, 1002, "d0", 2), (3, 1003, "d1", 3), (4, 1004, "d0", 4)]
    finally:
        e.close()
