"""confluent-kafka (librdkafka) consumer with manual assign(): metadata, watermarks, read to the end.

No group coordination is used: the group.id librdkafka insists on only names the
consumer (auto commit off, nothing committed). Prints the JSON lines of common.py;
an error event (e.g. _AUTO_OFFSET_RESET with --reset error/none) ends the run with code 0
so the caller can inspect it. With --follow N: ``ready`` after assign() and the first poll
(``--start end`` is then the high watermark just read, so nothing written after ``ready``
is skipped), then read until N records arrived.

Usage: ck_assign.py BOOTSTRAP TOPIC [--start beginning|end|<offset>|ts:<ms>]
       [--reset earliest|latest|error|none] [--partitions 0,1] [--follow N] [--timeout 30]
       [--isolation read_uncommitted|read_committed]
"""

from __future__ import annotations

import time
import uuid

from common import emit, emit_record, fail, parse_args
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    TopicPartition,
)


def main() -> None:
    args = parse_args(__doc__, isolation=True)
    deadline = time.monotonic() + args.timeout
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": f"walgate-compat-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if args.reset == "none" else args.reset,
        "socket.timeout.ms": 10000,
        "isolation.level": args.isolation,
    })
    try:
        md = consumer.list_topics(args.topic, timeout=10)
        topic = md.topics[args.topic]
        if topic.error is not None:
            fail(f"metadata error for {args.topic}: {topic.error}")
        emit("metadata", brokers=sorted(f"{b.host}:{b.port}" for b in md.brokers.values()),
             partitions=sorted(topic.partitions), leaders={p: m.leader for p, m in topic.partitions.items()})
        parts = [int(p) for p in args.partitions.split(",")] if args.partitions else sorted(topic.partitions)
        high = {}
        for p in parts:
            low, high[p] = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10)
            emit("watermarks", partition=p, low=low, high=high[p])
        follow = args.follow is not None
        assignment = [TopicPartition(args.topic, p, high[p] if follow and args.start == "end" else _start(args.start))
                      for p in parts]
        if args.start.startswith("ts:"):
            assignment = consumer.offsets_for_times(
                [TopicPartition(args.topic, p, int(args.start[3:])) for p in parts], timeout=10)
            for tp in assignment:
                emit("start", partition=tp.partition, offset=tp.offset,
                     error=None if tp.error is None else tp.error.str())
                if tp.offset < 0:  # no record at/after the timestamp: nothing to read there
                    tp.offset = OFFSET_END
        consumer.assign(assignment)
        done: set[int] = set()  # partitions whose EOF event came at or past the start-time high watermark
        count = 0
        ready = False
        while count < args.follow if follow else len(done) < len(parts):
            if time.monotonic() > deadline:
                if follow:
                    fail(f"timed out after {args.timeout} s with {count} of {args.follow} records")
                fail(f"timed out after {args.timeout} s with partitions {sorted(set(parts) - done)} unfinished")
            msg = consumer.poll(0.5)
            if follow and not ready:
                emit("ready", partitions=parts)
                ready = True
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high[msg.partition()]:
                        done.add(msg.partition())
                    continue
                emit("error", code=err.code(), name=err.name(), message=err.str(), partition=msg.partition(),
                     fatal=err.fatal())
                return
            ts_type, ts = msg.timestamp()
            emit_record(msg.partition(), msg.offset(), ts, ts_type, msg.key(), msg.value(), msg.headers())
            count += 1
        positions = {tp.partition: tp.offset for tp in consumer.position(assignment)}
        emit("summary", records=count, positions=positions)
    finally:
        consumer.close()


def _start(spec: str) -> int:
    if spec == "beginning" or spec.startswith("ts:"):
        return OFFSET_BEGINNING
    if spec == "end":
        return OFFSET_END
    return int(spec)


if __name__ == "__main__":
    main()
