"""Micro-benchmark of a Kafka request's dispatch (not a test): ``python tests/gateway/bench_dispatch.py [SRC]``.

Per-request CPU time (``time.process_time``: every thread, so the storage thread's share counts; min of 7 rounds)
of what the server does for one request: ``parse_request_header``, decoding the body (``decode_view``, or
``decode_request`` in a tree without it) and the handler, for Metadata v12 and Fetch v12 (nothing to read, no
wait) against a real Engine on its storage thread. *SRC*: another walgate checkout to import instead of this one
(``git archive main walgate | tar -x -C /tmp/main``), to compare two trees on one machine.
"""

from __future__ import annotations

import sys

if len(sys.argv) > 1:  # before walgate is imported: the editable install's finder would win over sys.path
    sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, sys.argv[1])

import asyncio  # noqa: E402
import datetime  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from kio.schema.fetch.v12 import request as fetch_v12  # noqa: E402
from kio.schema.metadata.v12 import request as metadata_v12  # noqa: E402

import walgate.wire.protocol as protocol  # noqa: E402
from walgate.gateway.kafka.broker import Broker  # noqa: E402
from walgate.gateway.kafka.context import RequestContext  # noqa: E402
from walgate.gateway.kafka.groups import GroupService  # noqa: E402
from walgate.gateway.kafka.handlers import HANDLERS, advertised  # noqa: E402
from walgate.gateway.kafka.wakeups import FetchWakeups  # noqa: E402
from walgate.gateway.storage_thread import StorageThread  # noqa: E402
from walgate.storage.engine import Engine  # noqa: E402

decode = getattr(protocol, "decode_view", protocol.decode_request)


def _metadata(names: list[str]) -> Any:
    return metadata_v12.MetadataRequest(
        topics=tuple(metadata_v12.MetadataRequestTopic(topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _fetch(names: list[str]) -> Any:
    return fetch_v12.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=tuple(fetch_v12.FetchTopic(topic=n, partitions=tuple(
            fetch_v12.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                     log_start_offset=-1, partition_max_bytes=1 << 20) for p in range(4)))
                     for n in names))


async def main() -> None:
    print(f"{protocol.__file__}: {decode.__name__}")
    storage = StorageThread()
    wakeups = FetchWakeups(asyncio.get_running_loop())
    engine = await storage.call(Engine.open, Path(tempfile.mkdtemp()) / "data", listener=wakeups)
    groups = GroupService(engine, storage)
    broker = Broker(engine=engine, storage=storage, node_id=1, host="127.0.0.1", port=9092, cluster_id="bench",
                    versions=advertised(), groups=groups, wakeups=wakeups)
    names = [f"t{i}" for i in range(20)]
    for name in names:
        await storage.call(engine.create_kafka_topic, name, 4, {}, engine.topic_defaults(1))
    cases = [("Metadata v12, 1 topic", 3, _metadata(names[:1]), 2000),
             ("Metadata v12, 20 topics", 3, _metadata(names), 400),
             ("Fetch v12, 1 topic x 4 partitions", 1, _fetch(names[:1]), 2000),
             ("Fetch v12, 20 topics x 4 partitions", 1, _fetch(names), 400)]
    try:
        for label, api_key, request, rounds in cases:
            frame = protocol.encode_request(api_key, 12, 1, "bench", request)[4:]
            handle = HANDLERS[api_key].fn

            async def once(frame: bytes = frame, handle: Any = handle) -> None:
                header = protocol.parse_request_header(frame)
                await handle(broker, RequestContext.of(header), decode(header, frame))

            for _ in range(50):
                await once()
            best = float("inf")
            for _ in range(7):
                began = time.process_time()
                for _ in range(rounds):
                    await once()
                best = min(best, (time.process_time() - began) / rounds)
            print(f"{label:40s} {best * 1e6:9.1f} us/request")
    finally:
        groups.close()
        await storage.call(engine.close)
        storage.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
