"""walgate only: a real confluent-kafka group member shows up in SHOW CONSUMERS / SHOW SUBSCRIPTIONS."""

from __future__ import annotations

import time

from confluent_kafka import Consumer

DB, TOPIC, GROUP = "showc", "showc_topic", "show-group"


def test_group_member_and_its_progress_are_visible_in_sql(walgate):
    walgate.sql(f"CREATE DATABASE {DB} VGROUPS 2")
    walgate.sql(f"CREATE STABLE {DB}.m (ts TIMESTAMP, v INT) TAGS (site INT)")
    walgate.sql(f"CREATE TOPIC {TOPIC} AS STABLE {DB}.m")
    walgate.sql(f"INSERT INTO {DB}.a USING {DB}.m TAGS (1) VALUES (1000, 1) (2000, 2) {DB}.b USING {DB}.m TAGS (2) VALUES (1000, 3)")
    c = Consumer({"bootstrap.servers": walgate.bootstrap, "group.id": GROUP, "client.id": "show-client",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 20
        while got < 3 and time.monotonic() < deadline:
            m = c.poll(0.5)
            got += m is not None and m.error() is None
        assert got == 3
        c.commit(asynchronous=False)
        consumers = walgate.sql("SHOW CONSUMERS")["data"]
        assert [(r[1], r[2], r[4], r[5]) for r in consumers] == [(GROUP, "show-client", "ready", TOPIC)]
        assert sorted(r[6].split(":")[1].split(",") for r in consumers) == [["0", "1"]]
        subs = walgate.sql("SHOW SUBSCRIPTIONS")["data"]
        mine = sorted((r[2], r[4], r[6]) for r in subs if r[1] == GROUP)
        assert [p for p, _, _ in mine] == [0, 1]  # both assigned partitions are listed
        committed = [(off, lag) for _, off, lag in mine if off is not None]
        # everything read and committed: lag 0, offsets add up to the records (a partition without
        # records has no commit, and like kafka-consumer-groups its offset and lag are shown empty)
        assert all(lag == 0 for _, lag in committed) and sum(off for off, _ in committed) == 3
    finally:
        c.close()
    deadline = time.monotonic() + 10  # a closed consumer leaves the group at once
    while walgate.sql("SHOW CONSUMERS")["data"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert walgate.sql("SHOW CONSUMERS")["data"] == []
