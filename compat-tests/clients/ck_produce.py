"""confluent-kafka (librdkafka) producer: idempotent (enable.idempotence=true, acks=all) unless told otherwise.

Usage: ck_produce.py BOOTSTRAP TOPIC CODEC COUNT [--first N] [--partitions 3] [--acks all|1|0]
[--transactional-id ID] [--timeout 60] [--pace-ms MS] [-X KEY=VALUE ...].

Writes the records of :func:`spec` for i in [first, first + count) (the same records as kp_produce.py,
aio_produce.py, java/Producer.java and node/produce.js), each to partition i % partitions with its explicit
timestamp, then flushes. Prints one JSON line per delivery report (``delivery``: index, partition, offset,
error) and a ``summary`` (produced, delivered, errors). With ``--transactional-id`` it only calls
init_transactions() and prints ``transactions`` (ok or the error: code, name, fatal, seconds it took).
A failure before producing (metadata, configuration) is an ``error`` event and exit code 2.

This module also holds the record spec and arguments shared by the Python producer programs.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from common import emit, fail

# ---------------------------------------------------------------- the records every producer program writes

BASE_TS = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC; record i has timestamp BASE_TS + i (CreateTime)
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Spec:
    index: int
    partition: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes | None]]


def spec(i: int, codec: str, partitions: int, null_header: bool = True) -> Spec:
    """Record i: key k<i % 5> (null for every 7th), a JSON value naming the codec and i, headers
    ``i`` = str(i) and ``nil`` = null (an empty value for clients that cannot send a null header value)."""
    key = None if i % 7 == 0 else f"k{i % 5}".encode()
    value = f'{{"codec":"{codec}","i":{i},"text":"record {i} of the walgate produce scenario"}}'.encode()
    return Spec(i, i % partitions, BASE_TS + i, key, value, [("i", str(i).encode()), ("nil", None if null_header else b"")])


def parse_produce_args(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("codec", choices=CODECS)
    ap.add_argument("count", type=int)
    ap.add_argument("--first", type=int, default=0, help="index of the first record")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--acks", help="acks (default: the client's)")
    ap.add_argument("--transactional-id", help="only initialise transactions with this id and report the outcome")
    ap.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    ap.add_argument("-X", dest="config", action="append", default=[], metavar="KEY=VALUE",
                    help="extra client configuration (ck_produce.py only)")
    ap.add_argument("--raw", action="store_true", help="one Produce request without a metadata lookup (aio_produce.py only)")
    ap.add_argument("--pace-ms", type=float, default=0.0,
                    help="pause this long after each record's send (a run spread over time: nodes killed meanwhile)")
    ap.add_argument("--idempotent", action="store_true",
                    help="enable_idempotence (acks=all) where it is not the client's default (aio_produce.py only)")
    return ap.parse_args()


def emit_summary(produced: int, deliveries: list[dict], started: float) -> None:
    errors = [d for d in deliveries if d["error"] is not None]
    emit("summary", produced=produced, delivered=len(deliveries) - len(errors), errors=errors[:10],
         seconds=round(time.monotonic() - started, 3))


# ---------------------------------------------------------------- the confluent-kafka producer


def main() -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    args = parse_produce_args(__doc__)
    started = time.monotonic()
    conf = {
        "bootstrap.servers": args.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "compression.codec": args.codec,
        "message.timeout.ms": int(args.timeout * 1000 * 0.8),
        "socket.timeout.ms": 10000,
    }
    if args.acks is not None:  # acks 0/1 need idempotence off
        conf.update({"enable.idempotence": False, "acks": args.acks})
    conf.update(kv.split("=", 1) for kv in args.config)
    if args.transactional_id:
        conf["transactional.id"] = args.transactional_id
    producer = Producer(conf)
    if args.transactional_id:
        try:
            producer.init_transactions(args.timeout / 2)
            emit("transactions", ok=True, seconds=round(time.monotonic() - started, 3))
        except KafkaException as exc:
            err: KafkaError = exc.args[0]
            emit("transactions", ok=False, code=err.code(), name=err.name(), message=err.str(), fatal=err.fatal(),
                 seconds=round(time.monotonic() - started, 3))
        return
    deliveries: list[dict] = []

    def delivered(err, msg, index: int) -> None:  # noqa: ANN001
        d = {"index": index, "partition": msg.partition(), "offset": msg.offset(),
             "error": None if err is None else f"{err.name()}: {err.str()}"}
        deliveries.append(d)
        emit("delivery", **d)

    produced = 0
    for i in range(args.first, args.first + args.count):
        r = spec(i, args.codec, args.partitions)
        while True:
            try:
                producer.produce(args.topic, r.value, r.key, partition=r.partition, timestamp=r.timestamp,
                                 headers=r.headers, on_delivery=lambda err, msg, i=i: delivered(err, msg, i))
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                producer.poll(0.1)
            except KafkaException as exc:
                fail(f"produce() of record {i}: {exc}")
        produced += 1
        producer.poll(args.pace_ms / 1000)
    left = producer.flush(max(1.0, args.timeout - (time.monotonic() - started)))
    if left:
        fail(f"{left} records still undelivered after {args.timeout} s")
    emit_summary(produced, deliveries, started)


if __name__ == "__main__":
    main()
