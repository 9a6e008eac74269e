"""aiokafka group member: AIOKafkaConsumer(group_id=...) subscribe() and consume, committing by hand.

Usage: aio_group.py BOOTSTRAP TOPIC GROUP [--max-records N] [--until-end] [--reset earliest|latest|none]
       [--commit-every N] [--timeout 60]

Same JSON lines and stop conditions as ck_group.py: ``watermarks_high``, ``assignment`` (the member's whole
assignment after every rebalance callback), ``record``, ``committed`` (the offsets a commit stored),
``summary``, ``closed``. enable_auto_commit is off: the ConsumerRebalanceListener commits, in
on_partitions_revoked, the position after the last record printed for each partition being taken away, and
the end commits it for every partition still assigned, so a partition that moves to another member (or a
restarted one) continues exactly after the last record this one printed. stop() then leaves the group. With
``--commit-every N`` it also commits, after each getmany() that brought the records read to a further multiple of N,
the positions printed since the last commit: a ``committed`` event, or one with the commit's error in ``errors``
(a rebalance took the partitions meanwhile: those offsets are committed next time) and the member goes on.

Stops (commit, stop, exit 0) when: ``--max-records N`` records were read (getmany(max_records=) returns no
more than that); ``--until-end`` and every partition of the topic is assigned to it and has reached the high
watermark seen at start; SIGTERM arrives; or an error getmany() raises (e.g. OffsetOutOfRangeError with
``--reset none``: an ``error`` event). ``--timeout`` passing is an ``error`` event and exit 2.
"""

from __future__ import annotations

import asyncio
import signal
import time

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError
from common import emit, emit_record, fail, group_parser


async def main() -> int:
    ap = group_parser(__doc__)
    ap.add_argument("--commit-every", type=int, metavar="N", help="also commit the positions every N records")
    args = ap.parse_args()

    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, enable_auto_commit=False,
        auto_offset_reset="none" if args.reset == "error" else args.reset,
        session_timeout_ms=10000, heartbeat_interval_ms=3000, request_timeout_ms=30000,
    )
    try:
        await asyncio.wait_for(consumer.start(), args.timeout)
        await consumer._client.force_metadata_update()  # noqa: SLF001 — the topic's partitions before subscribing
        all_tps = [TopicPartition(args.topic, p) for p in sorted(consumer.partitions_for_topic(args.topic) or [])]
        if not all_tps:
            raise KafkaError(f"no partitions for {args.topic}")
        high = {tp.partition: o for tp, o in (await consumer.end_offsets(all_tps)).items()}
    except (TimeoutError, KafkaError) as exc:
        await consumer.stop()
        fail(f"before subscribing: {exc!r}")
    emit("watermarks_high", high=high)
    printed: dict[TopicPartition, int] = {}  # the offset after the last record printed, per assigned partition

    async def commit(tps: set[TopicPartition], why: str, *, going_on: bool = False) -> None:
        """The offsets printed of ``tps`` committed; ``going_on``: a failed commit is an event with its error (the
        offsets kept for the next commit), not an exception."""
        offsets = {tp: printed.pop(tp) for tp in tps if tp in printed}
        if not offsets:
            return
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:
            if not going_on:
                raise
            for tp, o in offsets.items():
                printed.setdefault(tp, o)
            emit("committed", why=why, offsets={}, errors=[f"{type(exc).__name__}: {exc}"])
            return
        emit("committed", why=why, offsets={tp.partition: o for tp, o in sorted(offsets.items())}, errors=[])

    class Listener(ConsumerRebalanceListener):
        # aiokafka's rebalances are eager: every partition is revoked, then the new whole assignment arrives
        async def on_partitions_revoked(self, revoked):  # noqa: ANN001
            await commit(set(revoked), "revoke")
            emit("assignment", after="revoke", partitions=[])

        async def on_partitions_assigned(self, assigned):  # noqa: ANN001
            emit("assignment", after="assign", partitions=sorted(tp.partition for tp in assigned))

    async def at_end() -> bool:
        assigned = consumer.assignment()
        if assigned != set(all_tps):
            return False
        try:
            for tp in assigned:
                if await consumer.position(tp) < high[tp.partition]:
                    return False
        except IllegalStateError:  # a rebalance took a partition away meanwhile
            return False
        return True

    consumer.subscribe([args.topic], listener=Listener())
    deadline = time.monotonic() + args.timeout
    count = 0
    code = 0
    try:
        while not stopping.is_set():
            if time.monotonic() > deadline:
                emit("error", message=f"timed out after {args.timeout} s with {count} records")
                code = 2
                break
            if args.until_end and await at_end():
                break
            left = None if args.max_records is None else args.max_records - count
            try:
                batch = await consumer.getmany(timeout_ms=200, max_records=left)
            except KafkaError as exc:
                emit("error", name=type(exc).__name__, message=str(exc))
                break
            before = count
            for tp in sorted(batch, key=lambda t: t.partition):
                for m in batch[tp]:
                    emit_record(m.partition, m.offset, m.timestamp, m.timestamp_type, m.key, m.value, m.headers)
                    printed[tp] = m.offset + 1
                    count += 1
            if args.commit_every and count // args.commit_every > before // args.commit_every:
                await commit(consumer.assignment(), "every", going_on=True)
            if left is not None and count >= args.max_records:
                break
        await commit(consumer.assignment(), "close")
    finally:
        emit("summary", records=count)
        await consumer.stop()
        emit("closed")
    return code


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
