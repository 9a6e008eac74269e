"""Spark's Kafka source, reproduced on the real kafka-clients jars (java/SparkSource.java), against `power`.

The driver side lists partitions and offsets with the Admin client, the executor
side reads [earliest, latest) of every partition with seek/poll/position and the
failOnDataLoss checks; it must finish without a data-loss, hole or timeout error
and with counts that match the rows inserted. Its ``--kafka.<setting>`` options (Spark's
``kafka.``-prefixed ones) over SASL_SSL: test_security_sasl_ssl.py.
"""

from __future__ import annotations

import compat_data as data
import pytest
from compat_brokers import xfail_on_tansu
from compat_data import check_exactly, records

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
               "--starting", f"timestamp:{SEEK_TS}", clients=clients, check=False)
    show(run)
    assert run.returncode == 0 and not run.events("error"), run.describe()
    want_all = power.expected["topic_meters"]
    earlier = data.by_partition(r for r in want_all if r.timestamp < SEEK_TS)
    want_starts = {p: len(earlier.get(p, [])) for p in range(data.VGROUPS)}
    latest = {p: o["latest"] for p, o in offsets(run).items()}
    # forTimestamp: the first offset whose timestamp >= T, or -1 when there is none.
    got_starts = {p: o["timestamp_offset"] for p, o in offsets(run).items()}
    assert got_starts == {p: (s if s < latest[p] else -1) for p, s in want_starts.items()}, run.describe()
    check_exactly(records(run.json_lines()), [r for r in want_all if r.timestamp >= SEEK_TS], first_offsets=want_starts)
