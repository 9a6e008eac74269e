"""The compatibility matrix: every client library x the same scenarios, against walgate (and Tansu).

Each client is driven through three programs that share one command line and the JSON lines of
clients/common.py (a reader: ``BOOTSTRAP TOPIC [--start beginning|end|<offset>|ts:<ms>] [--reset
earliest|none] [--follow N]``; a group member: ``BOOTSTRAP TOPIC GROUP [--max-records N] [--until-end]``,
SIGTERM = commit, leave, exit 0; a producer: ``BOOTSTRAP TOPIC CODEC COUNT``), so one scenario body serves
every client. kcat is wrapped by clients/kcat_read.py / kcat_group.py, which only translate its output.

Scenarios (``broker``: Tansu first, then walgate; groups, retention and the database topic are walgate's):
1. metadata and seek to end: 4 partitions led by the bootstrap broker, end - beginning = records, nothing read.
2. reading an ``AS SELECT``, an ``AS STABLE`` and a ``WITH META`` database topic from the beginning: every
   record once, dense offsets, keys / values / headers / timestamps as the rows (compat_data.py).
3. seek to a timestamp: each partition starts at its first record at or after it.
4. produce each codec the client can write, read it back with the same client: exactly what was produced;
   and read a topic confluent-kafka wrote in large batches (the batches walgate sends with sendfile).
5. a group of two members splits the 4 partitions; when one leaves, the other owns all of them; every record
   read at least once.
6. commit, close, restart: a member reads 10 records and closes; a new member of the group resumes exactly
   after them.
7. OFFSET_OUT_OF_RANGE after retention: from offset 0 with no reset policy the client reports the error and
   reads nothing; with auto.offset.reset=earliest it starts at the new log start.
8. long-poll tail: a reader waiting at the end receives a row inserted after its fetch started.

``walgate-cluster`` (the third ``broker``): the same scenarios against 3 walgate nodes over one etcd member
(livecluster.py, started once for the module), bootstrapped on node 1: ``power``'s 4 vgroups and each new topic's
partitions are placed over the three nodes by count (``power``'s and the groups' spread checked by
:func:`test_cluster_spreads_partitions_and_groups`); its rows are inserted through node 1, which forwards them to
their vgroups' nodes (its subtables' CREATE TABLE too), and each group is
coordinated by the node its id hashes to (50 coordinator partitions). In CI every client runs :data:`CLUSTER_CORE` there (metadata naming all three nodes
and ListOffsets of each partition's node, producing uncompressed and reading it back, commit / restart / resume);
with ``WALGATE_COMPAT_LONG=1`` every scenario runs. Retention (7) uses the module's single ``walgate`` only. The
consumer protocol (KIP-848), Spark's Kafka source and a transaction across nodes on a cluster: test_cluster_clients.py.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import compat_data as data
import pytest
from compat_brokers import BROKERS, LONG, SELECT, Tansu, Walgate, xfail_on_tansu
from compat_data import check_dense, check_exactly, records, split_meta
from compat_procs import COMPAT, Background, Run, run
from test_consume_retention import TOPIC as RETAINED_TOPIC
from test_consume_retention import retained  # noqa: F401 (a fixture)
from test_groups import close, events, group_name, owned, shows_log_of, wait_until
from test_produce import CODECS, N, check_read_back, check_watermarks, expected, kcat_produce, new_topic

SEEK_TS = data.BASE_TS + 2 * 60_000 + 4500  # between rows
NODE = COMPAT / "node"
OLD_LIBRDKAFKA = "librdkafka {} fails to parse Tansu's ApiVersions v3 tagged fields (see FINDINGS.md)"
CLUSTER = "walgate-cluster"
CLUSTER_CORE = {"test_metadata_and_seek_to_end", "test_produce_and_read_back[none]", "test_commit_close_restart_resume"}
"""The scenarios (and parameters) every client runs on walgate-cluster in CI; the rest with WALGATE_COMPAT_LONG=1."""
SHOWS_NO_TANSU = "test_metadata_and_seek_to_end"
"""The one test a client that cannot talk to Tansu (``Client.on_tansu``) runs there: it fails as expected; the
others are reported expected failures without running."""


@dataclass(frozen=True)
class Client:
    """A client library at one release and its three programs (``producer`` None: kcat -P, see kcat_produce)."""

    id: str
    label: str  # library and release, for docs/compatibility.md
    launcher: str  # python | python:<pyclient fixture> | node | java:<jar set>
    reader: str
    member: str
    producer: str | None
    codecs: tuple[str, ...] = CODECS
    create_time: Any = None  # the reader's timestamp_type of a CreateTime record (None: it does not print one)
    writes_as: str = "ck"  # test_produce.expected()'s producer key (which header values it can send)
    on_tansu: str | None = None  # why it cannot talk to Tansu (its tests are expected to fail there)
    stops_at_latest: bool = False  # the reader stops at ListOffsets(latest) as answered at its start
    null_header: str | None = None  # what the library hands over for a null header value


CLIENTS = [
    Client("confluent-kafka", "confluent-kafka 2.16.1 (librdkafka 2.16.0)", "python",
           "ck_assign.py", "ck_group.py", "ck_produce.py", create_time=1),
    Client("confluent-kafka-1.9", "confluent-kafka 1.9.2 (librdkafka 1.9.2)", "python:pyclient_ck192",
           "ck_assign.py", "ck_group.py", "ck_produce.py", create_time=1, on_tansu=OLD_LIBRDKAFKA.format("1.9.2")),
    Client("kafka-python", "kafka-python 3.0.12", "python",
           "kp_assign.py", "kp_group.py", "kp_produce.py", create_time=0, writes_as="kp"),
    Client("kafka-python-2.0", "kafka-python 2.0.2", "python:pyclient_kp202",
           "kp_assign.py", "kp_group.py", "kp_produce.py", create_time=0, writes_as="kp"),
    Client("aiokafka", "aiokafka 0.14.0", "python",
           "aio_assign.py", "aio_group.py", "aio_produce.py", create_time=0, writes_as="aio"),
    Client("kcat", "kcat 1.7.1 (librdkafka 2.0.2)", "python",
           "kcat_read.py", "kcat_group.py", None, create_time="create", writes_as="kcat",
           on_tansu=OLD_LIBRDKAFKA.format("2.0.2")),
    Client("kafkajs", "kafkajs 2.2.4", "node",
           "kjs_read.js", "kjs_group.js", "produce.js", codecs=("none", "gzip"), writes_as="node",
           stops_at_latest=True),
    Client("kafka-javascript", "@confluentinc/kafka-javascript 1.10.1", "node",
           "ckjs_assign.js", "ckjs_group.js", "ckjs_produce.js", writes_as="node", null_header=""),
    Client("java-4.3", "Java kafka-clients 4.3.0", "java:4.3.0",
           "Assign.java", "GroupMember.java", "Producer.java", create_time="CreateTime", writes_as="java-4.3.0",
           stops_at_latest=True),
    Client("java-3.9", "Java kafka-clients 3.9.1", "java:3.9",
           "Assign.java", "GroupMember.java", "Producer.java", create_time="CreateTime", writes_as="java-4.3.0",
           stops_at_latest=True),
]


@dataclass(frozen=True)
class Driver:
    """Runs one client's programs: ``run`` to completion, ``start`` in the background (stopped by PID)."""

    client: Client
    argv: Callable[..., list[str]]
    background: Callable[[list[str]], Background]

    def run(self, program: str, *args: str, timeout: float = 90) -> Run:
        return run(self.argv(program, *args), timeout, check=False)

    def start(self, program: str, *args: str) -> Background:
        return self.background(self.argv(program, *args))

    def read(self, bootstrap: str, topic: str, *args: str, timeout: float = 90) -> Run:
        return self.run(self.client.reader, bootstrap, topic, *args, timeout=timeout)


@pytest.fixture(scope="module", params=[*BROKERS, CLUSTER])
def broker(request: pytest.FixtureRequest) -> Walgate | Tansu:
    """conftest's ``broker`` and the 3-node cluster (``walgate_cluster``), each started once for the module; a
    group scenario's failure shows its log (a walgate node's: the cluster's first)."""
    server = request.getfixturevalue("walgate_cluster" if request.param == CLUSTER else request.param)
    if isinstance(server, Walgate):
        shows_log_of(server)
    return server


def cluster_scenario(request: pytest.FixtureRequest) -> str:
    """The running test's :data:`CLUSTER_CORE` key: its name with its parameters other than broker and client."""
    params = getattr(request.node, "callspec", None)
    rest = [str(v) for k, v in (params.params.items() if params else []) if k not in ("broker", "client")]
    return request.node.originalname + (f"[{'-'.join(rest)}]" if rest else "")


@pytest.fixture(params=CLIENTS, ids=[c.id for c in CLIENTS])
def client(request: pytest.FixtureRequest, background: Callable[[list[str]], Background]) -> Driver:
    c: Client = request.param
    if (not LONG and "broker" in request.fixturenames and request.getfixturevalue("broker").name == CLUSTER
            and cluster_scenario(request) not in CLUSTER_CORE):
        pytest.skip("walgate-cluster runs this scenario with WALGATE_COMPAT_LONG=1 (CI runs CLUSTER_CORE)")
    kind, _, detail = c.launcher.partition(":")
    if kind == "python" and detail:
        argv = request.getfixturevalue(detail).argv
    elif kind == "python":
        if c.id == "kcat":
            request.getfixturevalue("kcat")  # skips when kcat is not installed
        argv = lambda program, *args: [sys.executable, str(COMPAT / "clients" / program), *args]  # noqa: E731
    elif kind == "node":
        request.getfixturevalue("node")  # installs node_modules, skips without node
        if c.id == "kafka-javascript" and "kafka-javascript" in request.getfixturevalue("clients_installed"):
            pytest.skip(request.getfixturevalue("clients_installed")["kafka-javascript"])
        argv = lambda program, *args: ["node", str(NODE / program), *args]  # noqa: E731
    else:
        java_argv = request.getfixturevalue("java_argv")
        argv = lambda program, *args: java_argv(program, *args, clients=detail)  # noqa: E731
    if c.on_tansu and "broker" in request.fixturenames and request.getfixturevalue("broker").name == "tansu":
        if request.node.originalname != SHOWS_NO_TANSU:  # each would wait out its client's timeouts (~1 min)
            pytest.xfail(f"Tansu: {c.on_tansu}; shown by {SHOWS_NO_TANSU}, not run again")
        request.applymarker(pytest.mark.xfail(reason=f"Tansu: {c.on_tansu}", strict=False))
    return Driver(c, argv, background)


def walgate_only(power) -> None:
    if power.broker.name == "tansu":
        pytest.skip("walgate only (Tansu has no TDengine topics, retention policy or working group coordinator here)")


def ok(run: Run) -> Run:
    assert run.returncode == 0 and not run.events("error"), f"client failed:\n{run.describe()}"
    return run


def marks(run: Run) -> dict[int, tuple[int, int]]:
    return {d["partition"]: (d["low"], d["high"]) for d in run.events("watermarks")}


# ------------------------------------------------------------------ 0. the cluster's spread (walgate-cluster only)


def test_cluster_spreads_partitions_and_groups(power):
    """power's 4 vgroups are led by all three nodes, and group ids are coordinated by all three (FindCoordinator,
    through confluent-kafka's DescribeConsumerGroups): what makes the scenarios below cross nodes."""
    if power.broker.name != CLUSTER:
        pytest.skip("walgate-cluster only")
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    from coordinator_admin import described_groups

    admin = AdminClient({"bootstrap.servers": power.bootstrap})
    md = admin.list_topics("topic_meters", timeout=15)
    leaders = {p.id: p.leader for p in md.topics["topic_meters"].partitions.values()}
    assert sorted(leaders) == list(range(data.VGROUPS)) and set(leaders.values()) == {1, 2, 3}, leaders
    groups = [f"matrix-spread-{i}" for i in range(12)]
    described = described_groups(power.bootstrap, groups, 30)
    assert len(described) == len(groups), described
    assert {d.state for d in described.values()} == {ConsumerGroupState.DEAD}  # no such group yet: asked all the same
    assert {d.coordinator.id for d in described.values()} == {1, 2, 3}, \
        {g: d.coordinator.id for g, d in described.items()}


# ------------------------------------------------------------------ 1-3. metadata, topic kinds, seeks


def test_metadata_and_seek_to_end(power, client, show):
    read = ok(client.read(power.bootstrap, "topic_meters", "--start", "end"))
    show(read)
    (md,) = read.events("metadata")
    assert md["partitions"] == list(range(data.VGROUPS)) and md["brokers"] == power.broker.brokers, read.describe()
    counts = {p: len(rs) for p, rs in data.by_partition(power.expected["topic_meters"]).items()}
    assert {p: hi - lo for p, (lo, hi) in marks(read).items()} == counts, f"end - beginning:\n{read.describe()}"
    assert not read.events("record"), f"records read from the end:\n{read.describe()}"


@pytest.mark.parametrize("topic", ["topic_meters", "topic_stable", "topic_db"])
def test_read_topic_from_beginning(power, client, show, topic):
    if topic == "topic_db":
        walgate_only(power)
    read = ok(client.read(power.bootstrap, topic, "--start", "beginning"))
    show(read)
    got, lows = records(read.json_lines()), {p: lo for p, (lo, _) in marks(read).items()}
    if topic == "topic_db":
        check_dense(got, lows)
        rows, meta = split_meta(got)
        check_exactly(rows, power.expected[topic], dense=False)
        assert len(meta) >= len(data.TABLES), f"create_table meta records missing:\n{read.describe()}"
    else:
        check_exactly(got, power.expected[topic], first_offsets=lows)


def test_seek_to_timestamp(power, client, show, request):
    xfail_on_tansu(request, "ListOffsets by timestamp answers offset 0")
    read = ok(client.read(power.bootstrap, "topic_meters", "--start", f"ts:{SEEK_TS}"))
    show(read)
    want_all = power.expected["topic_meters"]
    earlier = data.by_partition(r for r in want_all if r.timestamp < SEEK_TS)
    check_exactly(records(read.json_lines()), [r for r in want_all if r.timestamp >= SEEK_TS],
                  first_offsets={p: len(earlier.get(p, [])) for p in range(data.VGROUPS)})


# ------------------------------------------------------------------ 4. produce and read back, every codec


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_read_back(broker, client, codec, tmp_path, show, request):
    c = client.client
    if codec not in c.codecs:
        pytest.skip(f"{c.id} cannot write {codec} here (FINDINGS.md)")
    if c.stops_at_latest:  # and the producer sends several batches per partition
        xfail_on_tansu(request, "ListOffsets(latest) answers the last batch's base offset + 1 (FINDINGS.md)")
    topic = new_topic(broker.bootstrap, f"matrix-{c.id}-{codec}")
    started = int(time.time() * 1000)
    if c.producer is None:
        produced = kcat_produce(request.getfixturevalue("kcat"), broker.bootstrap, topic, codec, tmp_path)
    else:
        produced = [client.run(c.producer, broker.bootstrap, topic, codec, str(N))]
    window = (started, int(time.time() * 1000)) if c.producer is None else None
    for p in produced:
        show(p)
        assert p.returncode == 0 and not p.events("error"), f"producer failed:\n{p.describe()}"
    read = client.read(broker.bootstrap, topic, "--start", "beginning")
    show(read)
    want = expected((c.writes_as, codec, N))
    check_read_back(read, want, c.create_time, *produced, ts_window=window)
    if broker.name != "tansu":
        check_watermarks(read, want)


LARGE = 6000  # records of ~80 B: batches of hundreds of KiB, which walgate sends with sendfile (>= 16 KiB)


@pytest.fixture(scope="module")
def large_batches(broker, pyclient) -> str:
    """A topic confluent-kafka wrote in large batches (1 MiB batch.size, 100 ms linger, no compression)."""
    if broker.name == CLUSTER and not LONG:
        pytest.skip("walgate-cluster runs this scenario with WALGATE_COMPAT_LONG=1 (CI runs CLUSTER_CORE)")
    topic = new_topic(broker.bootstrap, "matrix-large")
    run = pyclient("ck_produce.py", broker.bootstrap, topic, "none", str(LARGE), "-X", "batch.size=1048576",
                   "-X", "linger.ms=100", timeout=90, check=False)
    assert run.returncode == 0 and not run.events("error"), f"producer failed:\n{run.describe()}"
    return topic


def test_read_large_batches(broker, client, large_batches, show, request):
    xfail_on_tansu(request, "ListOffsets(latest) answers the last batch's base offset + 1 (FINDINGS.md); the "
                            "readers stop there, and each partition has several batches")
    read = client.read(broker.bootstrap, large_batches, "--start", "beginning", timeout=120)
    show(read)
    want = expected(("ck", "none", LARGE))
    for r in want:
        r["headers"] = [[k, client.client.null_header if v is None else v] for k, v in r["headers"]]
    check_read_back(read, want, client.client.create_time)
    if broker.name != "tansu":
        check_watermarks(read, want)


# ------------------------------------------------------------------ 5-6. groups


def test_group_two_members_then_one(power, client):
    walgate_only(power)
    group = group_name(client.client.id)
    args = (power.bootstrap, "topic_meters", group, "--timeout", "150")
    a = client.start(client.client.member, *args)
    wait_until(lambda: owned(a) == list(range(data.VGROUPS)), 60, "the first member owns all partitions", a)
    b = client.start(client.client.member, *args)

    def split() -> bool:
        pa, pb = owned(a), owned(b)
        return bool(pa and pb) and sorted(pa + pb) == list(range(data.VGROUPS))

    wait_until(split, 60, "the two members split the partitions", a, b)
    close(b)
    wait_until(lambda: owned(a) == list(range(data.VGROUPS)), 60, "the survivor owns all partitions again", a, b)
    close(a)
    got = {(r.partition, r.offset): r for bg in (a, b) for r in records(events(bg, "record"))}
    want = power.expected["topic_meters"]
    check_exactly(sorted(got.values(), key=lambda r: (r.partition, r.offset)), want,
                  first_offsets={p: 0 for p in range(data.VGROUPS)})


def test_commit_close_restart_resume(power, client):
    walgate_only(power)
    group = group_name(client.client.id)
    first = ok(client.run(client.client.member, power.bootstrap, "topic_meters", group, "--max-records", "10",
                          "--timeout", "60"))
    read_first = records(first.json_lines())
    assert len(read_first) == 10, first.describe()
    second = ok(client.run(client.client.member, power.bootstrap, "topic_meters", group, "--until-end",
                           "--timeout", "60"))
    read_second = records(second.json_lines())
    resumed = {p: rs[0].offset for p, rs in data.by_partition(read_second).items()}
    after = {p: rs[-1].offset + 1 for p, rs in data.by_partition(read_first).items()}
    assert all(resumed[p] == after[p] for p in after if p in resumed), \
        f"did not resume after the commit: first read ended at {after}, restart began at {resumed}\n" \
        f"{first.describe()}\n{second.describe()}"
    check_exactly(sorted(read_first + read_second, key=lambda r: (r.partition, r.offset)),
                  power.expected["topic_meters"], first_offsets={p: 0 for p in range(data.VGROUPS)})


# ------------------------------------------------------------------ 7-8. out of range after retention, tail


def test_offset_out_of_range_after_retention(walgate, request, client):
    low, high = request.getfixturevalue("retained")
    strict = client.read(walgate.bootstrap, RETAINED_TOPIC, "--start", "0", "--reset", "none", timeout=120)
    assert strict.returncode == 0 and strict.events("error") and not strict.events("record"), \
        f"no out-of-range error from offset 0 < log start {low} without a reset policy:\n{strict.describe()}"
    reset = ok(client.read(walgate.bootstrap, RETAINED_TOPIC, "--start", "0", "--reset", "earliest", timeout=120))
    offsets = [d["offset"] for d in reset.events("record")]
    assert offsets == list(range(low, high)), \
        f"reset earliest read {offsets[:3]}...{offsets[-3:]}, expected {low}..{high - 1}\n{reset.describe()[-3000:]}"


def test_long_poll_tail(broker, client, show):
    topic = f"tail_{client.client.id.replace('-', '_').replace('.', '_')}"
    db = f"db_{topic}"
    broker.load_meters(db, {topic: SELECT}, [])
    tail = client.start(client.client.reader, broker.bootstrap, topic, "--start", "0", "--follow", "1",
                        "--timeout", "60")
    tail.wait_for(lambda bg: events(bg, "ready"), 45, "the reader's `ready`")
    time.sleep(1.0)  # its fetch is now waiting at the end of the empty topic
    row = data.Row("d1003", data.BASE_TS + 3_600_000, 12.5, 230, 0.5)
    inserted = time.monotonic()
    broker.append(db, topic, [row])
    tail.wait_for(lambda bg: events(bg, "record"), 15, "the row inserted after the poll started")
    latency = time.monotonic() - inserted
    tail.wait_for(lambda bg: bg.proc.poll() is not None, 15, "the reader's exit after one record")
    show(tail)
    (want,) = data.expected_records([row], data.SELECT_COLUMNS, db=db)
    check_exactly(records(events(tail, "record")), [want], first_offsets={want.partition: 0})
    print(f"{broker.name} {client.client.id}: insert -> receipt {latency * 1000:.0f} ms")
