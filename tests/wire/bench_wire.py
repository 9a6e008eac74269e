"""Micro-benchmarks of walgate.wire (not a test): ``python tests/wire/bench_wire.py``.

Prints best-of-N rates for the hot paths and the alternatives they were chosen over or
replaced: the pure-Python RecordBatch code (:mod:`walgate.wire.record_batch`) against
aiokafka's C extension it replaced in issue 14 (a private module whose import loads
asyncio) and kafka-python's pure-Python builder; 1 MiB Fetch responses against kio's
writer; Fetch request decoding against kio's native reader (valid input only: it
aborts on garbage).
"""

from __future__ import annotations

import datetime
import io
import struct
import time
import uuid
from collections.abc import Callable

from aiokafka.record._crecords import DefaultRecordBatch as AioBatch
from aiokafka.record._crecords import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
from kio.serial import entity_reader, entity_writer

from walgate.wire import (
    decode_batches,
    encode_batch,
    record_batch,
    record_timestamps,
    validate_produced,
)
from walgate.wire.framing import FrameReader
from walgate.wire.protocol import (
    RequestHeader,
    build_response,
    decode_request,
    decode_view,
    encode_request,
    encode_response,
    parse_request_header,
    request_class,
)

N = 1000
TIMESTAMPS = [1_700_000_000_000 + i for i in range(N)]
KEYS = [b"d%03d" % (i % 100) for i in range(N)]
VALUES = [b'{"ts":%d,"current":10.3,"voltage":219,"phase":0.31,"location":"SF"}' % i + b"x" * 30 for i in range(N)]
HEADERS = [[("wal", b"%d" % i)] for i in range(N)]
HEADERS4 = [[("db", b"power"), ("stable", b"meters"), ("table", KEYS[i]), ("version", b"%d" % (10_000 + i))]
            for i in range(N)]


def best(func: Callable[[], object], repeat: int = 7, number: int = 1) -> float:
    """Best seconds per call."""
    result = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            func()
        result = min(result, (time.perf_counter() - started) / number)
    return result


def aiokafka_batch(headers: list[list[tuple[str, bytes]]] | None) -> bytes:
    """aiokafka's C builder, which encode_batch drove before issue 14 (same bytes)."""
    builder = AioBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    for i in range(N):
        builder.append(i, TIMESTAMPS[i], KEYS[i], VALUES[i], headers[i] if headers else [])
    return bytes(builder.build())


def kafka_python_batch() -> bytes:
    builder = KafkaPythonBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
    for i in range(N):
        builder.append(i, TIMESTAMPS[i], KEYS[i], VALUES[i], HEADERS[i])
    return bytes(builder.build())


def main() -> None:
    rows = []

    def rate(name: str, seconds: float, unit: str, count: float = 1) -> None:
        rows.append((name, f"{count / seconds:,.0f} {unit}"))

    assert aiokafka_batch(HEADERS)[16:] == encode_batch(0, TIMESTAMPS, KEYS, VALUES, HEADERS)[16:]
    rate("encode_batch, 1000 x ~100 B, 1 header", best(lambda: encode_batch(0, TIMESTAMPS, KEYS, VALUES, HEADERS)),
         "records/s", N)
    rate("  alternative: aiokafka's C builder", best(lambda: aiokafka_batch(HEADERS)), "records/s", N)
    rate("  alternative: kafka-python builder", best(kafka_python_batch), "records/s", N)
    rate("encode_batch, 4 headers (a rendered topic row)",
         best(lambda: encode_batch(0, TIMESTAMPS, KEYS, VALUES, HEADERS4)), "records/s", N)
    rate("  alternative: aiokafka's C builder", best(lambda: aiokafka_batch(HEADERS4)), "records/s", N)
    rate("encode_batch, no headers", best(lambda: encode_batch(0, TIMESTAMPS, KEYS, VALUES)), "records/s", N)
    rate("  alternative: aiokafka's C builder", best(lambda: aiokafka_batch(None)), "records/s", N)
    for codec in ("lz4", "zstd", "snappy", "gzip"):
        rate(f"encode_batch, no headers, {codec}",
             best(lambda codec=codec: encode_batch(0, TIMESTAMPS, KEYS, VALUES, compression=codec)), "records/s", N)
    batch = encode_batch(0, TIMESTAMPS, KEYS, VALUES, HEADERS)
    rate("decode_batches (CRC on), 1000 records, 1 header", best(lambda: decode_batches(batch)), "records/s", N)
    rate("  alternative: aiokafka's C parser (+ CRC)",
         best(lambda: AioBatch(batch).validate_crc() and list(AioBatch(batch))), "records/s", N)
    produced = encode_batch(0, TIMESTAMPS, [None] * N, VALUES)
    rate("validate_produced, stored as produced (check_records in C)",
         best(lambda: validate_produced(produced, 1 << 20, with_records=False)), "records/s", N)
    rate("  alternative: check_records' pure-Python walk (no C compiler), no CRC",
         best(lambda: record_batch._python_check_records(produced, True)), "records/s", N)
    rate("  alternative: aiokafka's C parser (+ CRC)",
         best(lambda: AioBatch(produced).validate_crc() and [r.offset for r in AioBatch(produced)]), "records/s", N)
    rate("record_timestamps", best(lambda: record_timestamps(batch)), "records/s", N)

    records = b"".join(encode_batch(i * N, TIMESTAMPS, KEYS, VALUES) for i in range(10))[: 1 << 20]
    fields = {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "meters", "topic_id": uuid.UUID(int=1), "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 10 * N, "last_stable_offset": 10 * N,
             "log_start_offset": 0, "records": records}]}]}
    header = RequestHeader(1, 12, 7, None, 0)
    rate("build_response + encode_response, Fetch v12, 1 MiB",
         best(lambda: encode_response(header, build_response(1, 12, fields)), number=200), "responses/s")
    response = build_response(1, 12, fields)
    rate("encode_response only, Fetch v12, 1 MiB", best(lambda: encode_response(header, response), number=200),
         "responses/s")

    def kio_write() -> bytes:
        buffer = io.BytesIO()
        entity_writer(type(response))(buffer, response)
        return buffer.getvalue()

    rate("  alternative: kio entity_writer into BytesIO", best(kio_write, number=50), "responses/s")

    fetch_cls = request_class(1, 12)
    partition_cls = fetch_cls.__dataclass_fields__["topics"].type.__args__[0].__dataclass_fields__["partitions"]
    partition_cls = partition_cls.type.__args__[0]
    topic_cls = fetch_cls.__dataclass_fields__["topics"].type.__args__[0]
    fetch = fetch_cls(max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, topics=(
        topic_cls(topic="meters", partitions=(partition_cls(partition=0, fetch_offset=1234, partition_max_bytes=1 << 20),)),
    ), forgotten_topics_data=())
    frame = encode_request(1, 12, 7, "bench", fetch)[4:]
    parsed = parse_request_header(frame)
    rate("parse_request_header + decode_view (what the server hands handlers), Fetch v12, 1 partition",
         best(lambda: decode_view(parse_request_header(frame), frame), number=20000), "requests/s")
    rate("  alternative: decode_request (kio's class of the version)",
         best(lambda: decode_request(parse_request_header(frame), frame), number=20000), "requests/s")
    reader = entity_reader(fetch_cls)
    rate("  alternative: kio native reader (unsafe on garbage)", best(lambda: reader(frame, parsed.size), number=20000),
         "requests/s")

    stream = b"".join(struct.pack(">i", len(frame)) + frame for _ in range(10000))
    rate("FrameReader.feed, 10000 Fetch frames in one read",
         best(lambda: FrameReader(1 << 20).feed(stream), number=5), "frames/s", 10000)
    big = struct.pack(">i", 64 << 20) + bytes(64 << 20)

    def feed_big() -> None:
        reader = FrameReader(1 << 30)
        for i in range(0, len(big), 65536):
            reader.feed(big[i : i + 65536])

    rate("FrameReader.feed, 64 MiB frame in 64 KiB reads", best(feed_big, repeat=3), "MB/s", 64 * 1.048576)

    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>22}")


if __name__ == "__main__":
    main()
