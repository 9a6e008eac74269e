"""kafka-python producer with its defaults (3.x: idempotent, acks=all; 2.0.2: acks=1), plus compression_type.

Usage and output: as ck_produce.py (same records, same JSON lines; no --transactional-id). kafka-python
only sends (str, bytes) headers, so the ``nil`` header has an empty value instead of null. Its snappy and
zstd codecs need python-snappy / zstandard (in the project's test extra): with them missing the producer refuses
to start (an ``error`` event). kafka-python 2.0.2 has no delivery_timeout_ms and
no idempotence: those settings are left out there.
"""

from __future__ import annotations

import threading
import time

from ck_produce import emit_summary, parse_produce_args, spec
from common import emit, fail
from kafka import KafkaProducer
from kafka.errors import KafkaError


def main() -> None:
    args = parse_produce_args(__doc__)
    started = time.monotonic()
    conf = {"bootstrap_servers": args.bootstrap, "compression_type": None if args.codec == "none" else args.codec,
            "delivery_timeout_ms": int(args.timeout * 1000 * 0.8), "request_timeout_ms": 15000,
            "max_block_ms": int(args.timeout * 1000 * 0.5)}
    if args.acks is not None:  # acks 0/1 need idempotence off
        conf.update(enable_idempotence=False, acks=int(args.acks) if args.acks != "all" else "all")
    conf = {k: v for k, v in conf.items() if k in KafkaProducer.DEFAULT_CONFIG}  # 2.0.2 refuses unknown settings
    try:
        producer = KafkaProducer(**conf)
    except (KafkaError, AssertionError, ValueError, RuntimeError) as exc:  # RuntimeError: codec library missing
        fail(f"KafkaProducer({args.codec}): {type(exc).__name__}: {exc}")
    deliveries: list[dict] = []
    lock = threading.Lock()

    def report(index: int, partition: int, offset: int, error: str | None) -> None:
        d = {"index": index, "partition": partition, "offset": offset, "error": error}
        with lock:
            deliveries.append(d)
            emit("delivery", **d)

    produced = 0
    try:
        for i in range(args.first, args.first + args.count):
            r = spec(i, args.codec, args.partitions, null_header=False)
            try:
                future = producer.send(args.topic, value=r.value, key=r.key, partition=r.partition,
                                       timestamp_ms=r.timestamp, headers=r.headers)
            except KafkaError as exc:
                fail(f"send() of record {i}: {type(exc).__name__}: {exc}")
            future.add_callback(lambda md, i=i: report(i, md.partition, md.offset, None))
            future.add_errback(lambda exc, i=i, p=r.partition: report(i, p, -1, f"{type(exc).__name__}: {exc}"))
            produced += 1
            time.sleep(args.pace_ms / 1000)
        producer.flush(timeout=max(1.0, args.timeout - (time.monotonic() - started)))
    finally:
        producer.close(timeout=10)
    with lock:
        emit_summary(produced, list(deliveries), started)


if __name__ == "__main__":
    main()
