"""walgate only: Kafka Connect 3.9 in distributed mode (connect_worker.py), unmodified, against a live walgate.

* two workers share the connectors and their tasks; ``kill -9`` one and the other runs them all, and they work
  (at least once: a line the killed worker produced before its offsets were flushed is produced again, as Kafka
  Connect without exactly-once support does);
* a FileStreamSource writes a file's lines into a topic; after a worker restart no line is lost or repeated;
* a FileStreamSink exports a TDengine ``AS SELECT`` topic to a file; the sink's committed offsets are only ever
  behind what it has written (every record below a committed offset is in the file);
* ``exactly.once.source.support=enabled``: a source connector with ``exactly.once.support=required`` produces in
  transactions; a worker killed with ``kill -9`` mid-stream and restarted leaves every line exactly once for a
  ``read_committed`` reader. Needs walgate's transactions: skipped (saying so) while walgate refuses them.

Connect creates its three internal topics with ``cleanup.policy=compact`` and refuses to start without it.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import compat_data as data
import pytest
import setup_clients
from compat_brokers import SELECT, Walgate, committed_offsets, expected, read_records, transactions_refused
from compat_procs import Run
from connect_worker import ConnectCluster, ConnectError, ConnectWorker

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
MOVE_TIMEOUT = 60.0  # a killed worker's session timeout + scheduled.rebalance.max.delay.ms + restarts
FLOW_TIMEOUT = 45.0


@pytest.fixture(autouse=True)
def server_log_clean(walgate: Walgate) -> Iterator[None]:
    """After each test: no traceback in walgate's log (a traceback in the server log is a bug)."""
    yield
    log = walgate.log()
    assert "Traceback" not in log, log[-4000:]


@pytest.fixture
def connect(walgate: Walgate, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., ConnectCluster]]:
    """``connect(**worker_settings)``: a Connect group of its own (group id and internal topics named after the
    test), workers started with ``.start(name)``, all stopped by PID at the end; the end of their logs is printed
    then (pytest shows it for a failed test)."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed (.ci/run installs openjdk-17-jdk-headless)")
    if (reason := setup_clients.setup(setup_clients.CONNECT)) is not None:
        pytest.skip(reason)
    clusters: list[ConnectCluster] = []

    def make(**settings: str) -> ConnectCluster:
        group = f"connect-{request.node.name}-{len(clusters)}".replace("[", "-").replace("]", "")
        cluster = ConnectCluster(walgate.bootstrap, tmp_path / group, group, dict(settings))
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop_all()
        print(cluster.logs())


def status(worker: ConnectWorker, name: str) -> dict | None:
    try:
        return worker.request("GET", f"/connectors/{name}/status")
    except ConnectError as exc:
        if exc.status == 404:
            return None
        raise


def placements(worker: ConnectWorker, names: list[str]) -> dict[str, str] | None:
    """connector or ``connector/task`` -> the worker running it, once every one of them is RUNNING (else None)."""
    out = {}
    for name in names:
        st = status(worker, name)
        if st is None or st["connector"]["state"] != "RUNNING" or not st["tasks"]:
            return None
        out[name] = st["connector"]["worker_id"]
        for task in st["tasks"]:
            if task["state"] != "RUNNING":
                return None
            out[f"{name}/{task['id']}"] = task["worker_id"]
    return out


def source_config(path: Path, topic: str, **extra: str) -> dict[str, str]:
    return {"connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(path), "topic": topic,
            "topic.creation.default.replication.factor": "1", "topic.creation.default.partitions": "1", **extra}


def wait_lines(cluster: ConnectCluster, pyclient: Callable[..., Run], walgate: Walgate, topic: str, count: int,
               *args: str, last: str | None = None) -> list[str]:
    """The topic's record values once it holds at least ``count`` records, and ends with ``last`` when given
    (bounded wait)."""
    got: list[str] = []

    def enough() -> bool:
        nonlocal got
        got = [r["value"] for r in read_records(pyclient, walgate.bootstrap, topic, *args)]
        return len(got) >= count and (last is None or got[-1] == last)

    try:
        cluster.wait(enough, FLOW_TIMEOUT, f"{count} records in {topic}")
    except AssertionError as exc:
        raise AssertionError(f"{len(got)} records in {topic}, not {count}: {exc}") from None
    return got


def append_lines(path: Path, lines: list[str]) -> None:
    with path.open("a") as f:
        f.write("".join(line + "\n" for line in lines))


def test_two_workers_share_connectors_and_tasks_and_rebalance_when_one_is_killed(connect, walgate, pyclient, tmp_path):
    cluster = connect()
    w1, w2 = cluster.start("w1"), cluster.start("w2")
    names = [f"spread-{i}" for i in range(4)]
    for i, name in enumerate(names):
        (tmp_path / f"{name}.txt").write_text(f"{name} line 0\n")
        w1.request("PUT", f"/connectors/{name}/config", source_config(tmp_path / f"{name}.txt", f"spread_{i}"))
    placed = cluster.wait(lambda: placements(w1, names), MOVE_TIMEOUT, "every connector and task RUNNING")
    assert set(placed.values()) == {w1.worker_id, w2.worker_id}, f"not spread over both workers: {placed}"

    w2.kill()
    moved = cluster.wait(lambda: (p := placements(w1, names)) and set(p.values()) == {w1.worker_id} and p,
                         MOVE_TIMEOUT, f"the connectors and tasks of the killed worker {w2.worker_id} moved to w1")
    assert len(moved) == 2 * len(names), moved
    for name in names:  # every task works after the move: a new line arrives in each topic
        append_lines(tmp_path / f"{name}.txt", [f"{name} line 1"])
    for i, name in enumerate(names):
        got = wait_lines(cluster, pyclient, walgate, f"spread_{i}", 2, last=f"{name} line 1")
        # at least once: line 0 repeats when the killed worker had not yet flushed its offset
        assert [line for j, line in enumerate(got) if not j or got[j - 1] != line] == \
            [f"{name} line 0", f"{name} line 1"], (name, got)
    assert "ERROR" not in w1.log(), w1.log()[-6000:]


def test_file_source_neither_loses_nor_repeats_a_line_across_a_worker_restart(connect, walgate, pyclient, tmp_path):
    cluster = connect()
    worker = cluster.start("w1")
    path, topic = tmp_path / "lines.txt", "file_lines"
    lines = [f"line {i:04d} {'x' * (i % 17)}" for i in range(600)]
    append_lines(path, lines[:300])
    worker.request("PUT", "/connectors/lines/config", source_config(path, topic))
    wait_lines(cluster, pyclient, walgate, topic, 300)

    worker.stop()  # SIGTERM: the task stops, its last offsets are flushed
    append_lines(path, lines[300:450])
    worker = cluster.start("w1-again")
    append_lines(path, lines[450:])
    got = wait_lines(cluster, pyclient, walgate, topic, len(lines))
    time.sleep(2)  # one more offset flush interval and poll: a repeated line would show up now
    got = wait_lines(cluster, pyclient, walgate, topic, len(lines))
    assert got == lines, _diff(got, lines)


def test_file_sink_exports_a_tdengine_select_topic_committing_only_what_it_wrote(connect, walgate, pyclient, tmp_path):
    db, topic, group = "connect_db", "connect_meters", "connect-export"  # Connect's sink group: connect-<name>
    rows = data.meter_rows(steps=12)
    first, later = rows[:48], rows[48:]
    walgate.load_meters(db, {topic: SELECT}, first)
    cluster = connect()
    worker = cluster.start("w1")
    out = tmp_path / "export.txt"
    worker.request("PUT", "/connectors/export/config",
                   {"connector.class": FILE_SINK, "tasks.max": "2", "topics": topic, "file": str(out)})
    where: dict[str, tuple[int, int]] = {}  # each record's value (the line the sink writes) -> (partition, offset)
    checks = 0

    def written() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    def committed_behind_written() -> dict[int, int]:
        """The committed offsets, after checking every record below them is in the file (read after them)."""
        nonlocal checks
        committed = committed_offsets(walgate.bootstrap, group, topic)
        lines = set(written())
        for value, (partition, offset) in where.items():
            assert offset >= committed.get(partition, 0) or value in lines, (
                f"p{partition}@{offset} is below the committed offset {committed[partition]} but not in the "
                f"file ({len(lines)} lines): {value}")
        checks += 1
        return committed

    for step, batch in enumerate((first, later)):
        if step:
            walgate.append(db, topic, batch)
        records = read_records(pyclient, walgate.bootstrap, topic)
        where.update((r["value"], (r["partition"], r["offset"])) for r in records)
        cluster.wait(lambda: committed_behind_written() is not None and len(written()) >= len(where),
                     FLOW_TIMEOUT, f"{len(where)} lines exported")

    assert sorted(written()) == sorted(where), "the file is not the topic's records, each once"
    exported = sorted(_normal(json.loads(line)) for line in written())
    assert exported == sorted(_normal(r.value) for r in expected(SELECT, rows, db, data.VGROUPS)), \
        "the export is not the rows the topic selects"
    ends = {p: max(o for q, o in where.values() if q == p) + 1 for p, _ in where.values()}
    cluster.wait(lambda: all(committed_behind_written().get(p, -1) >= end for p, end in ends.items()),
                 FLOW_TIMEOUT, f"the sink's committed offsets at the end of the topic {ends}")
    assert checks >= 3


def test_exactly_once_source_support(connect, walgate, pyclient, tmp_path):
    if (refusal := transactions_refused(walgate.bootstrap)) is not None:
        pytest.skip(f"needs transactions, which this walgate refuses: {refusal}")
    cluster = connect(**{"exactly.once.source.support": "enabled"})
    worker = cluster.start("w1")
    path, topic = tmp_path / "eos.txt", "eos_lines"
    lines = [f"eos {i:05d}" for i in range(3000)]
    append_lines(path, lines[:1500])
    worker.request("PUT", "/connectors/eos/config",
                   source_config(path, topic, **{"exactly.once.support": "required",
                                                 "transaction.boundary": "poll"}))
    wait_lines(cluster, pyclient, walgate, topic, 200, "--isolation", "read_committed")
    worker.kill()  # mid-stream: an open transaction is aborted, committed ones stand with their offsets
    append_lines(path, lines[1500:])
    worker = cluster.start("w1-again")
    got = wait_lines(cluster, pyclient, walgate, topic, len(lines), "--isolation", "read_committed")
    assert got == lines, _diff(got, lines)
    assert status(worker, "eos")["tasks"][0]["state"] == "RUNNING"


def _normal(value: dict) -> str:
    """A row as comparable text: numbers as floats rounded to 4 places (a FLOAT column's 11.0 is printed 11)."""
    return json.dumps({k: round(float(v), 4) if isinstance(v, int | float) else v for k, v in value.items()},
                      sort_keys=True)


def _diff(got: list[str], want: list[str]) -> str:
    repeated = len(got) - len(set(got))
    missing = [line for line in want if line not in set(got)]
    return f"read {len(got)} lines, expected {len(want)}: {repeated} repeated, missing {missing[:10]}"
