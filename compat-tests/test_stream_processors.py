"""walgate only: Python stream processors keep their state in walgate (compacted changelogs, transactions).

* Quix Streams 3.28 (clients/quix_windows.py), ``processing_guarantee="exactly-once"``: per-subtable tumbling
  windows (COUNT, SUM(voltage)) over a TDengine ``AS STABLE`` topic; the application is killed with SIGKILL while
  rows arrive and restarted: every window is output exactly once (for a ``read_committed`` reader) and equals what
  the database answers to ``SELECT tbname, _wstart, COUNT(*), SUM(voltage) ... PARTITION BY tbname INTERVAL(2m)``.
  Needs walgate's transactions: skipped (saying so) while walgate refuses them.
* faust-streaming 0.15 (clients/faust_counts.py): a table counting records per key, backed by its compacted
  changelog, survives a worker restart: the counts continue from the right values.

Both libraries are installed with their own dependencies under .cache/py/ (setup_clients.PY_APPS; quixstreams pins
confluent-kafka < 2.13) and run as programs with that directory first on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import compat_data as data
import pytest
import setup_clients
from compat_brokers import STABLE, Walgate, committed_offsets, read_records, transactions_refused
from compat_procs import Background, Run

CLIENTS = Path(__file__).resolve().parent / "clients"
QUIX, FAUST = "quixstreams-3.28.1", "faust-streaming-0.15.3"
WINDOW_MS = 120_000  # INTERVAL(2m)
FLOW_TIMEOUT = 40.0


def app_argv(step: str, script: str, *args: str) -> list[str]:
    """The command line running compat-tests/clients/``script`` on the library of setup_clients step ``step``."""
    if (reason := setup_clients.setup(step)) is not None:
        pytest.skip(reason)
    path = os.pathsep.join(filter(None, [str(setup_clients.py_target(step)), os.environ.get("PYTHONPATH")]))
    return ["/usr/bin/env", f"PYTHONPATH={path}", sys.executable, str(CLIENTS / script), *args]


@pytest.fixture(autouse=True)
def server_log_clean(walgate: Walgate) -> Iterator[None]:
    """After each test: no traceback in walgate's log (a traceback in the server log is a bug)."""
    yield
    log = walgate.log()
    assert "Traceback" not in log, log[-4000:]


@pytest.fixture
def apps() -> Iterator[Callable[[list[str]], Background]]:
    """Start an application (stopped by PID at the end of the test)."""
    started: list[Background] = []

    def start(argv: list[str]) -> Background:
        started.append(Background.start(argv))
        return started[-1]

    yield start
    for app in started:
        app.stop()


def wait(predicate: Callable[[], object], timeout: float, what: str | Callable[[], str], *apps: Background) -> None:
    """Poll ``predicate`` until true; fail (showing ``what``, called if a function, and the apps' output) after
    ``timeout`` s or when an app exited."""
    deadline = time.monotonic() + timeout
    while not predicate():
        exited = [app for app in apps if app.proc.poll() is not None]
        if exited or time.monotonic() > deadline:
            pytest.fail(f"{what() if callable(what) else what}: " + ("the application exited" if exited else f"not within {timeout} s") + "\n"
                        + "\n".join(app.describe() for app in apps))
        time.sleep(0.25)


def events(app: Background, name: str) -> list[dict]:
    out = []
    for line in list(app.out):
        if line.startswith("{"):
            d = json.loads(line)
            if d.get("event") == name:
                out.append(d)
    return out


# ------------------------------------------------------------------------------------------------- Quix Streams

def windows_read(pyclient: Callable[..., Run], walgate: Walgate, topic: str) -> list[tuple[str, int, int, int]]:
    """(subtable, window start ms, count, sum) of every committed window result in ``topic`` (none before it
    exists)."""
    out = []
    for r in read_records(pyclient, walgate.bootstrap, topic, "--isolation", "read_committed"):
        v = json.loads(r["value"])
        assert v["end"] - v["start"] == WINDOW_MS, r
        out.append((r["key"], v["start"], v["count"], v["sum"]))
    return out


def windows_of_database(walgate: Walgate, db: str, before_ms: int) -> list[tuple[str, int, int, int]]:
    answer = walgate.sql(f"SELECT tbname, _wstart, COUNT(*), SUM(voltage) FROM {db}.{data.STABLE} "
                         f"PARTITION BY tbname INTERVAL({WINDOW_MS // 60_000}m)")
    out = []
    for table, start, count, total in answer["data"]:
        start_ms = int(datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp() * 1000)
        if start_ms < before_ms:
            out.append((table, start_ms, count, total))
    return sorted(out)


def test_quix_exactly_once_windows_over_a_tdengine_topic_survive_sigkill(walgate, pyclient, apps, tmp_path):
    if (refusal := transactions_refused(walgate.bootstrap)) is not None:
        pytest.skip(f"needs transactions, which this walgate refuses: {refusal}")
    db, rows_topic, out_topic, group = "quix", "quix_rows", "quix_windows", "quix-app"
    rows = data.meter_rows(steps=30)  # 8 subtables, a row a minute each: 15 two-minute windows per subtable
    per_phase = len(rows) // 3
    closing_ms = data.BASE_TS + 10 * 3_600_000  # a last row per subtable, hours later, closes its last windows
    closers = [data.Row(t, closing_ms + i, 1.0, 1, 0.5) for i, t in enumerate(data.TABLES)]
    argv = app_argv(QUIX, "quix_windows.py", walgate.bootstrap, rows_topic, out_topic, group, str(tmp_path / "state"),
                    "--window-ms", str(WINDOW_MS))

    walgate.load_meters(db, {rows_topic: STABLE}, rows[:per_phase])
    first = apps(argv)
    wait(lambda: windows_read(pyclient, walgate, out_topic), FLOW_TIMEOUT, "the first windows output", first)
    second_phase = rows[per_phase:2 * per_phase]
    walgate.append(db, rows_topic, second_phase[:len(second_phase) // 2])
    first.proc.kill()  # SIGKILL while it processes them
    first.proc.wait(10)
    walgate.append(db, rows_topic, second_phase[len(second_phase) // 2:])
    second = apps(argv)
    walgate.append(db, rows_topic, rows[2 * per_phase:] + closers)

    want = windows_of_database(walgate, db, closing_ms - closing_ms % WINDOW_MS)
    assert len(want) == 15 * len(data.TABLES), want
    wait(lambda: len(windows_read(pyclient, walgate, out_topic)) >= len(want), 2 * FLOW_TIMEOUT,
         f"{len(want)} windows output", second)
    time.sleep(2)  # two more commit intervals: a window output twice would be visible now
    got = windows_read(pyclient, walgate, out_topic)
    assert sorted(got) == want, (f"{len(got)} windows output, {len(set(got))} distinct, {len(want)} expected; "
                                 f"missing {sorted(set(want) - set(got))[:10]}, unexpected "
                                 f"{sorted(set(got) - set(want))[:10]}\n{second.describe()}")


# ------------------------------------------------------------------------------------------------ faust-streaming

def produce_words(walgate: Walgate, topic: str, words: list[str]) -> None:
    """One record per word, keyed by the word (confluent-kafka's default partitioner: a key keeps its partition)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": walgate.bootstrap, "linger.ms": 5})
    for i, word in enumerate(words):
        producer.produce(topic, f"{word} {i}".encode(), word.encode())
    assert producer.flush(30) == 0


def test_faust_table_on_a_compacted_changelog_survives_a_restart(walgate, apps, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, app_id, partitions = "faust_words", "faust-counts", 2
    admin = AdminClient({"bootstrap.servers": walgate.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=20)
    keys = ["alpha", "beta", "gamma", "delta", "epsilon"]
    before = [keys[(i * 7) % 5 if i % 3 else 0] for i in range(300)]
    after = [keys[(i * 3) % 5 if i % 4 else 1] for i in range(200)]
    argv = app_argv(FAUST, "faust_counts.py", walgate.bootstrap, topic, app_id, str(tmp_path / "faust"),
                    str(partitions))

    def last_counts(app: Background) -> dict[str, int]:
        return {e["key"]: e["count"] for e in events(app, "count")}

    produce_words(walgate, topic, before)
    want_before = {k: before.count(k) for k in keys}
    first = apps(argv)
    wait(lambda: last_counts(first) == want_before, FLOW_TIMEOUT,
         lambda: f"counts {want_before}, have {last_counts(first)}", first)
    counted = events(first, "count")
    assert len(counted) == len(before), "a record was counted twice"
    ends = {p: max(e["offset"] for e in counted if e["partition"] == p) + 1 for p in range(partitions)}
    # faust acknowledges a record once its agent asks for the next one: the offsets of the last records are
    # committed a moment later (stopping before that would have them counted again: at-least-once)
    wait(lambda: committed_offsets(walgate.bootstrap, app_id, topic) == ends, FLOW_TIMEOUT,
         lambda: f"offsets {ends} committed, have {committed_offsets(walgate.bootstrap, app_id, topic)}", first)
    first.stop()  # SIGTERM: faust leaves the group

    # the new records are produced once the restarted worker is ready: faust resumes its stream partitions before it
    # seeks them to their committed offsets (faust/tables/recovery.py, _resume_streams), so records fetched before
    # that seek would be fetched again after it, and the last one of each partition counted twice (FINDINGS.md)
    second = apps(argv)
    wait(lambda: events(second, "ready"), FLOW_TIMEOUT, "the restarted worker ready", second)
    produce_words(walgate, topic, after)
    wait(lambda: len({(e["partition"], e["offset"]) for e in events(second, "count")}) == len(after), FLOW_TIMEOUT,
         lambda: f"the {len(after)} new records counted, have {len(events(second, 'count'))} counts", second)
    time.sleep(2)  # two commit intervals more: a record counted twice would be visible now
    counted = events(second, "count")
    assert len(counted) == len(after), f"{len(counted) - len(after)} records counted twice"
    assert all(e["offset"] >= ends[e["partition"]] for e in counted), "a record counted before the stop came again"
    firsts = {k: next(e["count"] for e in counted if e["key"] == k) for k in keys}
    assert firsts == {k: want_before[k] + 1 for k in keys}, f"the table did not continue from its changelog: {firsts}"
    for k in keys:  # every update continues the table's last value
        mine = [e["count"] for e in counted if e["key"] == k]
        assert mine == list(range(want_before[k] + 1, want_before[k] + 1 + len(mine))), (k, mine)
