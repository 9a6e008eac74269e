"""Transactional produce: records/s of one confluent-kafka producer in transactions of 100 records, beside the same
producer without transactions (idempotent, acks=all), both on a Kafka-native topic of walgate, and the same two
beside Tansu (memory storage; its transactions work with this client: InitProducerId with a transactional.id,
AddPartitionsToTxn, EndTxn), measured in the same run.

A transaction of 100 records costs, besides the records, AddPartitionsToTxn (the transaction log's fsync), EndTxn
(two more: the decision and the completion) and a marker in each of its partitions: the ratio is what exactly-once
costs a producer at that transaction size.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from bench.produce import create
from bench.report import Row
from bench.servers import tansu, walgate

TXN_RECORDS = 100
SIZE = 100


def produce(bootstrap: str, topic: str, count: int, transactional: bool) -> float:
    """records/s of one producer sending ``count`` values of ``SIZE`` bytes (in transactions of ``TXN_RECORDS``)."""
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
    if transactional:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    value = bytes(SIZE)
    if transactional:
        p.init_transactions(30)
    start = time.perf_counter()
    for first in range(0, count, TXN_RECORDS):
        if transactional:
            p.begin_transaction()
        for _ in range(min(TXN_RECORDS, count - first)):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.01)
        if transactional:
            p.commit_transaction(60)
    assert p.flush(60) == 0
    return count / (time.perf_counter() - start)


def rates(bootstrap: str, count: int, repeat: int) -> dict[bool, float]:
    """Median records/s without (False) and with (True) transactions, on a new topic of ``bootstrap``."""
    create(bootstrap, "txn")
    return {transactional: statistics.median(produce(bootstrap, "txn", count, transactional) for _ in range(repeat))
            for transactional in (False, True)}


def run(*, quick: bool, repeat: int) -> list[Row]:
    count = 20_000 if quick else 100_000
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, walgate(Path(tmp) / "walgate") as server, \
            tansu() as peer:
        mine = rates(server.bootstrap, count, repeat)
        theirs = rates(peer, count, repeat) if peer is not None else None
    rows = [
        Row(f"produce {SIZE} B, idempotent, acks=all, 1 producer", mine[False], "records/s"),
        Row(f"produce {SIZE} B in transactions of {TXN_RECORDS}, 1 producer", mine[True], "records/s"),
        Row("  transactional / non-transactional", mine[True] / mine[False], "x"),
    ]
    if theirs is not None:
        rows += [
            Row("  Tansu (memory), idempotent, same client", theirs[False], "records/s"),
            Row(f"  Tansu (memory), in transactions of {TXN_RECORDS}, same client", theirs[True], "records/s"),
            Row("  Tansu transactional / non-transactional", theirs[True] / theirs[False], "x"),
            Row("  walgate / Tansu, in transactions", 100 * mine[True] / theirs[True], "%"),
        ]
    return rows
