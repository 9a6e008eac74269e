"""kafkajs (Node) admin client against `power`: cluster, metadata, watermarks, offsets by timestamp.

kafkajs consumers always join a group (issue 4), so for the consumption path only
its admin calls are exercised here.
"""

from __future__ import annotations

import compat_data as data
from compat_brokers import xfail_on_tansu

SEEK_TS = data.BASE_TS + 60_000 + 3500


def test_kafkajs_metadata_and_watermarks(power, node, show):
    run = node("admin_offsets.js", power.bootstrap, "topic_meters")
    show(run)
    (cluster,) = run.events("cluster")
    assert cluster["brokers"] == [power.bootstrap], run.describe()
    (md,) = run.events("metadata")
    assert md["partitions"] == list(range(data.VGROUPS)) and set(md["errors"]) == {0}, run.describe()
    per_partition = {p: len(rs) for p, rs in data.by_partition(power.expected["topic_meters"]).items()}
    assert {d["partition"]: (d["low"], d["high"]) for d in run.events("offsets")} == \
        {p: (0, n) for p, n in per_partition.items()}, run.describe()


def test_kafkajs_offsets_by_timestamp(power, node, show, request):
    xfail_on_tansu(request, "ListOffsets by timestamp answers offset 0")
    run = node("admin_offsets.js", power.bootstrap, "topic_meters", str(SEEK_TS))
    show(run)
    earlier = data.by_partition(r for r in power.expected["topic_meters"] if r.timestamp < SEEK_TS)
    want = {p: len(earlier.get(p, [])) for p in range(data.VGROUPS)}
    assert {d["partition"]: d["offset"] for d in run.events("ts_offsets")} == want, run.describe()
