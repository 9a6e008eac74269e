"""confluent-kafka, kafka-python and aiokafka consumers with manual assign() (no group) against the `power` topics.

Every selected row comes out exactly once, in per-table order, with the right
key / timestamp / JSON value / headers; offsets are dense and
end - beginning = records per partition (get_watermark_offsets / end_offsets).
"""

from __future__ import annotations

import compat_data as data
import pytest
from compat_brokers import xfail_on_tansu
from compat_data import check_exactly, records

CLIENTS = ["ck_assign.py", "kp_assign.py", "aio_assign.py"]  # confluent-kafka (librdkafka 2.16), kafka-python 3, aiokafka
SEEK_TS = data.BASE_TS + 2 * 60_000 + 4500
CREATE_TIME = {"ck_assign.py": 1, "kp_assign.py": 0, "aio_assign.py": 0}  # each library's code for CreateTime


def watermarks(run) -> dict[int, tuple[int, int]]:
    return {d["partition"]: (d["low"], d["high"]) for d in run.events("watermarks")}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("topic", ["topic_meters", "topic_stable"])
def test_assign_reads_every_row_once(power, pyclient, show, client, topic):
    run = pyclient(client, power.bootstrap, topic, "--start", "beginning")
    show(run)
    want = power.expected[topic]
    (md,) = run.events("metadata")
    assert md["partitions"] == list(range(data.VGROUPS)) and md["brokers"] == [power.bootstrap], run.describe()
    marks = watermarks(run)
    per_partition = {p: len(rs) for p, rs in data.by_partition(want).items()}
    assert {p: hi - lo for p, (lo, hi) in marks.items()} == per_partition, f"end - beginning != records\n{run.describe()}"
    check_exactly(records(run.json_lines()), want, first_offsets={p: lo for p, (lo, _) in marks.items()})
    assert {d["timestamp_type"] for d in run.events("record")} == {CREATE_TIME[client]}, run.describe()


@pytest.mark.parametrize("client", CLIENTS)
def test_assign_from_timestamp(power, pyclient, show, client, request):
    xfail_on_tansu(request, "ListOffsets by timestamp answers offset 0")
    run = pyclient(client, power.bootstrap, "topic_meters", "--start", f"ts:{SEEK_TS}")
    show(run)
    want_all = power.expected["topic_meters"]
    earlier = data.by_partition(r for r in want_all if r.timestamp < SEEK_TS)
    starts = {d["partition"]: d["offset"] for d in run.events("start")}
    want_starts = {p: len(earlier.get(p, [])) for p in range(data.VGROUPS)}
    assert starts == want_starts, f"offsets for timestamp {SEEK_TS}: {starts}, expected {want_starts}\n{run.describe()}"
    check_exactly(records(run.json_lines()), [r for r in want_all if r.timestamp >= SEEK_TS], first_offsets=want_starts)
