"""Spark's Kafka source, reproduced on the real kafka-clients jars (java/SparkSource.java), against `power`.

The driver side lists partitions and offsets with the Admin client, the executor
side reads [earliest, latest) of every partition with seek/poll/position and the
failOnDataLoss checks; it must finish without a data-loss, hole or timeout error
and with counts that match the rows inserted. Its ``--kafka.<setting>`` options (Spark's
``kafka.``-prefixed ones) over SASL_SSL: test_security_sasl_ssl.py.

On a Kafka-native topic written by a transactional producer (issue 17), ``kafka.isolation.level=read_committed``:
the driver's ListOffsets answers the last stable offset, the executors read the committed and plain records only,
step over the markers and aborted records as Spark does (invisible offsets, no data loss) and stop at the LSO
while a transaction is open; under read_uncommitted the same topic reads whole, aborted and open records included.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import compat_data as data
import pytest
from compat_brokers import STABLE, expected, xfail_on_tansu
from compat_data import check_exactly, records
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

CLIENTS = ["4.3.0", "3.9"]  # kafka-clients versions (Spark 4.x ships 3.9; Kafka's current is 4.x)
SEEK_TS = data.BASE_TS + 4 * 60_000 + 1500


def offsets(run) -> dict[int, dict]:
    return {d["partition"]: d for d in run.events("offsets")}


@pytest.mark.parametrize("clients", CLIENTS)
def test_spark_source_reads_whole_range(power, java, show, clients):
    run = java("SparkSource.java", "--bootstrap", power.bootstrap, "--topic", "topic_meters", clients=clients,
               check=False)
    show(run)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    want = power.expected["topic_meters"]
    (describe,) = run.events("describe")
    assert [p["partition"] for p in describe["partitions"]] == list(range(data.VGROUPS)), run.describe()
    assert {p["leader"] for p in describe["partitions"]} == {power.bootstrap}, run.describe()
    per_partition = {p: len(rs) for p, rs in data.by_partition(want).items()}
    offs = offsets(run)
    assert {p: (o["earliest"], o["latest"]) for p, o in offs.items()} == {p: (0, n) for p, n in per_partition.items()}, \
        run.describe()
    check_exactly(records(run.json_lines()), want, first_offsets={p: 0 for p in per_partition})
    assert {d["timestamp_type"] for d in run.events("record")} == {"CreateTime"}, run.describe()
    (summary,) = run.events("summary")
    assert summary["records"] == len(want), run.describe()


@pytest.mark.parametrize("clients", CLIENTS)
def test_spark_source_starting_by_timestamp(power, java, show, clients, request):
    xfail_on_tansu(request, "ListOffsets by timestamp answers offset 0")
    run = java("SparkSource.java", "--bootstrap", power.bootstrap, "--topic", "topic_meters",
               "--starting", f"timestamp:{SEEK_TS}", "--starting-timestamp-strategy", "latest", clients=clients,
               check=False)
    show(run)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    want_all = power.expected["topic_meters"]
    earlier = data.by_partition(r for r in want_all if r.timestamp < SEEK_TS)
    want_starts = {p: len(earlier.get(p, [])) for p in range(data.VGROUPS)}
    latest = {p: o["latest"] for p, o in offsets(run).items()}
    # forTimestamp: the first offset whose timestamp >= T, or -1 when there is none (then latest: the strategy).
    got_starts = {p: o["timestamp_offset"] for p, o in offsets(run).items()}
    assert got_starts == {p: (s if s < latest[p] else -1) for p, s in want_starts.items()}, run.describe()
    check_exactly(records(run.json_lines()), [r for r in want_all if r.timestamp >= SEEK_TS], first_offsets=want_starts)


@pytest.mark.parametrize("strategy", ["error", "latest"])
def test_spark_source_starting_by_timestamp_with_empty_vgroups(walgate, java, show, strategy):
    """pipeline/meters.py --starting-timestamp on a topic with empty vgroups: the driver's ListOffsets by timestamp
    answers -1 for each; Spark's default startingOffsetsByTimestampStrategy (error) fails naming the first, latest
    starts them at their end (0) and reads the other vgroup from the timestamp on."""
    db, topic = "power_ts", "spark_ts"
    full = data.vnode_of(db, "d1001", data.VGROUPS)  # the rows of d1001 and the tables of its vnode only
    rows = [r for r in data.meter_rows() if data.vnode_of(db, r.table, data.VGROUPS) == full]
    if topic not in walgate.topics:
        walgate.load_meters(db, {topic: STABLE}, rows)
    want = [r for r in expected(STABLE, rows, db, data.VGROUPS) if r.timestamp >= SEEK_TS]
    assert want and len(want) < len(rows)
    empty = sorted(set(range(data.VGROUPS)) - {full})
    run = java("SparkSource.java", "--bootstrap", walgate.bootstrap, "--topic", topic,
               "--starting", f"timestamp:{SEEK_TS}", "--starting-timestamp-strategy", strategy, check=False)
    show(run)
    if strategy == "error":
        (error,) = run.events("error")
        assert run.returncode == 1 and error["kind"] == "no_offset_matched", run.describe()
        assert error["message"] == f"No offset matched from request of topic-partition {topic}-{empty[0]} and timestamp " \
                                   f"{SEEK_TS}.", run.describe()
        assert not run.events("record"), run.describe()
        return
    assert run.returncode == 0 and not run.events("error"), run.describe()
    start = len(rows) - len(want)  # one partition holds every row, in time order
    assert {p: (o["earliest"], o["latest"], o["timestamp_offset"]) for p, o in offsets(run).items()} == {
        full: (0, len(rows), start), **{p: (0, 0, -1) for p in empty}}, run.describe()
    check_exactly(records(run.json_lines()), want, first_offsets={full: start})


TXN_TOPIC = "spark_txn"
# Offsets: 0-2 committed, 3 COMMIT, 4-5 aborted, 6 ABORT, 7 plain, 8 committed, 9 COMMIT, 10 open, 11 plain.
COMMITTED = {0: "c0", 1: "c1", 2: "c2", 7: "p0", 8: "c3"}
EVERYTHING = {**COMMITTED, 4: "a0", 5: "a1", 10: "o0", 11: "p1"}
LSO, HW = 10, 12


@pytest.fixture(scope="module")
def open_transaction(walgate) -> Iterator[Producer]:
    """TXN_TOPIC as a confluent-kafka transactional producer leaves it (offsets above), its last transaction open;
    yields that producer (test_spark_source_read_committed_reads_a_transaction_once_committed commits it)."""
    bootstrap = walgate.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TXN_TOPIC, 1, 1)])[TXN_TOPIC].result(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"spark-{uuid.uuid4()}", "linger.ms": 0})
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    txn.init_transactions(30)

    def transaction(values: list[str], commit: bool) -> None:
        txn.begin_transaction()
        for v in values:
            txn.produce(TXN_TOPIC, v.encode(), key=v.encode(), partition=0)
        assert txn.flush(30) == 0
        if commit:
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)

    def send_plain(value: str) -> None:
        plain.produce(TXN_TOPIC, value.encode(), key=value.encode(), partition=0)
        assert plain.flush(30) == 0

    transaction(["c0", "c1", "c2"], True)
    transaction(["a0", "a1"], False)
    send_plain("p0")
    transaction(["c3"], True)
    txn.begin_transaction()
    txn.produce(TXN_TOPIC, b"o0", key=b"o0", partition=0)
    assert txn.flush(30) == 0
    send_plain("p1")
    yield txn
    txn.close()
    plain.close()


def spark_read(java, show, bootstrap: str, *options: str, clients: str = "4.3.0"
               ) -> tuple[dict, dict[int, str], set[int]]:
    """SparkSource.java over TXN_TOPIC: (its offsets line, offset -> value read, the offsets it skipped)."""
    run = java("SparkSource.java", "--bootstrap", bootstrap, "--topic", TXN_TOPIC, "--poll-timeout-ms", "3000",
               *options, clients=clients, check=False)
    show(run)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    (offsets,) = run.events("offsets")
    read = {r["offset"]: r["value"] for r in run.events("record")}
    assert len(read) == len(run.events("record")), run.describe()  # each offset once
    skipped = [o for s in run.events("skipped") for o in range(s["from"], s["to"])]
    assert len(skipped) == len(set(skipped)), run.describe()
    (summary,) = run.events("summary")
    assert summary["records"] == len(read), run.describe()
    return offsets, read, set(skipped)


@pytest.mark.parametrize("clients", CLIENTS)
def test_spark_source_read_committed_stops_at_the_lso_of_an_open_transaction(walgate, open_transaction, java, show,
                                                                             clients):
    committed = ("--kafka.isolation.level", "read_committed")
    offsets, read, skipped = spark_read(java, show, walgate.bootstrap, *committed, clients=clients)
    assert (offsets["earliest"], offsets["latest"]) == (0, LSO)  # latest: the open transaction's first offset
    assert read == COMMITTED
    assert skipped == set(range(LSO)) - set(COMMITTED)  # markers and aborted records: invisible, not data loss

    offsets, read, skipped = spark_read(java, show, walgate.bootstrap, "--holes", "skip", clients=clients)
    assert (offsets["earliest"], offsets["latest"]) == (0, HW)  # read_uncommitted
    assert read == EVERYTHING
    assert skipped == {3, 6, 9}  # the markers only


def test_spark_source_read_committed_reads_a_transaction_once_committed(walgate, open_transaction, java, show):
    open_transaction.commit_transaction(30)  # marker at 12: the LSO moves to the end
    offsets, read, skipped = spark_read(java, show, walgate.bootstrap, "--kafka.isolation.level", "read_committed")
    assert (offsets["earliest"], offsets["latest"]) == (0, HW + 1)
    assert read == {**COMMITTED, 10: "o0", 11: "p1"}
    assert skipped == {3, 4, 5, 6, 9, 12}
