"""walgate only: the Java consumer's truncation detection (KIP-320) over OffsetForLeaderEpoch answered from each
vnode's leader-epoch cache (issue 25).

A TDengine topic of 3 rows in one vgroup (dense offsets 0..2 over WAL versions that also hold a meta entry) and a
Kafka-native topic of 3 records. For each, compat-tests/java/EpochValidation.java (kafka-clients 4.3,
auto.offset.reset=none) seeks with a leader epoch and polls, as after a committed offset that carries its epoch:

* offset 1 in epoch 0: epoch 0 ends at the high watermark (3), so the position is valid: records 1 and 2;
* offset 5 in epoch 0: epoch 0 ends at 3, below the position: LogTruncationException, diverging at offset 3 in
  epoch 0 (what a consumer ahead of a truncated leader is told);
* offset 1 in epoch 7: no such epoch (UNDEFINED): LogTruncationException without a diverging offset.
"""

from __future__ import annotations

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

DB, TDENGINE, NATIVE = "epochs", "epochs_rows", "epochs_native"


@pytest.fixture(scope="module")
def topics(walgate) -> list[str]:
    walgate.sql(f"CREATE DATABASE {DB} VGROUPS 1")
    walgate.sql(f"CREATE STABLE {DB}.m (ts TIMESTAMP, v INT) TAGS (g INT)")
    walgate.sql(f"CREATE TOPIC {TDENGINE} AS STABLE {DB}.m")
    walgate.sql(f"INSERT INTO {DB}.a USING {DB}.m TAGS (1) VALUES (1000, 1) (2000, 2) (3000, 3)")
    admin = AdminClient({"bootstrap.servers": walgate.bootstrap})
    admin.create_topics([NewTopic(NATIVE, 1, 1)])[NATIVE].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": walgate.bootstrap, "acks": "all"})
    for i in range(3):
        producer.produce(NATIVE, value=b"v%d" % i, partition=0)
    assert producer.flush(30) == 0
    return [TDENGINE, NATIVE]


def test_the_java_consumer_validates_its_position_against_the_epoch_cache(walgate, topics, java):
    specs = [f"{t}:{offset}:{epoch}" for t in topics for offset, epoch in ((1, 0), (5, 0), (1, 7))]
    run = java("EpochValidation.java", walgate.bootstrap, *specs, "--timeout", "30")
    cases = {(c["topic"], c["offset"], c["epoch"]): c for c in run.events("case")}
    assert len(cases) == len(specs), run.describe()
    for t in topics:
        valid, ahead, unknown = cases[(t, 1, 0)], cases[(t, 5, 0)], cases[(t, 1, 7)]
        assert valid["truncation"] is None and valid["records"] == [1, 2] and valid["position"] == 3, run.describe()
        assert ahead["truncation"] == {"divergent": 3, "divergent_epoch": 0} and ahead["records"] == [], \
            run.describe()
        assert unknown["truncation"] == {"divergent": None, "divergent_epoch": None}, run.describe()
        assert unknown["records"] == [], run.describe()
