"""aiokafka transactional producer: ck_txn_produce.py's records, transactions and JSON lines, sent by aiokafka.

Usage and output: as ck_txn_produce.py. Errors are handled as aiokafka's documentation of transactions says
(docs/producer.rst, "Transactional producer"; aiokafka/producer/transaction_manager.py): an error while a transaction
runs (a record failed, ``send`` refused: the transaction manager is then in its abortable state) aborts it with
``abort_transaction`` and goes on with the next; a failed ``commit_transaction`` or ``abort_transaction``, or a fatal
error (``ProducerFenced``, ``OutOfOrderSequenceNumber``, ...: the producer cannot go on) ends the transaction
``unknown`` (it may have committed) and the producer is stopped and made again with the same transactional id (its
start initialises transactions, which aborts what the old one left open). ``start`` failing is retried with a new
producer until the deadline.
"""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from ck_produce import spec
from ck_txn_produce import parse, run_transactions
from common import emit


def main() -> None:
    args = parse()
    loop = asyncio.new_event_loop()
    started = time.monotonic()
    deadline = started + args.timeout

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    async def producer() -> AIOKafkaProducer | None:
        """A new producer, started (transactions initialised); None when the deadline passed first."""
        while time.monotonic() < deadline:
            p = AIOKafkaProducer(bootstrap_servers=args.bootstrap, transactional_id=args.transactional_id,
                                 enable_idempotence=True, request_timeout_ms=15000, transaction_timeout_ms=20000)
            try:
                await asyncio.wait_for(p.start(), min(30.0, left()))
                return p
            except (KafkaError, TimeoutError) as exc:
                await p.stop()
                emit("recovered", after="start", errors=[f"start: {type(exc).__name__}: {exc}"])
        return None

    async def send(p: AIOKafkaProducer, i: int) -> asyncio.Future[object]:
        """Record i produced; the future of its delivery, whose report is printed when it comes."""
        r = spec(i, "none", args.partitions, null_header=False)
        future = await p.send(args.topic, r.value, r.key, partition=r.partition, timestamp_ms=r.timestamp,
                              headers=r.headers)

        def delivered(f: asyncio.Future[object]) -> None:
            error = None if f.cancelled() or f.exception() is None else f.exception()
            meta = None if error is not None or f.cancelled() else f.result()
            emit("delivery", index=i, partition=r.partition, offset=getattr(meta, "offset", -1),
                 error="cancelled" if f.cancelled() else None if error is None else f"{type(error).__name__}: {error}")

        future.add_done_callback(delivered)
        return future

    async def transact(p: AIOKafkaProducer, indexes: list[int], planned: bool, errors: list[str]) -> str:
        """One transaction of records ``indexes`` (aborted on purpose when ``planned``); its outcome."""
        abort = planned
        try:
            await p.begin_transaction()
            sent = []
            for i in indexes:
                sent.append(await send(p, i))
                await asyncio.sleep(args.pace_ms / 1000)
            await asyncio.wait_for(asyncio.gather(*sent), left())  # (a failed record raises: the abort below)
        except (KafkaError, TimeoutError) as exc:
            errors.append(f"abortable: {type(exc).__name__}: {exc}")
            abort = True
        try:
            await asyncio.wait_for(p.abort_transaction() if abort else p.commit_transaction(), left())
            return "aborted" if abort else "committed"
        except (KafkaError, TimeoutError) as exc:
            errors.append(f"{'abort' if abort else 'commit'}_transaction: {type(exc).__name__}: {exc}")
            return "unknown"

    # ck_txn_produce.py's run, each step run to its end on this program's event loop (aiokafka's producer is made
    # and used on it; its delivery reports come while a step runs)
    run = loop.run_until_complete
    try:
        run_transactions(args, started, lambda: run(producer()),
                         lambda p, indexes, planned, errors: run(transact(p, indexes, planned, errors)),
                         lambda p, _: run(p.stop()))
    finally:
        loop.close()


if __name__ == "__main__":
    main()
