"""confluent-kafka (librdkafka) group member: subscribe() with a group.id and consume.

Prints the JSON lines of common.py plus ``assignment`` (the member's whole assignment after every
rebalance callback), ``committed`` (the offsets a synchronous commit stored) and ``closed``.
Offsets are committed by hand (enable.auto.commit=false): synchronously in the revoke callback for the
partitions being taken away, and at the end for everything still assigned, so a partition that moves to
another member continues exactly after the last record this one printed; with ``--commit-every N`` also
after every N records read (what is assigned then). A commit that fails as a whole (coordinator away) is a
``committed`` event with its error in ``errors`` and no offsets: the member goes on.

Stops (commit, close, exit 0) when: ``--max-records N`` records were read; ``--until-end`` and every
partition of the topic that is assigned has reached the high watermark seen at start (and all partitions
of the topic are assigned); SIGTERM arrives; or ``--timeout`` passes (error event, exit 2).
"""

from __future__ import annotations

import signal
import time

from common import emit, emit_record, group_parser
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition


def main() -> None:
    ap = group_parser(__doc__)
    ap.add_argument("--strategy", help="partition.assignment.strategy (default: librdkafka's range,roundrobin)")
    ap.add_argument("--protocol", choices=("classic", "consumer"), default="classic",
                    help="group.protocol: consumer = KIP-848 (server-side assignment, incremental callbacks)")
    ap.add_argument("--session-timeout-ms", type=int, default=10000)
    ap.add_argument("--instance-id", help="group.instance.id: a static member")
    ap.add_argument("--commit-every", type=int, metavar="N", help="also commit the positions after every N records")
    args = ap.parse_args()

    stopping = False

    def on_term(signum, frame):  # noqa: ANN001
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error" if args.reset == "none" else args.reset,  # librdkafka has no "none"
        "socket.timeout.ms": 10000,
    }
    if args.protocol == "consumer":  # the broker owns session timeout, heartbeat interval and assignor
        conf["group.protocol"] = "consumer"
    else:
        conf["session.timeout.ms"] = args.session_timeout_ms
        conf["heartbeat.interval.ms"] = min(3000, args.session_timeout_ms // 3)
    if args.strategy:
        conf["partition.assignment.strategy"] = args.strategy
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)
    md = consumer.list_topics(args.topic, timeout=10)
    all_parts = sorted(md.topics[args.topic].partitions)
    high = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10)[1] for p in all_parts}
    emit("watermarks_high", high=high)
    at_end: set[int] = set()

    def commit_positions(parts: list[TopicPartition], why: str) -> None:
        if not parts:
            return
        positions = [tp for tp in consumer.position(parts) if tp.offset >= 0]
        if positions:
            try:
                done = consumer.commit(offsets=positions, asynchronous=False)
            except KafkaException as exc:
                emit("committed", why=why, offsets={}, errors=[str(exc.args[0])])
                return
            emit("committed", why=why, offsets={tp.partition: tp.offset for tp in done},
                 errors=[str(tp.error) for tp in done if tp.error is not None])

    cooperative = args.strategy == "cooperative-sticky" or args.protocol == "consumer"
    mine: set[int] = set()

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        # the client assigns (incrementally for cooperative) after this callback returns
        nonlocal mine
        mine = mine | {tp.partition for tp in parts} if cooperative else {tp.partition for tp in parts}
        emit("assignment", after="assign", partitions=sorted(mine))

    def on_revoke(c: Consumer, parts: list[TopicPartition]) -> None:
        nonlocal mine
        commit_positions(parts, "revoke")
        for tp in parts:
            at_end.discard(tp.partition)
        mine = mine - {tp.partition for tp in parts} if cooperative else set()
        emit("assignment", after="revoke", partitions=sorted(mine))

    def on_lost(c: Consumer, parts: list[TopicPartition]) -> None:
        nonlocal mine
        emit("lost", partitions=sorted(tp.partition for tp in parts))
        mine = mine - {tp.partition for tp in parts}
        emit("assignment", after="lost", partitions=sorted(mine))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    deadline = time.monotonic() + args.timeout
    count = 0
    code = 0
    try:
        while not stopping:
            if time.monotonic() > deadline:
                emit("error", message=f"timed out after {args.timeout} s with {count} records")
                code = 2
                break
            if args.until_end:
                assigned = {tp.partition for tp in consumer.assignment()}
                if assigned == set(all_parts) and all(p in at_end or high[p] == 0 for p in assigned):
                    break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() >= high.get(msg.partition(), 0):
                        at_end.add(msg.partition())
                    continue
                emit("error", code=err.code(), name=err.name(), message=err.str(), fatal=err.fatal())
                continue
            ts_type, ts = msg.timestamp()
            emit_record(msg.partition(), msg.offset(), ts, ts_type, msg.key(), msg.value(), msg.headers())
            count += 1
            if args.commit_every and count % args.commit_every == 0:
                commit_positions(consumer.assignment(), "every")
            if args.max_records is not None and count >= args.max_records:
                break
        commit_positions(consumer.assignment(), "close")
    finally:
        emit("summary", records=count)
        consumer.close()
        emit("closed")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
