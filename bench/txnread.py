"""read_committed fetch against read_uncommitted (issue 17), confluent-kafka (librdkafka) as the client.

A Kafka-native topic of 4 partitions holds transactions of 100 records of 100 B each, one in ten aborted, every one
ended by its marker (the batches a transactional producer sends and the markers its coordinator writes, put in the
data dir by the engine before ``walgate serve`` starts, so the rows measure reading only). One consumer reads it
all with ``isolation.level=read_uncommitted`` (every record, markers skipped) and with ``read_committed`` (walgate
answers the aborted transactions of each fetch, the client drops their records): records/s delivered, and the
committed read's time per stored record against the uncommitted one's. A first, unmeasured read serves every
batch once (walgate checks a stored batch's CRC the first time it serves it).

Beside it, in the same run, Tansu (memory storage): the same transactions sent by a confluent-kafka transactional
producer (one partition per transaction), read the same two ways. Tansu stores no record of an aborted transaction,
so its read_uncommitted delivers the committed records only (Kafka's would deliver the aborted ones too): its two
rows read the same records.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.consume import consume_all
from bench.report import Row, median_run
from bench.servers import tansu, walgate
from walgate.storage.engine import Engine
from walgate.wire import encode_batch

TOPIC = "bench_txn"
PARTITIONS = 4
PER_TXN = 100
ABORT_EVERY = 10


def fill(data_dir: Path, txns: int) -> tuple[int, int]:
    """``txns`` transactions per partition; (records stored, records committed)."""
    value = b"x" * 100
    e = Engine.open(data_dir)
    try:
        e.create_kafka_topic(TOPIC, PARTITIONS, {})
        committed = 0
        for p in range(PARTITIONS):
            pid = 1000 + p
            for t in range(txns):
                batch = encode_batch(0, [1_700_000_000_000 + t] * PER_TXN, [None] * PER_TXN, [value] * PER_TXN,
                                     producer_id=pid, producer_epoch=0, base_sequence=t * PER_TXN,
                                     is_transactional=True)
                e.append_batches(TOPIC, p, [batch])
                commit = t % ABORT_EVERY != ABORT_EVERY - 1
                e.write_txn_markers(pid, 0, 0, commit, [(TOPIC, p)])
                committed += PER_TXN if commit else 0
        return PARTITIONS * txns * PER_TXN, committed
    finally:
        e.close()


def fill_peer(bootstrap: str, txns: int) -> int:
    """The same transactions produced into ``bootstrap`` by a transactional producer; records committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", "linger.ms": 5})
    p.init_transactions(30)
    value = b"x" * 100
    committed = 0
    for t in range(txns):
        for partition in range(PARTITIONS):
            p.begin_transaction()
            for _ in range(PER_TXN):
                p.produce(TOPIC, value, partition=partition)
            if t % ABORT_EVERY != ABORT_EVERY - 1:
                p.commit_transaction(60)
                committed += PER_TXN
            else:
                p.abort_transaction(60)
    return committed


def reads(bootstrap: str, wants: dict[str, int], repeat: int) -> dict[str, tuple[int, int, float]]:
    """The median (records, bytes, seconds) of reading the topic at each isolation level, ``wants[level]`` records."""
    return {level: median_run([consume_all(bootstrap, want, topic=TOPIC, partitions=PARTITIONS,
                                           **{"isolation.level": level}) for _ in range(repeat)], lambda r: r[2])
            for level, want in wants.items()}


def run(*, quick: bool, repeat: int) -> list[Row]:
    txns = 250 if quick else 1000
    with tempfile.TemporaryDirectory(prefix="walgate-bench-") as tmp:
        stored, committed = fill(Path(tmp) / "data", txns)
        with walgate(Path(tmp)) as server, tansu() as peer:
            consume_all(server.bootstrap, stored, topic=TOPIC, partitions=PARTITIONS)  # first reads check CRCs
            read = reads(server.bootstrap, {"read_uncommitted": stored, "read_committed": committed}, repeat)
            if peer is not None:
                kept = fill_peer(peer, txns)
                consume_all(peer, kept, topic=TOPIC, partitions=PARTITIONS)  # unmeasured, as walgate's first read
                theirs = reads(peer, {"read_uncommitted": kept, "read_committed": kept}, repeat)
    (un_n, _, un_s), (co_n, _, co_s) = read["read_uncommitted"], read["read_committed"]
    rows = [
        Row("transactions of 100, read_uncommitted", un_n / un_s, "records/s"),
        Row("transactions of 100, read_committed (1 in 10 aborted)", co_n / co_s, "records/s"),
        Row("  read_committed / read_uncommitted, per stored record", 100 * (stored / co_s) / (stored / un_s), "%"),
    ]
    if peer is not None:
        (pun_n, _, pun_s), (pco_n, _, pco_s) = theirs["read_uncommitted"], theirs["read_committed"]
        rows += [
            Row("  Tansu (memory), read_uncommitted (no aborted record kept)", pun_n / pun_s, "records/s"),
            Row("  Tansu (memory), read_committed", pco_n / pco_s, "records/s"),
            Row("  Tansu read_committed / read_uncommitted", 100 * (pco_n / pco_s) / (pun_n / pun_s), "%"),
            Row("  walgate / Tansu, read_committed", 100 * (co_n / co_s) / (pco_n / pco_s), "%"),
        ]
    return rows
