"""confluent-kafka (librdkafka) transactional producer: the records of ck_produce.py's spec sent in transactions.

Usage: ck_txn_produce.py BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT [--first N] [--per-transaction 10]
[--abort-every 4] [--partitions 3] [--pace-ms MS] [--timeout 60].

Records first .. first + COUNT - 1 (record i to partition i % partitions), PER_TRANSACTION of them in each
transaction; the transaction whose first record's index divided by PER_TRANSACTION is ABORT_EVERY - 1 modulo
ABORT_EVERY is aborted on purpose after its records were delivered (so a read_uncommitted read may hold them), the
others committed. Errors are handled as librdkafka's documentation of the transactional producer says
(INTRODUCTION.md, "Transactional Producer", and confluent-kafka's KafkaError): a retriable error of
init_transactions / commit_transaction / abort_transaction: the call again; one that requires an abort
(``txn_requires_abort``: a record failed, the producer's epoch was bumped, ...): abort_transaction and go on with the
next transaction; a fatal error (the producer fenced): the producer closed, a new one made with the same
transactional id (its init_transactions aborts what the old one left open) and go on.

Prints one JSON line per delivery report (``delivery``: index, partition, offset, error), one ``transaction`` per
transaction (records: the indexes; outcome: ``committed``, ``aborted`` (definitely: abort_transaction returned) or
``unknown`` (a fatal error or the deadline before the transaction ended: it may have committed); planned: an abort on
purpose; errors: what was retried or led to the abort), ``recovered`` per producer made again, then ``summary``
(committed, aborted, unknown transactions). Exit code 0; 2 with an ``error`` event when init_transactions does not
succeed before the deadline.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ck_produce import spec
from common import emit
from confluent_kafka import KafkaError, KafkaException, Producer


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("bootstrap")
    ap.add_argument("topic")
    ap.add_argument("transactional_id")
    ap.add_argument("count", type=int)
    ap.add_argument("--first", type=int, default=0, help="index of the first record")
    ap.add_argument("--per-transaction", type=int, default=10)
    ap.add_argument("--abort-every", type=int, default=4, help="abort every N-th transaction on purpose (0: none)")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--pace-ms", type=float, default=0.0, help="pause this long after each record's send")
    ap.add_argument("--timeout", type=float, default=60.0, help="the run's deadline in seconds")
    return ap.parse_args()


P = TypeVar("P")


def planned_transactions(args: argparse.Namespace) -> Iterator[tuple[list[int], bool]]:
    """Each transaction's record indexes, in order, and whether it is aborted on purpose (the module docstring)."""
    end = args.first + args.count
    for first in range(args.first, end, args.per_transaction):
        yield (list(range(first, min(first + args.per_transaction, end))),
               args.abort_every > 0 and (first // args.per_transaction) % args.abort_every == args.abort_every - 1)


def run_transactions(args: argparse.Namespace, started: float, producer: Callable[[], P | None],
                     transact: Callable[[P, list[int], bool, list[str]], str], close: Callable[[P, float], None]) -> None:
    """The run of a transactional producer program of this module's usage and output (a synchronous client's, or an
    asyncio client's whose steps run to their end on its event loop, aio_txn_produce.py):
    ``producer()`` a producer ready for transactions (None: not before the deadline, ``args.timeout`` after
    ``started``: an ``error`` event, exit code 2); per planned transaction until the deadline, ``transact(producer,
    indexes, planned, errors)`` its outcome (``errors``: what it retried or aborted on), printed; after an
    ``unknown`` one the producer is closed at once (``close(producer, 0)``) and made again; at the end ``close``
    given what is left of the deadline, and the summary."""
    deadline = started + args.timeout
    current = producer()
    if current is None:
        emit("error", message=f"no producer ready for transactions within {args.timeout} s")
        raise SystemExit(2)
    counts = {"committed": 0, "aborted": 0, "unknown": 0}
    for indexes, planned in planned_transactions(args):
        if time.monotonic() >= deadline:
            break
        errors: list[str] = []
        outcome = transact(current, indexes, planned, errors)
        emit("transaction", records=indexes, outcome=outcome, planned=planned, errors=errors)
        counts[outcome] += 1
        if outcome == "unknown":  # the producer cannot go on: a new one with the same transactional id
            close(current, 0.0)
            current = producer()
            emit("recovered", after="unknown", errors=errors)
            if current is None:
                break
    if current is not None:
        close(current, max(0.1, deadline - time.monotonic()))
    emit("summary", seconds=round(time.monotonic() - started, 3), **counts)


class Fatal(Exception):
    """The producer hit a fatal error: it must be replaced."""


def main() -> None:
    args = parse()
    started = time.monotonic()
    deadline = started + args.timeout
    conf = {"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
            "transaction.timeout.ms": 20000, "message.timeout.ms": 15000, "socket.timeout.ms": 10000,
            "compression.codec": "none"}

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    def call(what: str, fn: Any, errors: list[str]) -> None:
        """``fn(timeout)`` until it returns; a retriable error retried until the deadline. Raises the KafkaException
        of an abortable one, :class:`Fatal` for a fatal one (or the deadline)."""
        while True:
            try:
                fn(min(10.0, left()))
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                errors.append(f"{what}: {err.name()}: {err.str()}")
                if err.fatal() or time.monotonic() >= deadline:
                    raise Fatal(errors[-1]) from exc
                if err.retriable() and not err.txn_requires_abort():
                    continue
                raise

    def producer() -> Producer | None:
        """A new producer, transactions initialised; None when the deadline passed first."""
        while time.monotonic() < deadline:
            p = Producer(conf)
            errors: list[str] = []
            try:
                call("init_transactions", p.init_transactions, errors)
                return p
            except (Fatal, KafkaException):
                p.flush(0)
                emit("recovered", after="init_transactions", errors=errors)
        return None

    def send(p: Producer, i: int) -> None:
        """Record i produced (its delivery report printed when it comes)."""
        r = spec(i, "none", args.partitions)

        def delivered(err: KafkaError | None, msg: Any) -> None:
            emit("delivery", index=i, partition=msg.partition(), offset=msg.offset(),
                 error=None if err is None else f"{err.name()}: {err.str()}")

        while True:
            try:
                p.produce(args.topic, r.value, r.key, partition=r.partition, timestamp=r.timestamp,
                          headers=r.headers, on_delivery=delivered)
                return
            except BufferError:  # the local queue is full: serve delivery reports, then again
                p.poll(0.1)

    def abort(p: Producer, errors: list[str]) -> str:
        """The transaction aborted: ``aborted``, or ``unknown`` when the producer cannot (fatal, the deadline)."""
        try:
            call("abort_transaction", p.abort_transaction, errors)
            return "aborted"
        except (Fatal, KafkaException):
            return "unknown"

    def transact(p: Producer, indexes: list[int], planned: bool, errors: list[str]) -> str:
        """One transaction of records ``indexes`` (aborted on purpose when ``planned``); its outcome."""
        outcome = "unknown"
        try:
            p.begin_transaction()
            for i in indexes:
                send(p, i)
                p.poll(args.pace_ms / 1000)
            if planned:
                p.flush(left())  # delivered (a read_uncommitted read may hold them), then aborted
                outcome = abort(p, errors)
            else:
                call("commit_transaction", p.commit_transaction, errors)
                outcome = "committed"
        except KafkaException as exc:  # one that requires the transaction's abort
            errors.append(f"abortable: {exc.args[0].name()}: {exc.args[0].str()}")
            outcome = abort(p, errors)
        except Fatal:
            pass
        p.poll(0)  # (the delivery reports before the transaction's line)
        return outcome

    run_transactions(args, started, producer, transact, lambda p, timeout: p.flush(timeout))

if __name__ == "__main__":
    main()
