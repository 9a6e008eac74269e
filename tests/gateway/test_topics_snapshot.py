"""Issue 23: the topics snapshot the coordinator lane reads (walgate/storage/topics_snapshot.py).

A CreateTopics of many topics (one storage call each) publishes it once, after its last topic, not once per topic
(other clients' calls between its topics, and the WAL sync task's, may each publish what it created so far: the
test counts them); every topic it created is then committable at once. A published snapshot never changes: a later drop publishes
another.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from gateway_helpers import KafkaConnection, build, kio_classes
from kio.schema.errors import ErrorCode

from walgate.gateway.config import Config
from walgate.gateway.server import Gateway
from walgate.storage import store as store_module
from walgate.storage.engine import Engine
from walgate.storage.topics_snapshot import TopicsSnapshot

TOPICS = 40


def request(conn: KafkaConnection, api_key: int, version: int, values: dict[str, Any]) -> Any:
    return conn.request(build(kio_classes(api_key, version)[0], values))


async def test_create_topics_publishes_once_per_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    ends: list[None] = []  # storage calls ended (each may publish)

    class Counted(TopicsSnapshot):
        def __init__(self, generation: int, *args: Any) -> None:
            built.append(generation)
            super().__init__(generation, *args)

    publish = Engine.publish_topics

    def counted_end(engine: Engine) -> None:
        ends.append(None)
        publish(engine)

    monkeypatch.setattr(store_module, "TopicsSnapshot", Counted)
    monkeypatch.setattr(Engine, "publish_topics", counted_end)
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        with KafkaConnection(gateway.kafka_address) as conn:
            before, ended = len(built), len(ends)
            created = await asyncio.to_thread(request, conn, 19, 5, {"timeout": 30_000, "topics": [
                {"name": f"many-{k}", "num_partitions": 1, "replication_factor": 1} for k in range(TOPICS)]})
            assert [t.error_code for t in created.topics] == [ErrorCode.none] * TOPICS
            others = len(ends) - ended - TOPICS  # calls that were not the request's
            assert 1 <= len(built) - before <= 1 + others, \
                f"{len(built) - before} publications for one CreateTopics of {TOPICS} ({others} other calls)"
            committed = await asyncio.to_thread(request, conn, 8, 8, {
                "group_id": "snap", "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": f"many-{k}", "partitions": [{"partition_index": 0, "committed_offset": 1}]}
                           for k in (0, TOPICS - 1)]})
            assert [t.partitions[0].error_code for t in committed.topics] == [ErrorCode.none] * 2


def test_a_published_snapshot_never_changes(tmp_path: Path) -> None:
    engine = Engine.open(tmp_path / "data")
    try:
        engine.create_kafka_topic("a", 2, {})
        first = engine.topics()
        engine.create_partitions("a", 3)
        engine.drop_topic("a")
        assert first.partition_count("a") == 2 and first.is_native("a") and first.topic_id("a") is not None
        assert engine.topics().partition_count("a") is None and "a" not in engine.topics()
    finally:
        engine.close()
