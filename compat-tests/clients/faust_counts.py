"""A faust-streaming worker counting the records of TOPIC per key in a table backed by a compacted changelog.

The table ``counts`` (in memory: a restarted worker rebuilds it from its changelog topic
``<APP_ID>-counts-changelog``) is updated by an agent for every record; each update prints
``{"event": "count", "key", "count", "partition", "offset"}``. ``{"event": "started"}`` once the agent runs,
``{"event": "ready"}`` once the table is recovered and the stream partitions are sought to their committed offsets.
Runs until stopped (SIGTERM: faust commits its offsets and leaves).

Usage: faust_counts.py BOOTSTRAP TOPIC APP_ID DATA_DIR PARTITIONS
"""

from __future__ import annotations

import json
import sys

import faust


def main() -> None:
    bootstrap, topic_name, app_id, data_dir, partitions = sys.argv[1:6]
    app = faust.App(
        app_id, broker=f"kafka://{bootstrap}", store="memory://", datadir=data_dir, web_enabled=False,
        topic_partitions=int(partitions), topic_replication_factor=1, table_cleanup_interval=1.0,
        broker_commit_every=20, broker_commit_interval=1.0,
    )
    topic = app.topic(topic_name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
                      partitions=int(partitions))
    counts = app.Table("counts", default=int, partitions=int(partitions))

    def emit(event: str, **fields: object) -> None:
        print(json.dumps({"event": event, **fields}), file=sys.__stdout__, flush=True)  # faust redirects stdout

    @app.agent(topic)
    async def count(stream):  # type: ignore[no-untyped-def]
        emit("started", faust=faust.__version__)
        async for event in stream.events():
            key = event.key.decode()
            counts[key] += 1
            emit("count", key=key, count=counts[key], partition=event.message.partition,
                 offset=event.message.offset)

    @app.task
    async def ready() -> None:  # faust sets `completed` after its seek to the committed offsets
        await app.tables.recovery.completed.wait()
        emit("ready")

    sys.argv = [sys.argv[0], "worker", "--without-web", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main()
