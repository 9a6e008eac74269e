"""@confluentinc/kafka-javascript 1.10.1 (Confluent's Node client, librdkafka 2.15.1 inside): node/ckjs_*.js.

Installed by setup_clients.py (steps ``node`` and ``kafka-javascript``: built from source with CKJS_LINKING=dynamic
when the prebuilt binary cannot be downloaded); the tests skip with the reason when it could not be built. Both of
its APIs are driven: the KafkaJS-compatible one (admin, producer, group consumer) and the node-rdkafka one
(KafkaConsumer with assign()). Scenarios on Kafka-native topics run on Tansu first, then on walgate.

1. Admin (KafkaJS API): listTopics, fetchTopicMetadata (librdkafka DescribeTopics), fetchTopicOffsets and
   fetchTopicOffsetsByTimestamp of `topic_meters` (the latter xfail on Tansu, FINDINGS.md).
2. assign() consumer (node-rdkafka API): every record of `topic_meters`, `topic_stable` and (walgate) the WITH META
   `topic_db` exactly once, dense offsets, end - beginning = records per partition.
3. Producer (KafkaJS API, idempotent), every codec: the records of test_produce.py's producers, each delivery at its
   offset, read back exactly by confluent-kafka's assign() consumer (test_produce.py's checks).
4. Group consumer (KafkaJS API; walgate only, as test_groups.py): a new group reads everything, commits the ends
   and reads them back; a group that read 10 records and committed resumes exactly there.
"""

from __future__ import annotations

from collections.abc import Callable

import compat_data as data
import pytest
from compat_brokers import xfail_on_tansu
from compat_data import H_META, H_TABLE, check_dense, check_exactly, records, split_meta
from compat_procs import Run
from test_consume_node import SEEK_TS
from test_groups import by_offset, group_name
from test_produce import (
    CODECS,
    CREATE_TIME,
    NO_NULL_HEADER,
    N,
    check_deliveries,
    check_read_back,
    check_watermarks,
    expected,
    new_topic,
    read_back,
)

VERSION, LIBRDKAFKA = "1.10.1", "2.15.1"
GROUP_TOPIC = "topic_meters"


@pytest.fixture(scope="session")
def ckjs(node: Callable[..., Run], clients_installed: dict[str, str]) -> Callable[..., Run]:
    """Run one of node/ckjs_*.js (``node``), skipped when the kafka-javascript setup step failed."""
    if "kafka-javascript" in clients_installed:
        pytest.skip(clients_installed["kafka-javascript"])
    return node


def library(run: Run) -> dict:
    """The `library` event every ckjs program prints first; the pinned versions."""
    (lib,) = run.events("library")
    assert (lib["name"], lib["version"], lib["librdkafka"]) == \
        ("@confluentinc/kafka-javascript", VERSION, LIBRDKAFKA), run.describe()
    return lib


def lows(run: Run) -> dict[int, int]:
    return {d["partition"]: d["low"] for d in run.events("watermarks")}


# ------------------------------------------------------------------ 1. admin: metadata, offsets


def test_admin_metadata_and_offsets(power, ckjs, show):
    run = ckjs("ckjs_admin_offsets.js", power.bootstrap, "topic_meters")
    show(run)
    library(run)
    (topics,) = run.events("topics")
    assert set(power.expected) <= set(topics["topics"]), run.describe()
    (md,) = run.events("metadata")
    assert md["topic"] == "topic_meters" and md["partitions"] == list(range(data.VGROUPS)), run.describe()
    assert md["leader_hosts"] == [power.bootstrap] and len(set(md["leaders"])) == 1, run.describe()
    assert md["replicas"] == md["isr"] == [[md["leaders"][0]]] * data.VGROUPS, run.describe()
    per_partition = {p: len(rs) for p, rs in data.by_partition(power.expected["topic_meters"]).items()}
    assert {d["partition"]: (d["low"], d["high"]) for d in run.events("offsets")} == \
        {p: (0, n) for p, n in per_partition.items()}, run.describe()


def test_admin_offsets_by_timestamp(power, ckjs, show, request):
    xfail_on_tansu(request, "ListOffsets by timestamp answers offset 0")
    run = ckjs("ckjs_admin_offsets.js", power.bootstrap, "topic_meters", "--ts", str(SEEK_TS))
    show(run)
    earlier = data.by_partition(r for r in power.expected["topic_meters"] if r.timestamp < SEEK_TS)
    want = {p: len(earlier.get(p, [])) for p in range(data.VGROUPS)}
    assert {d["partition"]: d["offset"] for d in run.events("ts_offsets")} == want, run.describe()


# ------------------------------------------------------------------ 2. assign() consumer


@pytest.mark.parametrize("topic", ["topic_meters", "topic_stable", "topic_db"])
def test_assign_reads_every_record_once(power, ckjs, show, topic):
    if topic not in power.expected:
        pytest.skip("WITH META topics exist only on walgate")
    run = ckjs("ckjs_assign.js", power.bootstrap, topic)
    show(run)
    library(run)
    (md,) = run.events("metadata")
    assert md["partitions"] == list(range(data.VGROUPS)) and md["brokers"] == [power.bootstrap], run.describe()
    got = records(run.json_lines())
    marks = {d["partition"]: (d["low"], d["high"]) for d in run.events("watermarks")}
    check_dense(got, lows(run))
    assert {p: hi - lo for p, (lo, hi) in marks.items()} == \
        {p: len(data.by_partition(got).get(p, [])) for p in marks}, f"end - beginning != records\n{run.describe()}"
    rows, meta = split_meta(got)
    check_exactly(rows, power.expected[topic], dense=not meta)
    if topic == "topic_db":
        created = {r.headers.get(H_TABLE) for r in meta if r.headers.get(H_META) == "create_table"}
        assert created == set(data.TABLES), f"create_table meta records for {sorted(created)}\n{run.describe()}"
    else:
        assert not meta, run.describe()
    (summary,) = run.events("summary")
    assert summary["records"] == len(got), run.describe()


# ------------------------------------------------------------------ 3. producer, every codec


def produced(codec: str, count: int = N) -> list[dict]:
    """What ckjs_produce.js writes: test_produce.py's records, the `nil` header with an empty value, as kafkajs
    (``node``) does: the binding refuses a null header value."""
    assert "node" in NO_NULL_HEADER
    return expected(("node", codec, count))


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_read_back(broker, ckjs, pyclient, show, codec):
    topic = new_topic(broker.bootstrap, f"ckjs-{codec}")
    want = produced(codec)
    run = ckjs("ckjs_produce.js", broker.bootstrap, topic, codec, str(N), timeout=90, check=False)
    show(run)
    lib = library(run)
    assert codec == "none" or codec in lib["features"], f"built without {codec}\n{run.describe()}"
    check_deliveries(run, want)
    read = read_back(pyclient, show, broker.bootstrap, topic)
    check_read_back(read, want, CREATE_TIME["ck"], run)
    if broker.name == "walgate":  # Tansu's ListOffsets(latest) is wrong after multi-record batches (FINDINGS.md)
        check_watermarks(read, want)


# ------------------------------------------------------------------ 4. group consumer (walgate only)


def group_run(ckjs, power, group: str, *args: str) -> Run:
    run = ckjs("ckjs_group.js", power.bootstrap, GROUP_TOPIC, group, *args, "--timeout", "40", timeout=60)
    assert not run.events("error"), run.describe()
    return run


def offsets(run: Run, event: str) -> dict[int, int]:
    (d,) = run.events(event)
    return {int(p): o for p, o in d["offsets"].items()}


@pytest.mark.parametrize("broker", ["walgate"], indirect=True)
def test_group_reads_all_and_commits(power, ckjs):
    want = power.expected[GROUP_TOPIC]
    ends = {p: len(rs) for p, rs in data.by_partition(want).items()}
    run = group_run(ckjs, power, group_name("ckjs"), "--until-end")
    assert all(o < 0 for o in offsets(run, "committed_at_start").values()), run.describe()  # a new group
    assigned = [e["partitions"] for e in run.events("assignment") if e["after"] == "assign"]
    assert assigned[-1] == list(range(data.VGROUPS)), run.describe()
    check_exactly(by_offset(records(run.json_lines())), want, first_offsets={p: 0 for p in range(data.VGROUPS)})
    (commit,) = run.events("committed")
    assert not commit["errors"] and offsets(run, "committed") == ends, run.describe()
    assert offsets(run, "fetched") == ends, run.describe()


@pytest.mark.parametrize("broker", ["walgate"], indirect=True)
def test_group_resumes_from_commit(power, ckjs):
    want = data.by_partition(power.expected[GROUP_TOPIC])
    ends = {p: len(rs) for p, rs in want.items()}
    group = group_name("ckjs-resume")
    first = group_run(ckjs, power, group, "--max-records", "10")
    read = records(first.json_lines())
    assert len(read) == 10, first.describe()
    committed = offsets(first, "committed")
    # committed = the position after the last record read, per partition read from
    assert committed == {p: rs[-1].offset + 1 for p, rs in data.by_partition(read).items()}, first.describe()
    # consumer.committed(): null where nothing is committed (FINDINGS.md)
    assert offsets(first, "fetched") == {p: committed.get(p) for p in range(data.VGROUPS)}, first.describe()
    check_exactly(by_offset(read), [r for p, rs in want.items() for r in rs[:committed.get(p, 0)]],
                  first_offsets={p: 0 for p in committed})

    second = group_run(ckjs, power, group, "--until-end")
    # admin.fetchOffsets(): -1001 (librdkafka's OFFSET_INVALID) where nothing is committed
    assert offsets(second, "committed_at_start") == {p: committed.get(p, -1001) for p in range(data.VGROUPS)}, \
        second.describe()
    rest = [r for p, rs in want.items() for r in rs[committed.get(p, 0):]]
    check_exactly(by_offset(records(second.json_lines())), rest,
                  first_offsets={p: committed.get(p, 0) for p in range(data.VGROUPS)})
    assert offsets(second, "fetched") == ends, second.describe()
