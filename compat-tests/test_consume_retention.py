"""walgate only: WAL retention moves the log start; an offset behind it is OFFSET_OUT_OF_RANGE.

A database with 1 MB segments and 1 MB size retention is filled with ~5 MB; the
engine applies retention on a 5 s timer, so the earliest offset is polled (for a
bounded time) until it has held for longer than that timer. Then: confluent-kafka with auto.offset.reset=error gets
``_AUTO_OFFSET_RESET``, kafka-python with no reset policy raises
OffsetOutOfRangeError, a reset=earliest reader starts at the new log start, and
the Spark source reads [earliest, latest) without reporting data loss.
"""

from __future__ import annotations

import time

import pytest

DB, TOPIC = "ret", "ret_topic"
ROWS, PER_STATEMENT, PAYLOAD = 5000, 250, 1000  # ~5 MB of WAL
WAIT_S = 45
RETENTION_CHECK_S = 5  # walgate.storage.engine._RETENTION_CHECK_S


@pytest.fixture(scope="module")
def retained(walgate, pyclient):
    """(earliest, latest) of partition 0 once retention has deleted old segments."""
    walgate.sql(f"CREATE DATABASE {DB} VGROUPS 1 WAL_SEGMENT_SIZE 1 WAL_RETENTION_SIZE 1 WAL_RETENTION_PERIOD -1")
    walgate.sql(f"CREATE STABLE {DB}.logs (ts TIMESTAMP, seq INT, payload VARCHAR({PAYLOAD})) TAGS (host VARCHAR(16))")
    walgate.sql(f"CREATE TOPIC {TOPIC} AS STABLE {DB}.logs")
    walgate.sql(f"CREATE TABLE {DB}.h1 USING {DB}.logs TAGS ('h1')")
    base = 1_700_000_000_000
    for start in range(0, ROWS, PER_STATEMENT):
        values = " ".join(f"({base + i}, {i}, '{'x' * (PAYLOAD - 8)}{i:08d}')" for i in range(start, start + PER_STATEMENT))
        walgate.sql(f"INSERT INTO {DB}.h1 VALUES {values}")
    # retention runs every RETENTION_CHECK_S; a pass may run while the rows are still going in, so the log start
    # is final only once it has held for longer than that interval after the last INSERT
    deadline = time.monotonic() + WAIT_S
    seen, since = -1, time.monotonic()
    while True:
        run = pyclient("ck_assign.py", walgate.bootstrap, TOPIC, "--start", "end")
        ((low, high),) = [(d["low"], d["high"]) for d in run.events("watermarks")]
        if low != seen:
            seen, since = low, time.monotonic()
        if (low > 0 and time.monotonic() - since > RETENTION_CHECK_S + 1) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert high == ROWS, f"high watermark {high}, expected {ROWS} rows\n{run.describe()}"
    assert low > 0, f"earliest offset still 0 after {WAIT_S} s of {ROWS} rows (~{ROWS * PAYLOAD >> 20} MB)\n" \
                    f"{run.describe()}\n--- walgate log ---\n{walgate.log()[-4000:]}"
    return low, high


def test_confluent_kafka_gets_auto_offset_reset_error(walgate, retained, pyclient):
    run = pyclient("ck_assign.py", walgate.bootstrap, TOPIC, "--start", "0", "--reset", "error")
    errors = run.events("error")
    assert errors and errors[0]["name"] == "_AUTO_OFFSET_RESET", run.describe()
    assert not run.events("record"), run.describe()


def test_kafka_python_raises_offset_out_of_range(walgate, retained, pyclient):
    run = pyclient("kp_assign.py", walgate.bootstrap, TOPIC, "--start", "0", "--reset", "error")
    errors = run.events("error")
    assert errors and errors[0]["name"] == "OffsetOutOfRangeError", run.describe()


@pytest.mark.parametrize("client", ["ck_assign.py", "kp_assign.py"])
def test_reset_earliest_starts_at_log_start(walgate, retained, pyclient, client):
    low, high = retained
    run = pyclient(client, walgate.bootstrap, TOPIC, "--start", "0", "--reset", "earliest", timeout=120)
    offsets = [d["offset"] for d in run.events("record")]
    assert offsets and offsets[0] >= low, run.describe()
    assert offsets == list(range(offsets[0], high)), f"not dense to the end: {offsets[:5]}...{offsets[-5:]}"


def test_spark_source_reads_retained_range_without_data_loss(walgate, retained, java):
    low, high = retained
    run = java("SparkSource.java", "--bootstrap", walgate.bootstrap, "--topic", TOPIC, timeout=180, check=False)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    (offsets,) = run.events("offsets")
    assert offsets["earliest"] >= low and offsets["latest"] == high, run.describe()
    (summary,) = run.events("summary")
    assert summary["records"] == high - offsets["earliest"], run.describe()


def _commit(walgate, group: str, offset: int) -> None:
    """Commit ``offset`` of partition 0 for ``group`` (what a member did before retention moved the log start)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": walgate.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(TOPIC, 0, offset)], asynchronous=False)
        (got,) = c.committed([TopicPartition(TOPIC, 0)], timeout=10)
        assert got.offset == offset
    finally:
        c.close()


@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
def test_group_committed_offset_behind_log_start_follows_reset_policy(walgate, retained, pyclient, reset):
    """A group resumes from a commit retention has since deleted: OFFSET_OUT_OF_RANGE, then auto.offset.reset."""
    low, high = retained
    group = f"ret-group-{reset}"
    _commit(walgate, group, low // 2)
    args = ["--reset", reset, "--timeout", "20"]
    if reset == "earliest":
        run = pyclient("ck_group.py", walgate.bootstrap, TOPIC, group, *args, "--max-records", "1", timeout=40)
        assert [r["offset"] for r in run.events("record")] == [low], run.describe()
    elif reset == "latest":
        run = pyclient("ck_group.py", walgate.bootstrap, TOPIC, group, *args, "--until-end", timeout=40)
        # read to the end without a record: librdkafka logs the reset (its position() stays unset: nothing consumed)
        assert not run.events("record") and run.events("closed"), run.describe()
        assert "Offset out of range" in run.stderr and "to offset END" in run.stderr, run.describe()
    else:
        run = pyclient("ck_group.py", walgate.bootstrap, TOPIC, group, *args, "--max-records", "1", timeout=40,
                       check=False)
        assert "_AUTO_OFFSET_RESET" in [e.get("name") for e in run.events("error")], run.describe()
        assert not run.events("record"), run.describe()
