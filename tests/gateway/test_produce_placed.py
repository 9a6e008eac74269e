"""Produce on a cluster database (its vgroups placed: :attr:`DatabaseDef.replicas
<walgate.storage.catalog.DatabaseDef.replicas>` set, one copy each, as every cluster database since issue 25 step 2),
through the handler's storage-thread part (:func:`walgate.gateway.kafka.handlers.produce._produce`) on a real engine.

What holds: a partition past the topic's partitions (or negative) answers UNKNOWN_TOPIC_OR_PARTITION, unwritten, and
every other partition of the request is appended and answered as usual (before the fix the replication check raised
IndexError out of the request, and the server closed the connection).
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from pathlib import Path
from typing import Any

from walgate.gateway.kafka.handlers.produce import _produce
from walgate.storage.engine import Engine
from walgate.wire import encode_batch
from walgate.wire.errors import ErrorCode
from walgate.wire.protocol import request_class
from walgate.wire.serial import fields_of

PRODUCE: Any = request_class(0, 9)
TOPIC_DATA: Any = next(f.entity for f in fields_of(PRODUCE) if f.name == "topic_data")
PARTITION_DATA: Any = next(f.entity for f in fields_of(TOPIC_DATA) if f.name == "partition_data")


def test_an_unknown_partition_of_a_placed_database_is_answered_and_the_others_written(tmp_path: Path) -> None:
    engine = Engine.open(tmp_path / "data", node_id=1)
    try:
        db = engine.database(engine.create_kafka_topic("placed", 2, {}).db)
        # placed as a cluster node's shared catalog gives it: one copy of each vgroup, on this node
        engine.catalog.databases[db.name] = dataclasses.replace(db, replicas=((1,), (1,)))
        batch = encode_batch(0, [int(time.time() * 1000)], [b"k"], [b"v"])
        parts = (5, 0, -1, 1)
        request = PRODUCE(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
            TOPIC_DATA(name="placed", partition_data=tuple(PARTITION_DATA(index=p, records=batch) for p in parts)),))
        answers, _, _ = _produce(engine, request, int(time.time() * 1000), None, 0, {}, 1, {}, None)
        codes = {p: (answers[("placed", p)]["error_code"], answers[("placed", p)]["base_offset"]) for p in parts}
        assert codes == {5: (ErrorCode.unknown_topic_or_partition, -1), -1: (ErrorCode.unknown_topic_or_partition, -1),
                         0: (ErrorCode.none, 0), 1: (ErrorCode.none, 0)}
    finally:
        engine.close()
