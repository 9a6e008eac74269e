"""Transactional produce: records/s of one confluent-kafka producer in transactions of 100 records, beside the same
producer without transactions (idempotent, acks=all), both on a Kafka-native topic of walgate, and the same two
beside Tansu (memory storage; its transactions work with this client: InitProducerId with a transactional.id,
AddPartitionsToTxn, EndTxn), measured in the same run; then one kafka-clients 4.3 producer (``TxnProduce.java``) in
transactions of 100 on walgate at ``transaction.version`` 2 (KIP-890 part 2: Produce v12 adds the partitions, EndTxn
v5 bumps the epoch) and at 1 (AddPartitionsToTxn), when java and the jars (``.cache/jars/kafka-clients-4.3.0``,
``python compat-tests/setup_clients.py``) are there.

A transaction of 100 records costs, besides the records, AddPartitionsToTxn or (version 2) the first Produce's add
(the transaction log's fsync), EndTxn (two more: the decision and the completion) and a marker in each of its
partitions: the ratio is what exactly-once costs a producer at that transaction size.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from bench.produce import create
from bench.report import Row
from bench.servers import tansu, walgate
from bench.tools import program, skipped

JARS = Path(__file__).resolve().parent.parent / ".cache" / "jars" / "kafka-clients-4.3.0"

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


def java_produce(java: str, bootstrap: str, topic: str, count: int) -> float:
    """records/s of one kafka-clients 4.3 transactional producer (``TxnProduce.java``)."""
    out = subprocess.run(
        [java, "-Xmx512m", "-cp", ":".join(str(p) for p in sorted(JARS.glob("*.jar"))),
         str(Path(__file__).with_name("TxnProduce.java")), bootstrap, topic, str(count), str(TXN_RECORDS), str(SIZE)],
        check=True, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL).stdout
    return float(json.loads(out.strip().splitlines()[-1])["records_per_s"])


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
    java = program("java", "kafka-clients 4.3 transactional rows", "apt-get install default-jre-headless")
    if java is None:
        return rows
    if not list(JARS.glob("kafka-clients-*.jar")):
        skipped("kafka-clients 4.3 transactional rows", f"no jars in {JARS} (python compat-tests/setup_clients.py)")
        return rows
    for level in (2, 1):
        name = f"kafka-clients 4.3, transactions of {TXN_RECORDS}, transaction.version {level}"
        with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp, \
                walgate(Path(tmp) / "walgate", "--transaction-version", str(level)) as server:
            create(server.bootstrap, "txn")
            try:
                rate = statistics.median(java_produce(java, server.bootstrap, "txn", count) for _ in range(repeat))
            except subprocess.CalledProcessError as exc:  # the program printed why (a client exception)
                skipped(f"the row {name!r}", f"TxnProduce.java failed: {(exc.stderr or '').strip()[-500:]}")
                continue
        rows.append(Row(name, rate, "records/s"))
    return rows
