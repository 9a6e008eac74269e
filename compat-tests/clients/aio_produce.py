"""aiokafka producer with its defaults (acks=1, not idempotent), plus compression_type; ``--idempotent``:
enable_idempotence=True (acks=all).

Usage and output: as ck_produce.py (same records, same JSON lines; no --transactional-id). Every send()
is awaited as a batch future, so records of one partition share batches (linger_ms=5).

``--raw``: no metadata lookup for the topic (a producer never sends to a topic Metadata does not list);
the records of each partition go into one batch built with aiokafka's BatchBuilder, sent in one Produce
request (acks=1, the newest version both sides support) straight to the bootstrap broker, and the
answer is printed as ``produce_response`` (partition, error_code, error name, offset per partition).
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.produce import ProduceRequest
from ck_produce import Spec, emit_summary, parse_produce_args, spec
from common import emit, fail


async def raw_produce(producer: AIOKafkaProducer, topic: str, records: list[Spec]) -> None:
    batches = {}
    for r in records:
        batch = batches.setdefault(r.partition, producer.create_batch())
        batch.append(timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
    node = next(iter(producer.client.cluster.brokers())).nodeId
    request = ProduceRequest(None, 1, 10000, [(topic, [(p, b._build()) for p, b in sorted(batches.items())])])
    response = await producer.client.send(node, request)
    for name, partitions in response.topics:
        for partition, error_code, offset, *_ in partitions:
            emit("produce_response", topic=name, partition=partition, error_code=error_code,
                 error=for_code(error_code).__name__, offset=offset, version=response.API_VERSION)


async def main() -> None:
    args = parse_produce_args(__doc__)
    started = time.monotonic()
    conf = {"bootstrap_servers": args.bootstrap, "compression_type": None if args.codec == "none" else args.codec,
            "linger_ms": 5, "request_timeout_ms": 15000}
    if args.idempotent:
        conf["enable_idempotence"] = True  # (acks=all with it)
    if args.acks is not None:
        conf["acks"] = int(args.acks) if args.acks != "all" else "all"
    producer = AIOKafkaProducer(**conf)
    try:
        await asyncio.wait_for(producer.start(), args.timeout / 2)
    except (KafkaError, TimeoutError) as exc:
        await producer.stop()
        fail(f"AIOKafkaProducer.start(): {type(exc).__name__}: {exc}")
    if args.raw:
        try:
            await raw_produce(producer, args.topic, [spec(i, args.codec, args.partitions)
                                                     for i in range(args.first, args.first + args.count)])
        finally:
            await producer.stop()
        return
    deliveries: list[dict] = []
    produced = 0
    try:
        pending = []
        for i in range(args.first, args.first + args.count):
            r = spec(i, args.codec, args.partitions)
            pending.append((r, await producer.send(args.topic, value=r.value, key=r.key, partition=r.partition,
                                                   timestamp_ms=r.timestamp, headers=r.headers)))
            produced += 1
            await asyncio.sleep(args.pace_ms / 1000)
        left = max(1.0, args.timeout - (time.monotonic() - started))
        await asyncio.wait([f for _, f in pending], timeout=left)
        for r, future in pending:
            if not future.done():
                d = {"index": r.index, "partition": r.partition, "offset": -1, "error": f"not delivered in {args.timeout} s"}
            elif future.exception() is not None:
                exc = future.exception()
                d = {"index": r.index, "partition": r.partition, "offset": -1, "error": f"{type(exc).__name__}: {exc}"}
            else:
                md = future.result()
                d = {"index": r.index, "partition": md.partition, "offset": md.offset, "error": None}
            deliveries.append(d)
            emit("delivery", **d)
    finally:
        await producer.stop()
    emit_summary(produced, deliveries, started)


if __name__ == "__main__":
    asyncio.run(main())
