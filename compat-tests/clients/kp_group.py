"""kafka-python group member: KafkaConsumer(group_id=...) subscribe() with the range assignor.

Usage: kp_group.py BOOTSTRAP TOPIC GROUP [--max-records N] [--until-end] [--reset earliest|latest|none]
       [--commit-every N] [--timeout 60]

Same JSON lines and stop conditions as ck_group.py: ``assignment`` after every rebalance callback,
``committed`` after the synchronous commit at the end together with what ``committed()`` then
answers for every partition of the topic (``fetched``), ``summary``, ``closed``. ``--reset none``
(or ``error``): no reset policy, a committed offset out of range is an OffsetOutOfRangeError
``error`` event that ends the run (commit, close, exit 0). With ``--commit-every N`` it also commits (synchronously)
after each poll that brought the records read to a further multiple of N: a ``committed`` event, or one with the
commit's error in ``errors`` (a rebalance took the partitions meanwhile) and the member goes on. A retriable error
poll raises (kafka-python 3's KafkaConnectionError while a node is down) is a ``retried`` event, and it goes on.
Works on kafka-python 2.0.2 and 3.x.
"""

from __future__ import annotations

import signal
import time

from common import emit, emit_record, group_parser
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import KafkaError


def main() -> None:
    ap = group_parser(__doc__)
    ap.add_argument("--commit-every", type=int, metavar="N", help="also commit the positions every N records")
    args = ap.parse_args()

    stopping = False

    def on_term(signum, frame):  # noqa: ANN001
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group,
        auto_offset_reset="none" if args.reset == "error" else args.reset,
        enable_auto_commit=True, auto_commit_interval_ms=60000, partition_assignment_strategy=[RangePartitionAssignor],
        session_timeout_ms=10000, heartbeat_interval_ms=3000, request_timeout_ms=30000,
        max_poll_records=1 if args.max_records else 500,
    )
    all_tps = [TopicPartition(args.topic, p) for p in sorted(consumer.partitions_for_topic(args.topic) or [])]
    high = {tp.partition: o for tp, o in consumer.end_offsets(all_tps).items()}
    emit("watermarks_high", high=high)

    def commit(why: str) -> None:
        assigned = consumer.assignment()
        if not assigned:
            return
        offsets = {tp.partition: consumer.position(tp) for tp in assigned}
        consumer.commit()  # the consumed positions of every assigned partition, synchronously
        emit("committed", why=why, offsets=offsets, fetched={tp.partition: consumer.committed(tp) for tp in all_tps})

    def commit_every() -> None:
        """The positions committed on the way (their fetched offsets not asked); a failed commit reported."""
        assigned = consumer.assignment()
        offsets = {tp.partition: consumer.position(tp) for tp in assigned}
        try:
            consumer.commit()
        except KafkaError as exc:  # CommitFailedError: the group rebalanced; it commits on its next turn
            emit("committed", why="every", offsets={}, errors=[f"{type(exc).__name__}: {exc}"])
            return
        emit("committed", why="every", offsets=offsets, errors=[])

    class Listener(ConsumerRebalanceListener):
        # kafka-python 3 runs listeners on its IO thread, where a blocking commit() raises; with
        # enable_auto_commit the coordinator itself commits synchronously before a rebalance.
        def on_partitions_revoked(self, revoked):  # noqa: ANN001
            emit("assignment", after="revoke", partitions=[])

        def on_partitions_assigned(self, assigned):  # noqa: ANN001
            emit("assignment", after="assign", partitions=sorted(tp.partition for tp in assigned))

    consumer.subscribe([args.topic], listener=Listener())
    # kafka-python 3.0.12 drops a finished JoinGroup/SyncGroup whose outcome a timed-out poll() left unread when
    # need_rejoin() turned false meanwhile (base.py join_group_async loops `while self.need_rejoin()`; Java's
    # loop also runs while a join is pending): the member stays REBALANCING with its heartbeat off, polls
    # nothing and is expired. need_rejoin() turns false that way when a leader rejoins because the topic's
    # partitions reached it after its first assignment (its metadata snapshot is built by a metadata update after
    # subscribe(), which a join answered at once outruns). A metadata refresh here builds that snapshot before the
    # first join, so the leader has no such rejoin.
    consumer.topics()
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
                assigned = consumer.assignment()
                if assigned == set(all_tps) and all(consumer.position(tp) >= high[tp.partition] for tp in assigned):
                    break
            try:
                batch = consumer.poll(timeout_ms=200)
            except KafkaError as exc:  # e.g. OffsetOutOfRangeError with --reset none: ends the run
                if exc.retriable:  # (kafka-python 3 raises KafkaConnectionError from poll while a node is down)
                    emit("retried", name=type(exc).__name__, message=str(exc))
                    continue
                emit("error", name=type(exc).__name__, message=str(exc))
                break
            done = False
            before = count
            for tp in sorted(batch, key=lambda t: t.partition):
                for m in batch[tp]:
                    emit_record(m.partition, m.offset, m.timestamp, m.timestamp_type, m.key, m.value, m.headers)
                    count += 1
                    if args.max_records is not None and count >= args.max_records:
                        consumer.seek(tp, m.offset + 1)  # records past this one were fetched, not consumed
                        done = True
                        break
                if done:
                    break
            if done:
                break
            if args.commit_every and count // args.commit_every > before // args.commit_every:
                commit_every()
        commit("close")
    finally:
        emit("summary", records=count)
        consumer.close(autocommit=False)
        emit("closed")
    raise SystemExit(code)


if __name__ == "__main__":
    main()
