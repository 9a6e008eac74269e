"""Real producers writing to Kafka-native topics (CreateTopics); consumers read back exactly what was produced.

Every scenario creates its own 3-partition topic (confluent-kafka's AdminClient, ``NewTopic(name, 3, 1)``)
and runs on Tansu first, then on walgate. The producer programs write the same deterministic records
(clients/ck_produce.py ``spec``): record i goes to partition i % 3 with timestamp BASE_TS + i (CreateTime),
key ``k<i % 5>`` (null for every 7th), a JSON value naming the codec and i, headers ``i`` and ``nil``
(null; empty where the client cannot send a null header value). So the expected content and order of every
partition is known: record i is at offset i // 3 of partition i % 3.

1. Producer x codec: each producer writes N records, every delivery report carries the expected partition
   and offset, and confluent-kafka's assign() consumer (clients/ck_assign.py) reads every record exactly
   once in per-partition order with the same key, value, headers and timestamp:
   confluent-kafka (idempotent, acks=all), kafka-python (its defaults: idempotent, acks=all; snappy and zstd
   through python-snappy / zstandard), aiokafka (acks=1), Java kafka-clients 4.3.0 (every
   codec) and 3.9 (snappy, zstd) with default settings (idempotent), kafkajs (acks=-1; only its built-in codecs
   none and gzip) and kcat -P (librdkafka 2.0.2; walgate only, see FINDINGS.md; partition, headers and
   timestamps per run, not per record). On walgate the watermarks must also be (0, records).
2. Cross-client reads: one topic written by five clients (codecs none/gzip/lz4, which every reader here
   decodes) is read by confluent-kafka, kafka-python, aiokafka and Spark's Kafka source on kafka-clients
   4.3.0 and 3.9; ListOffsets answers the record counts and the offsets for a timestamp.
3. A transactional producer initialises at once (walgate is its transaction coordinator:
   test_transactions_coordinator.py has the rest). Failures a producer must see: producing to an unknown topic gets
   UNKNOWN_TOPIC_OR_PARTITION
   and creates nothing (walgate only: Tansu, like Kafka's default auto.create.topics.enable=true, creates
   it); a Produce request naming an unknown topic is refused (Tansu acknowledges it and loses the records).
4. acks=0 (kafka-python, confluent-kafka): no answer to wait for, and every record lands. A refused acks=0
   request closes the connection, as Kafka does: librdkafka counts the disconnect, reconnects, and what it sends
   next lands.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest
from compat_brokers import xfail_on_tansu
from compat_procs import Run

N = 200
PARTITIONS = 3
BASE_TS = 1_700_000_000_000  # clients/ck_produce.py BASE_TS, Producer.java, produce.js

PY_PRODUCERS = {"ck": "ck_produce.py", "kp": "kp_produce.py", "aio": "aio_produce.py"}
JAVA_CLIENTS = {"java-4.3.0": "4.3.0", "java-3.9": "3.9"}
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SUPPORTED = {  # the codecs each producer can write here
    "ck": CODECS,
    "kp": CODECS,  # snappy / zstd through python-snappy / zstandard (the test extra)
    "aio": CODECS,
    "java-4.3.0": CODECS,
    "java-3.9": ("snappy", "zstd"),  # the Spark 4 client line: its native codec libraries
    "node": ("none", "gzip"),  # kafkajs 2.2.4 built-ins
    "kcat": CODECS,
}
NO_NULL_HEADER = {"kp", "node"}  # they send the `nil` header with an empty value
CREATE_TIME = {"ck": 1, "kp": 0, "aio": 0, "spark-4.3.0": "CreateTime", "spark-3.9": "CreateTime"}  # per reader


# ------------------------------------------------------------------ topics, producers, expected records


def new_topic(bootstrap: str, what: str, partitions: int = PARTITIONS) -> str:
    """A fresh Kafka-native topic, created as an application would (CreateTopics through AdminClient)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"produce-{what}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10, request_timeout=15)
    futures[name].result(timeout=20)
    return name


def topic_names(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=15).topics)


def expected(*writers: tuple[str, str, int]) -> list[dict[str, Any]]:
    """What a fresh topic holds after each (producer, codec, count) wrote its records in turn, the record
    indices continuing from one writer to the next: produce order, offsets numbered per partition from 0."""
    out, first = [], 0
    offsets: dict[int, int] = defaultdict(int)
    for producer, codec, count in writers:
        for i in range(first, first + count):
            nil = "" if producer in NO_NULL_HEADER else None
            headers = [["producer", "kcat"], ["nil", None]] if producer == "kcat" else [["i", str(i)], ["nil", nil]]
            p = i % PARTITIONS
            out.append({"index": i, "partition": p, "offset": offsets[p], "key": None if i % 7 == 0 else f"k{i % 5}",
                        "value": f'{{"codec":"{codec}","i":{i},"text":"record {i} of the walgate produce scenario"}}',
                        "headers": headers, "timestamp": BASE_TS + i, "create_time": True})
            offsets[p] += 1
        first += count
    return out


def run_producer(request: pytest.FixtureRequest, producer: str, bootstrap: str, topic: str, codec: str,
                 count: int = N, *extra: str, first: int = 0, timeout: float = 90) -> Run:
    """Run one producer program to its end (records [first, first + count)); a failure is checked by the caller."""
    args = (bootstrap, topic, codec, str(count), "--first", str(first), *extra)
    if producer in PY_PRODUCERS:
        return request.getfixturevalue("pyclient")(PY_PRODUCERS[producer], *args, timeout=timeout, check=False)
    if producer in JAVA_CLIENTS:
        return request.getfixturevalue("java")("Producer.java", *args, clients=JAVA_CLIENTS[producer],
                                               timeout=timeout, check=False)
    if producer == "node":
        return request.getfixturevalue("node")("produce.js", *args, timeout=timeout, check=False)
    raise ValueError(producer)


def kcat_produce(kcat, bootstrap: str, topic: str, codec: str, tmp_path) -> list[Run]:
    """kcat -P, once per partition (-p): one line per record, key before a tab (-K; no tab = null key)."""
    runs = []
    for p in range(PARTITIONS):
        lines = [f"{r['key']}\t{r['value']}" if r["key"] is not None else r["value"]
                 for r in expected(("kcat", codec, N)) if r["partition"] == p]
        path = tmp_path / f"kcat-p{p}.txt"
        path.write_text("\n".join(lines) + "\n")
        runs.append(kcat("-P", "-b", bootstrap, "-t", topic, "-p", str(p), "-K", "\\t", "-H", "producer=kcat",
                         "-H", "nil", "-X", f"compression.codec={codec}", "-l", str(path), check=False))
    return runs


def read_back(pyclient, show, bootstrap: str, topic: str) -> Run:
    run = pyclient("ck_assign.py", bootstrap, topic, "--start", "beginning", timeout=60, check=False)
    show(run)
    return run


# ------------------------------------------------------------------ checks


def check_deliveries(run: Run, want: list[dict[str, Any]], *, offsets: bool = True) -> None:
    """The producer reported each record delivered once, to its partition (and offset), without errors."""
    assert run.returncode == 0 and not run.events("error"), f"producer failed:\n{run.describe()}"
    (summary,) = run.events("summary")
    assert summary["produced"] == summary["delivered"] == len(want) and not summary["errors"], run.describe()
    got = {}
    for d in run.events("delivery"):
        assert d["index"] not in got, f"two delivery reports for record {d['index']}\n{run.describe()}"
        got[d["index"]] = d
    problems = []
    for r in want:
        d = got.get(r["index"])
        if d is None or d["error"] is not None or d["partition"] != r["partition"] \
                or (offsets and d["offset"] != r["offset"]):
            problems.append(f"record {r['index']}: delivery {d}, expected partition {r['partition']} offset {r['offset']}")
    assert not problems, "delivery reports differ:\n" + "\n".join(problems[:20]) + f"\n\n{run.describe()}"


def check_read_back(read: Run, want: list[dict[str, Any]], create_time: Any, *producers: Run,
                    ts_window: tuple[int, int] | None = None) -> None:
    """``read`` printed exactly ``want``: every record once, per-partition order and offsets, key, value,
    headers, CreateTime timestamp (``create_time``: the reader's timestamp_type for it, None when the reader cannot
    tell). ``ts_window``: timestamps are the producer's clock (kcat), within it."""
    context = "\n\n".join(r.describe() for r in (read, *producers))
    assert read.returncode == 0 and not read.events("error"), f"reader failed:\n{context}"
    fields = ("partition", "offset", "key", "value", "headers", "timestamp", "create_time")
    got = [{**{k: d.get(k) for k in fields}, "create_time": create_time is None or d["timestamp_type"] == create_time}
           for d in read.events("record")]
    want = [{k: r[k] for k in fields} for r in want]
    problems = []
    if ts_window is not None:
        lo, hi = ts_window
        problems += [f"p{r['partition']}@{r['offset']}: timestamp {r['timestamp']} outside the run [{lo}, {hi}]"
                     for r in got if not lo <= r["timestamp"] <= hi]
        for p in range(PARTITIONS):
            stamps = [r["timestamp"] for r in got if r["partition"] == p]
            if stamps != sorted(stamps):
                problems.append(f"partition {p}: timestamps out of produce order {stamps}")
        for r in got + want:
            r["timestamp"] = None
    for p in range(PARTITIONS):
        g = [r for r in got if r["partition"] == p]
        w = [r for r in want if r["partition"] == p]
        if g == w:
            continue
        problems.append(f"partition {p}: read {len(g)} records, expected {len(w)}")
        values = [r["value"] for r in g]
        missing = [r["value"] for r in w if r["value"] not in values]
        duplicates = sorted({v for v in values if values.count(v) > 1})
        problems += [f"  missing {m}" for m in missing[:5]] + [f"  read more than once {v}" for v in duplicates[:5]]
        for k, (a, b) in enumerate(zip(g, w)):
            if a != b:
                problems.append(f"  first difference at position {k}:\n    read     {json.dumps(a)}\n"
                                f"    expected {json.dumps(b)}")
                break
    assert not problems, "records read back differ from those produced:\n" + "\n".join(problems[:40]) + \
        f"\n\n{context}"


def check_watermarks(read: Run, want: list[dict[str, Any]]) -> None:
    """ListOffsets earliest / latest (the reader's watermarks): 0 and the number of records, per partition."""
    got = {d["partition"]: (d["low"], d["high"]) for d in read.events("watermarks")}
    counts = {p: sum(r["partition"] == p for r in want) for p in range(PARTITIONS)}
    assert got == {p: (0, n) for p, n in counts.items()}, \
        f"watermarks {got}, expected (0, records) = {counts}\n{read.describe()}"


# ------------------------------------------------------------------ 1. every producer x codec, read back

CASES = [pytest.param(p, c, id=f"{p}-{c}") for p in SUPPORTED if p != "kcat" for c in SUPPORTED[p]]


@pytest.mark.parametrize(("producer", "codec"), CASES)
def test_produce_and_read_back(broker, request, pyclient, show, producer, codec):
    topic = new_topic(broker.bootstrap, f"{producer}-{codec}")
    want = expected((producer, codec, N))
    run = run_producer(request, producer, broker.bootstrap, topic, codec)
    show(run)
    check_deliveries(run, want)
    read = read_back(pyclient, show, broker.bootstrap, topic)
    (md,) = read.events("metadata")
    assert md["partitions"] == list(range(PARTITIONS)) and md["brokers"] == [broker.bootstrap], read.describe()
    check_read_back(read, want, CREATE_TIME["ck"], run)
    if broker.name == "walgate":  # Tansu's ListOffsets(latest) is wrong after multi-record batches: section 2
        check_watermarks(read, want)


@pytest.mark.parametrize("codec", SUPPORTED["kcat"])
def test_kcat_produce_and_read_back(broker, kcat, pyclient, show, codec, tmp_path):
    if broker.name == "tansu":
        pytest.xfail("librdkafka 2.0.2 fails to parse Tansu's ApiVersions v3 tagged fields (see FINDINGS.md)")
    topic = new_topic(broker.bootstrap, f"kcat-{codec}")
    started = int(time.time() * 1000)
    runs = kcat_produce(kcat, broker.bootstrap, topic, codec, tmp_path)
    ended = int(time.time() * 1000)
    for run in runs:
        show(run)
        assert run.returncode == 0 and "fail" not in run.stderr.lower(), run.describe()
    read = read_back(pyclient, show, broker.bootstrap, topic)
    want = expected(("kcat", codec, N))
    check_read_back(read, want, CREATE_TIME["ck"], *runs, ts_window=(started, ended))
    check_watermarks(read, want)


# ------------------------------------------------------------------ 2. one topic, five writers, five readers

MIXED = [("ck", "lz4", 40), ("java-4.3.0", "gzip", 40), ("aio", "none", 40), ("node", "gzip", 40), ("kp", "lz4", 40)]
READERS = {"ck": "ck_assign.py", "kp": "kp_assign.py", "aio": "aio_assign.py",
           "spark-4.3.0": "4.3.0", "spark-3.9": "3.9"}  # Python programs / SparkSource.java on those kafka-clients
SEEK_TS = BASE_TS + 101  # in the middle of batches of every partition


@pytest.fixture(scope="module")
def mixed_topic(broker, request) -> tuple[str, list[dict[str, Any]]]:
    """A topic the MIXED producers write in turn (record indices continue): (name, its records)."""
    topic = new_topic(broker.bootstrap, "mixed")
    want = expected(*MIXED)
    first = 0
    for producer, codec, count in MIXED:
        run = run_producer(request, producer, broker.bootstrap, topic, codec, count, first=first)
        check_deliveries(run, want[first:first + count])
        first += count
    return topic, want


@pytest.mark.parametrize("reader", READERS)
def test_cross_client_read_of_mixed_topic(broker, mixed_topic, reader, pyclient, request, show):
    topic, want = mixed_topic
    if reader.startswith("spark"):  # reads exactly [earliest, latest); the Python readers fetch whole batches
        xfail_on_tansu(request, "ListOffsets(latest) answers the last batch's base offset + 1")
        read = request.getfixturevalue("java")("SparkSource.java", "--bootstrap", broker.bootstrap, "--topic", topic,
                                               clients=READERS[reader], check=False)
    else:
        read = pyclient(READERS[reader], broker.bootstrap, topic, "--start", "beginning", check=False)
    show(read)
    check_read_back(read, want, CREATE_TIME[reader])


def test_list_offsets_of_produced_records(broker, mixed_topic, pyclient, request, show):
    """Earliest / latest count the produced records; by timestamp: the first record at or after it."""
    xfail_on_tansu(request, "ListOffsets(latest) answers the last batch's base offset + 1; by timestamp 0 (FINDINGS.md)")
    topic, want = mixed_topic
    check_watermarks(read_back(pyclient, show, broker.bootstrap, topic), want)
    run = pyclient("ck_assign.py", broker.bootstrap, topic, "--start", f"ts:{SEEK_TS}", check=False)
    show(run)
    starts = {d["partition"]: d["offset"] for d in run.events("start")}
    want_starts = {p: sum(r["partition"] == p and r["timestamp"] < SEEK_TS for r in want) for p in range(PARTITIONS)}
    assert starts == want_starts, f"offsets for timestamp {SEEK_TS}: {starts}, expected {want_starts}\n{run.describe()}"
    check_read_back(run, [r for r in want if r["timestamp"] >= SEEK_TS], CREATE_TIME["ck"])


# ------------------------------------------------------------------ 3. transactions, and what a producer must be refused


@pytest.mark.parametrize("producer", ["ck", "java-4.3.0", "java-3.9"])
def test_transactional_producer_initialises(walgate, request, show, producer):
    """walgate is the transaction coordinator: initTransactions (FindCoordinator key type 1, InitProducerId with the
    transactional id) succeeds at once."""
    run = run_producer(request, producer, walgate.bootstrap, "unused", "none", 1, "--transactional-id",
                       f"tx-{uuid.uuid4().hex[:8]}", timeout=60)
    show(run)
    assert run.returncode == 0, run.describe()
    (txn,) = run.events("transactions")
    assert txn["ok"] is True and txn["seconds"] < 10, run.describe()


@pytest.mark.parametrize("producer", ["ck", "java-4.3.0"])
def test_produce_to_unknown_topic_creates_nothing(walgate, request, show, producer):
    """walgate never auto-creates a topic (a Kafka with auto.create.topics.enable=false): the producer's
    Metadata request gets UNKNOWN_TOPIC_OR_PARTITION and the records fail. (Tansu creates the topic, as
    Kafka's default configuration does.)"""
    topic = f"produce-unknown-{uuid.uuid4().hex[:8]}"
    extra = ("-X", "topic.metadata.propagation.max.ms=1000") if producer == "ck" else ("--max-block-ms", "2000")
    run = run_producer(request, producer, walgate.bootstrap, topic, "none", 2, *extra, timeout=60)
    show(run)
    deliveries = run.events("delivery")
    assert len(deliveries) == 2 and all(d["error"] for d in deliveries), run.describe()
    if producer == "ck":  # librdkafka fails the records with the broker's error once Metadata has said so
        assert {d["error"].split(":")[0] for d in deliveries} == {"UNKNOWN_TOPIC_OR_PART"}, run.describe()
    else:  # KafkaProducer.send waits max.block.ms for the topic to appear in Metadata
        assert all(f"Topic {topic} not present in metadata" in d["error"] for d in deliveries), run.describe()
    assert topic not in topic_names(walgate.bootstrap), "the topic was auto-created"


def test_produce_request_to_unknown_topic(broker, pyclient, show, request):
    """A Produce request naming a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION per partition."""
    xfail_on_tansu(request, "a Produce to an unknown topic is answered NONE at offset 0 and the records vanish")
    topic = f"produce-raw-unknown-{uuid.uuid4().hex[:8]}"
    run = pyclient("aio_produce.py", broker.bootstrap, topic, "gzip", "6", "--raw", check=False)
    show(run)
    answers = {d["partition"]: d["error"] for d in run.events("produce_response")}
    assert answers == {p: "UnknownTopicOrPartitionError" for p in range(PARTITIONS)}, run.describe()
    assert topic not in topic_names(broker.bootstrap), "the topic was created"


# ------------------------------------------------------------------ 4. acks=0


@pytest.mark.parametrize(("producer", "codec"), [("kp", "gzip"), ("ck", "zstd")])
def test_acks_zero_records_land(broker, request, pyclient, show, producer, codec):
    """Fire and forget: no Produce response, the client reports success at once; every record is stored."""
    topic = new_topic(broker.bootstrap, f"acks0-{producer}")
    want = expected((producer, codec, N))
    run = run_producer(request, producer, broker.bootstrap, topic, codec, N, "--acks", "0")
    show(run)
    check_deliveries(run, want, offsets=False)  # with acks=0 there is no offset to report
    for _attempt in range(10):  # nothing acknowledged the last request: give the broker a moment if needed
        read = read_back(pyclient, show, broker.bootstrap, topic)
        if len(read.events("record")) >= N:
            break
        time.sleep(0.5)
    check_read_back(read, want, CREATE_TIME["ck"], run)


def test_a_refused_acks_zero_request_closes_the_connection_and_the_client_goes_on(broker, request):
    """A record above the topic's max.message.bytes (the client's own limit is higher) with acks=0: Kafka answers
    nothing and closes the connection (``handleProduceRequest``), the only sign a fire-and-forget client gets.
    librdkafka logs the broker's disconnect ("connection closed by peer"); the records produced after it land."""
    import logging

    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    xfail_on_tansu(request, "keeps the connection open after refusing an acks=0 request")
    topic = f"produce-acks0-refused-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "2000"})])[topic].result(timeout=20)
    logged: list[str] = []
    client_log = logging.getLogger(f"librdkafka.{topic}")
    client_log.setLevel(logging.INFO)  # librdkafka logs a disconnect at its level 6, INFO
    client_log.addHandler(type("Collect", (logging.Handler,), {"emit": lambda self, r: logged.append(r.getMessage())})())
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 0, "linger.ms": 0}, logger=client_log)
    producer.produce(topic, b"x" * 20_000, partition=0)
    assert producer.flush(20) == 0
    # Tansu never closes the connection (the xfail above): a short wait there shows it, 30 s would only idle
    deadline = time.monotonic() + (30 if broker.name == "walgate" else 5)
    while not any("connection closed by peer" in line for line in logged):
        assert time.monotonic() < deadline, f"the client saw no disconnect: {logged[-5:]}"
        producer.poll(0.1)
    for i in range(3):
        producer.produce(topic, b"small-%d" % i, partition=0)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-check"})
    try:
        deadline = time.monotonic() + 30  # acks=0: the records land after flush() returns
        while consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1] < 3:
            assert time.monotonic() < deadline, "the records sent after the reconnect did not land"
            time.sleep(0.1)
    finally:
        consumer.close()
