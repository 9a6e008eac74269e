"""An old kafka-python that still sees use: 2.0.2 (2020), driving the same client programs as the current 3.x.

``setup_clients.py`` installs it into ``.cache/py/kafka-python-2.0.2``; the ``pyclient_kp202`` fixture runs
``clients/kp_*.py`` with that directory first on PYTHONPATH, after printing the kafka-python it imported (a
``library`` event: every run here asserts it was 2.0.2). 2.0.2 sends no ApiVersions-driven requests: it guesses a
broker version from the ApiVersions answer (``check_version``) and picks each request's version from that guess.

1. Version probe: the guess is at least 2.1 (record batches v2 with headers, Produce v7) and every request
   version 2.0.2 then sends is one the broker advertises.
2. assign() of the `power` topics: every row exactly once, watermarks; from a timestamp; from the end
   (test_consume_assign.py's scenarios, run on kafka-python 2.0.2).
3. Produce with each codec 2.0.2 can write here (its snappy / zstd need python-snappy / zstandard: skipped when
   they cannot be imported), read back by confluent-kafka (ck_assign.py) and by 2.0.2's own consumer.
4. Groups (walgate only, as test_groups.py): two members split the 4 partitions (range), the survivor takes
   all; subscribe reads everything and committed() answers the commit; commit after 10 records, a new member
   resumes exactly there.

Scenarios 1-3 run on Tansu first, then walgate (the ``broker`` fixture), like the tests they mirror.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import compat_data as data
import pytest
import setup_clients
import test_consume_assign as assign_scenarios
import test_groups as groups
from compat_data import check_exactly, records
from compat_procs import run
from test_groups import TOPIC, by_offset, close, events, group_name, owned, two_members_split, wait_until
from test_produce import (
    CODECS,
    CREATE_TIME,
    PARTITIONS,
    N,
    check_deliveries,
    check_read_back,
    check_watermarks,
    expected,
    new_topic,
    read_back,
)

VERSION = "2.0.2"
OLD_DIR = setup_clients.py_target(f"kafka-python-{VERSION}")
CODEC_MODULES = {"snappy": "python-snappy (import snappy)", "lz4": "lz4 (import lz4.frame)",
                 "zstd": "zstandard (import zstandard)", "gzip": "gzip (standard library)"}
# the request versions kafka-python 2.0.2 sends once it guessed a broker >= 2.1 (read from its sources:
# conn.check_version, client_async, producer/sender, consumer/fetcher, coordinator/base + consumer)
USED_VERSIONS = {
    "ApiVersions": (18, [0]), "Metadata": (3, [0, 1]), "Produce": (0, [7]), "Fetch": (1, [4]),
    "ListOffsets": (2, [1]), "FindCoordinator": (10, [0]), "JoinGroup": (11, [2]), "SyncGroup": (14, [1]),
    "Heartbeat": (12, [1]), "LeaveGroup": (13, [1]), "OffsetCommit": (8, [2]), "OffsetFetch": (9, [1]),
}
PROBE = """\
import json, sys, kafka
from kafka import KafkaClient
client = KafkaClient(bootstrap_servers=sys.argv[1], request_timeout_ms=15000)
try:
    guess = client.check_version(timeout=10)
    print(json.dumps({"event": "probe", "version": kafka.__version__, "guess": list(guess),
                      "api_versions": {str(k): list(v) for k, v in (client.get_api_versions() or {}).items()}}))
finally:
    client.close()
"""


def check_library(lines: list[dict], context: str) -> None:
    """The program's process imported kafka-python 2.0.2 from .cache/py (the launcher's `library` event)."""
    libs = [d for d in lines if d.get("event") == "library"]
    assert [d["version"] for d in libs] == [VERSION] and Path(libs[0]["file"]).is_relative_to(OLD_DIR), \
        f"not kafka-python {VERSION} from {OLD_DIR}: {libs}\n{context}"


@pytest.fixture(scope="module")
def kp202(pyclient_kp202):
    """``pyclient`` on kafka-python 2.0.2 that also asserts every run imported 2.0.2."""

    def kp202(script: str, *args: str, **kwargs):
        result = pyclient_kp202(script, *args, **kwargs)
        check_library(result.json_lines(), result.describe())
        return result

    return kp202


# ------------------------------------------------------------------ 1. version probe, metadata


def test_kp202_version_probe(broker, pyclient_kp202, show):
    probe = run([*pyclient_kp202.python, "-c", PROBE, broker.bootstrap], 60)
    show(probe)
    (answer,) = probe.events("probe")
    assert answer["version"] == VERSION, probe.describe()
    guess = tuple(answer["guess"])
    assert guess >= (2, 1), f"kafka-python {VERSION} took the broker for {guess} (older than 2.1: other request " \
                            f"versions than USED_VERSIONS, before 0.11 no v2 record batches)\n{probe.describe()}"
    advertised = {int(k): tuple(v) for k, v in answer["api_versions"].items()}
    outside = {name: (versions, advertised.get(key)) for name, (key, versions) in USED_VERSIONS.items()
               if not all(advertised.get(key, (0, -1))[0] <= v <= advertised.get(key, (0, -1))[1] for v in versions)}
    assert not outside, f"kafka-python {VERSION} sends versions the broker does not advertise " \
                        f"(name: (sent, advertised)): {outside}\n{probe.describe()}"


# ------------------------------------------------------------------ 2. assign() of the power topics


@pytest.mark.parametrize("topic", ["topic_meters", "topic_stable"])
def test_kp202_assign_reads_every_row_once(power, kp202, show, topic):
    """test_consume_assign.py's scenario (metadata, watermarks, every row once, CreateTime) on 2.0.2."""
    assign_scenarios.test_assign_reads_every_row_once(power, kp202, show, "kp_assign.py", topic)


def test_kp202_assign_from_timestamp(power, kp202, show, request):
    assign_scenarios.test_assign_from_timestamp(power, kp202, show, "kp_assign.py", request)


def test_kp202_assign_from_end(power, kp202, show):
    """seek_to_end: nothing to read, every position is the high watermark."""
    result = kp202("kp_assign.py", power.bootstrap, "topic_meters", "--start", "end")
    show(result)
    marks = assign_scenarios.watermarks(result)
    counts = {p: len(rs) for p, rs in data.by_partition(power.expected["topic_meters"]).items()}
    assert {p: hi - lo for p, (lo, hi) in marks.items()} == counts, result.describe()
    (summary,) = result.events("summary")
    assert summary["records"] == 0 and not result.events("record"), result.describe()
    assert {int(p): o for p, o in summary["positions"].items()} == {p: hi for p, (_, hi) in marks.items()}, \
        result.describe()


# ------------------------------------------------------------------ 3. produce, every codec 2.0.2 has


@pytest.fixture(scope="module")
def kp202_codecs(pyclient_kp202) -> dict[str, bool]:
    """codec -> whether kafka-python 2.0.2 can compress with it here (kafka.codec.has_<codec>())."""
    code = ("import json, kafka.codec as c; "
            "print(json.dumps({n: getattr(c, 'has_' + n)() for n in ('gzip', 'snappy', 'lz4', 'zstd')}))")
    probe = run([*pyclient_kp202.python, "-c", code], 60)
    return {"none": True, **json.loads(probe.stdout.strip().splitlines()[-1])}


@pytest.mark.parametrize("codec", CODECS)
def test_kp202_produce_and_read_back(broker, kp202, kp202_codecs, pyclient, show, codec):
    if not kp202_codecs[codec]:
        pytest.skip(f"kafka-python {VERSION} compresses {codec} with {CODEC_MODULES[codec]}, which is not installed "
                    f"(kafka.codec.has_{codec}() is False)")
    topic = new_topic(broker.bootstrap, f"kp202-{codec}")
    want = expected(("kp", codec, N))  # "kp": the `nil` header goes with an empty value, as on 3.x
    produced = kp202("kp_produce.py", broker.bootstrap, topic, codec, str(N), "--first", "0", "--partitions",
                     str(PARTITIONS), timeout=90, check=False)
    show(produced)
    check_deliveries(produced, want)
    read = read_back(pyclient, show, broker.bootstrap, topic)  # the current confluent-kafka
    check_read_back(read, want, CREATE_TIME["ck"], produced)
    if broker.name == "walgate":  # Tansu's ListOffsets(latest) is wrong after multi-record batches (FINDINGS.md)
        check_watermarks(read, want)
    old = kp202("kp_assign.py", broker.bootstrap, topic, "--start", "beginning", check=False)
    show(old)
    check_read_back(old, want, CREATE_TIME["kp"], produced)


# ------------------------------------------------------------------ 4. groups (walgate only)

WALGATE_ONLY = pytest.mark.parametrize("broker", ["walgate"], indirect=True)  # Tansu's coordinator hangs


@pytest.fixture
def kp202_background(background, pyclient_kp202, power):
    """``background`` that starts test_groups.member's command line on kafka-python 2.0.2."""
    groups._LOG[:] = [power.broker.log]  # walgate's log in test_groups' failure messages

    def start(argv: list[str]):
        assert argv[0] == sys.executable and argv[1].endswith(".py"), argv
        return background(pyclient_kp202.argv(Path(argv[1]).name, *argv[2:]))

    return start


@WALGATE_ONLY
def test_kp202_two_members_range_split_then_survivor(power, kp202_background):
    want = power.expected[TOPIC]
    a, b = two_members_split(power, kp202_background, "kp_group.py", group_name("kp202-2"))
    for member in (a, b):
        check_library(groups.jlines(member), member.describe())
    assert {tuple(owned(a)), tuple(owned(b))} == {(0, 1), (2, 3)}, a.describe() + b.describe()  # range assignor
    close(a)
    wait_until(lambda: owned(b) == list(range(data.VGROUPS)), 30, "the survivor owning all 4 partitions", a, b)
    check_exactly(by_offset(records(groups.jlines(a)) + records(groups.jlines(b))), want,
                  first_offsets={p: 0 for p in range(data.VGROUPS)})  # nothing read twice after the move
    close(b)
    assert events(b, "committed"), b.describe()


@WALGATE_ONLY
def test_kp202_subscribe_reads_all_and_committed(power, kp202):
    """test_groups.py's kafka-python scenario on 2.0.2."""
    groups.test_kp_subscribe_reads_all_and_committed(power, kp202)


@WALGATE_ONLY
def test_kp202_commit_close_restart_resumes(power, kp202):
    want = power.expected[TOPIC]
    group = group_name("kp202-resume")
    first = kp202("kp_group.py", power.bootstrap, TOPIC, group, "--max-records", "10", "--timeout", "40")
    read = records(first.json_lines())
    assert len(read) == 10, first.describe()
    (commit,) = [c for c in first.events("committed") if c["why"] == "close"]
    committed = {int(p): o for p, o in commit["offsets"].items()}
    # committed = the position after the last record read, per partition read from (0 for the other assigned
    # partitions: kafka-python commits every assigned position); committed() answers what was committed
    assert {p: o for p, o in committed.items() if o} == \
        {p: rs[-1].offset + 1 for p, rs in data.by_partition(read).items()}, first.describe()
    assert {int(p): o for p, o in commit["fetched"].items() if o is not None} == committed, first.describe()

    second = kp202("kp_group.py", power.bootstrap, TOPIC, group, "--until-end", "--timeout", "40")
    rest = [r for p, rs in data.by_partition(want).items() for r in rs[committed.get(p, 0):]]
    check_exactly(by_offset(records(second.json_lines())), rest,
                  first_offsets={p: committed.get(p, 0) for p in range(data.VGROUPS)})
