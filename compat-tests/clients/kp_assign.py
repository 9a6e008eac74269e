"""kafka-python consumer with manual assign() and no group: metadata, offsets, read to the end.

Prints the JSON lines of common.py. OffsetOutOfRangeError (with --reset none/error: no
reset policy) is printed as an error event and ends the run with code 0 so the caller can
inspect it. With --follow N: ``ready`` once the start positions are resolved and the first
poll() (which sends the first Fetch) returned, then read until N records arrived.
Works on kafka-python 2.0.2 and 3.x.

Usage: kp_assign.py BOOTSTRAP TOPIC [--start beginning|end|<offset>|ts:<ms>]
       [--reset earliest|latest|error|none] [--partitions 0,1] [--follow N] [--timeout 30]
"""

from __future__ import annotations

import time

from common import emit, emit_record, fail, parse_args
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError, OffsetOutOfRangeError


def main() -> None:
    args = parse_args(__doc__)
    deadline = time.monotonic() + args.timeout
    reset = "none" if args.reset == "error" else args.reset  # any value but earliest/latest: no reset policy
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset=reset, request_timeout_ms=15000)
    try:
        partitions = consumer.partitions_for_topic(args.topic)
        if not partitions:
            fail(f"no partitions for {args.topic}: {partitions!r}")
        cluster = consumer._client.cluster  # noqa: SLF001 — the brokers the client learned from Metadata
        emit("metadata", brokers=sorted(f"{b.host}:{b.port}" for b in cluster.brokers()),
             partitions=sorted(partitions))
        parts = [int(p) for p in args.partitions.split(",")] if args.partitions else sorted(partitions)
        tps = [TopicPartition(args.topic, p) for p in parts]
        begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        for tp in tps:
            emit("watermarks", partition=tp.partition, low=begin[tp], high=end[tp])
        consumer.assign(tps)
        stop_at = dict(end)
        if args.start == "beginning":
            consumer.seek_to_beginning(*tps)
        elif args.start == "end":
            consumer.seek_to_end(*tps)
        elif args.start.startswith("ts:"):
            found = consumer.offsets_for_times({tp: int(args.start[3:]) for tp in tps})
            for tp in tps:
                emit("start", partition=tp.partition, offset=None if found[tp] is None else found[tp].offset)
                if found[tp] is None:
                    consumer.seek(tp, end[tp])
                else:
                    consumer.seek(tp, found[tp].offset)
        else:
            for tp in tps:
                consumer.seek(tp, int(args.start))
        follow = args.follow is not None
        if follow:
            for tp in tps:
                consumer.position(tp)  # resolves a seek_to_end / seek_to_beginning now (ListOffsets)
        count = 0
        ready = False
        while count < args.follow if follow else any(consumer.position(tp) < stop_at[tp] for tp in tps):
            if time.monotonic() > deadline:
                if follow:
                    fail(f"timed out after {args.timeout} s with {count} of {args.follow} records")
                left = {tp.partition: (consumer.position(tp), stop_at[tp]) for tp in tps}
                fail(f"timed out after {args.timeout} s; (position, end) per partition: {left}")
            try:
                batch = consumer.poll(timeout_ms=500)
            except OffsetOutOfRangeError as exc:
                emit("error", name="OffsetOutOfRangeError", message=str(exc))
                return
            except KafkaError as exc:
                emit("error", name=type(exc).__name__, message=str(exc))
                return
            if follow and not ready:
                emit("ready", partitions=parts)
                ready = True
            for records in batch.values():
                for r in records:
                    emit_record(r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                    count += 1
        emit("summary", records=count, positions={tp.partition: consumer.position(tp) for tp in tps})
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
