"""aiokafka consumer with manual assign() and no group: metadata, offsets, read to the end.

Prints the JSON lines of common.py. OffsetOutOfRangeError (with --reset none/error: no
reset policy) is printed as an error event and ends the run with code 0 so the caller can
inspect it. With --follow N: ``ready`` once the start positions are resolved and the first
getmany() returned, then read until N records arrived.

Usage: aio_assign.py BOOTSTRAP TOPIC [--start beginning|end|<offset>|ts:<ms>]
       [--reset earliest|latest|error|none] [--partitions 0,1] [--follow N] [--timeout 30]
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError, OffsetOutOfRangeError
from common import emit, emit_record, fail, parse_args


async def main() -> None:
    args = parse_args(__doc__)
    deadline = time.monotonic() + args.timeout
    consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap, group_id=None, enable_auto_commit=False,
                                auto_offset_reset="none" if args.reset == "error" else args.reset,  # none: no policy
                                request_timeout_ms=15000)
    await consumer.start()
    try:
        cluster = consumer._client.cluster  # noqa: SLF001 — the brokers the client learned from Metadata
        await consumer._client.force_metadata_update()  # noqa: SLF001
        partitions = cluster.partitions_for_topic(args.topic)
        if not partitions:
            fail(f"no partitions for {args.topic}: {partitions!r}")
        emit("metadata", brokers=sorted(f"{b.host}:{b.port}" for b in cluster.brokers()), partitions=sorted(partitions))
        parts = [int(p) for p in args.partitions.split(",")] if args.partitions else sorted(partitions)
        tps = [TopicPartition(args.topic, p) for p in parts]
        consumer.assign(tps)
        begin, end = await consumer.beginning_offsets(tps), await consumer.end_offsets(tps)
        for tp in tps:
            emit("watermarks", partition=tp.partition, low=begin[tp], high=end[tp])
        if args.start == "beginning":
            await consumer.seek_to_beginning(*tps)
        elif args.start == "end":
            await consumer.seek_to_end(*tps)
        elif args.start.startswith("ts:"):
            found = await consumer.offsets_for_times({tp: int(args.start[3:]) for tp in tps})
            for tp in tps:
                emit("start", partition=tp.partition, offset=None if found[tp] is None else found[tp].offset)
                consumer.seek(tp, end[tp] if found[tp] is None else found[tp].offset)
        else:
            for tp in tps:
                consumer.seek(tp, int(args.start))
        follow = args.follow is not None
        count = 0
        ready = False
        while True:
            positions = {tp: await consumer.position(tp) for tp in tps}  # waits for a seek_to_* to resolve
            if count >= args.follow if follow else all(positions[tp] >= end[tp] for tp in tps):
                break
            if time.monotonic() > deadline:
                if follow:
                    fail(f"timed out after {args.timeout} s with {count} of {args.follow} records")
                fail(f"timed out after {args.timeout} s; (position, end): "
                     f"{ {tp.partition: (positions[tp], end[tp]) for tp in tps} }")
            try:
                batch = await consumer.getmany(timeout_ms=500)
            except OffsetOutOfRangeError as exc:
                emit("error", name="OffsetOutOfRangeError", message=str(exc))
                return
            except KafkaError as exc:
                emit("error", name=type(exc).__name__, message=str(exc))
                return
            if follow and not ready:
                emit("ready", partitions=parts)
                ready = True
            for recs in batch.values():
                for r in recs:
                    emit_record(r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                    count += 1
        emit("summary", records=count, positions={tp.partition: await consumer.position(tp) for tp in tps})
    finally:
        await consumer.stop()


if __name__ == "__main__":
    asyncio.run(main())
