"""kafka-python transactional producer: ck_txn_produce.py's records, transactions and JSON lines, sent by kafka-python.

Usage and output: as ck_txn_produce.py. Errors are handled as kafka-python's KafkaProducer documents its
transactions (``init_transactions``, ``begin_transaction``, ``commit_transaction``, ``abort_transaction``, and Kafka's
producer javadoc they follow): a record that failed (its future's error) or a refused ``send`` aborts the transaction
with ``abort_transaction`` and goes on with the next; a failed ``commit_transaction`` or ``abort_transaction`` (the
producer fenced, a timeout, ...) ends the transaction ``unknown`` (it may have committed), and the producer is closed
and made again with the same transactional id (its ``init_transactions`` aborts what the old one left open).
``init_transactions`` failing is retried with a new producer until the deadline. kafka-python sends headers as
(str, bytes), so the ``nil`` header has an empty value, as kp_produce.py's.
"""

from __future__ import annotations

import time

from ck_produce import spec
from ck_txn_produce import parse, run_transactions
from common import emit
from kafka import KafkaProducer
from kafka.errors import KafkaError


def main() -> None:
    args = parse()
    started = time.monotonic()
    deadline = started + args.timeout

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    def producer() -> KafkaProducer | None:
        """A new producer, transactions initialised; None when the deadline passed first."""
        while time.monotonic() < deadline:
            p = None
            try:
                p = KafkaProducer(bootstrap_servers=args.bootstrap, transactional_id=args.transactional_id,
                                  enable_idempotence=True, request_timeout_ms=15000, transaction_timeout_ms=20000,
                                  max_block_ms=int(min(30.0, left()) * 1000))
                p.init_transactions()
                return p
            except KafkaError as exc:
                if p is not None:
                    p.close(timeout=0)
                emit("recovered", after="init_transactions", errors=[f"init_transactions: {type(exc).__name__}: {exc}"])
        return None

    def delivered(i: int, future: object) -> None:
        """Record i's delivery report printed (raises its error)."""
        try:
            meta = future.get(timeout=left())  # type: ignore[attr-defined]
        except KafkaError as exc:
            emit("delivery", index=i, partition=-1, offset=-1, error=f"{type(exc).__name__}: {exc}")
            raise
        emit("delivery", index=i, partition=meta.partition, offset=meta.offset, error=None)

    def transact(p: KafkaProducer, indexes: list[int], planned: bool, errors: list[str]) -> str:
        """One transaction of records ``indexes`` (aborted on purpose when ``planned``); its outcome."""
        abort = planned
        try:
            p.begin_transaction()
            sent = []
            for i in indexes:
                r = spec(i, "none", args.partitions, null_header=False)
                sent.append((i, p.send(args.topic, r.value, r.key, partition=r.partition, timestamp_ms=r.timestamp,
                                       headers=[(k, v or b"") for k, v in r.headers])))
                time.sleep(args.pace_ms / 1000)
            for i, future in sent:
                delivered(i, future)
        except KafkaError as exc:
            errors.append(f"abortable: {type(exc).__name__}: {exc}")
            abort = True
        try:
            if abort:
                p.abort_transaction()
                return "aborted"
            p.commit_transaction()
            return "committed"
        except KafkaError as exc:
            errors.append(f"{'abort' if abort else 'commit'}_transaction: {type(exc).__name__}: {exc}")
            return "unknown"

    run_transactions(args, started, producer, transact, lambda p, timeout: p.close(timeout=timeout))

if __name__ == "__main__":
    main()
