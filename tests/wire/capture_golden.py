"""Capture real clients' request frames into tests/wire/golden/ (a generator, not a test).

Usage: ``python tests/wire/capture_golden.py`` (rewrites tests/wire/golden/*.json).

It runs a minimal fake broker on 127.0.0.1 built on walgate.wire itself --
ApiVersions, Metadata (one broker, topic ``golden`` with one partition), ListOffsets,
Fetch (three records at offsets 0-2, then empty answers), Produce -- and points
kafka-python, aiokafka and confluent-kafka (librdkafka) consumers and producers
at it. Every request frame is recorded as hex with its api key and version. Each
scenario advertises a set of version ranges: ``modern`` what walgate serves,
``legacy`` low maxima, so that clients fall back to old versions (ListOffsets v0,
Metadata v1, Fetch v4, Produce v3, ...). A client that completes its scenario has
also decoded walgate.wire's Metadata/ListOffsets/Fetch/Produce responses.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from walgate.wire import encode_batch
from walgate.wire.framing import FrameReader
from walgate.wire.protocol import (
    api_versions_fallback,
    build_response,
    decode_request,
    encode_response,
    parse_request_header,
)

GOLDEN = Path(__file__).parent / "golden"
TOPIC = "golden"
TOPIC_ID = uuid.UUID("6f1c2a3e-0000-4000-8000-00000000c0de")
RECORDS = encode_batch(0, [1700000000000, 1700000000001, 1700000000002], [b"k0", None, b"k2"],
                       [b"golden-0", b"golden-1", None], [[("h", b"v")], [], []])
MODERN = {18: (0, 4), 3: (0, 12), 2: (0, 9), 1: (4, 17), 0: (3, 12), 10: (0, 6), 9: (0, 9), 8: (0, 9), 22: (0, 5)}
LEGACY = {18: (0, 2), 3: (0, 1), 2: (0, 0), 1: (4, 4), 0: (3, 3), 10: (0, 0), 9: (0, 1), 8: (0, 1)}
MAX_PER_VERSION = 2
MAX_PRODUCE = 6  # one Produce frame per codec


class FakeBroker:
    """Answers just enough for consumers and producers to run; records every request frame."""

    def __init__(self, versions: dict[int, tuple[int, int]]) -> None:
        self.versions = versions
        self.frames: list[dict[str, Any]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = FrameReader(10**8)
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                for frame in reader.feed(data):
                    reply = self._answer(frame)
                    if reply is None:
                        return
                    try:
                        conn.sendall(b"".join(reply))
                    except OSError:
                        return

    def _record(self, header: Any, frame: bytes) -> None:
        same = [f for f in self.frames if (f["api_key"], f["api_version"]) == (header.api_key, header.api_version)]
        if len(same) < (MAX_PRODUCE if header.api_key == 0 else MAX_PER_VERSION):
            self.frames.append({"api_key": header.api_key, "api_version": header.api_version,
                                "client_id": header.client_id, "hex": frame.hex()})

    def _answer(self, frame: bytes) -> list[Any] | None:
        header = parse_request_header(frame)
        self._record(header, frame)
        low, high = self.versions.get(header.api_key, (0, -1))
        if not low <= header.api_version <= high:
            if header.api_key == 18:
                return api_versions_fallback(header.correlation_id, self.versions)
            return None
        request = decode_request(header, frame)
        fields = getattr(self, f"_api_{header.api_key}")(request, header.api_version)
        return encode_response(header, build_response(header.api_key, header.api_version, fields))

    def _api_18(self, request: Any, version: int) -> dict[str, Any]:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(self.versions.items())]
        return {"error_code": 0, "api_keys": keys, "throttle_time": 0}

    def _api_3(self, request: Any, version: int) -> dict[str, Any]:
        partition = {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": -1,
                     "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
        topic = {"error_code": 0, "name": TOPIC, "topic_id": TOPIC_ID, "is_internal": False, "partitions": [partition]}
        return {"brokers": [{"node_id": 1, "host": "127.0.0.1", "port": self.port}], "cluster_id": "golden-cluster",
                "controller_id": 1, "topics": [topic]}

    def _api_2(self, request: Any, version: int) -> dict[str, Any]:
        partitions = [{"partition_index": p.partition_index, "error_code": 0, "timestamp": -1, "offset": 3,
                       "old_style_offsets": [3], "leader_epoch": -1} for t in request.topics for p in t.partitions]
        return {"topics": [{"name": TOPIC, "partitions": partitions}]}

    def _api_1(self, request: Any, version: int) -> dict[str, Any]:
        partitions = []
        for topic in request.topics:
            for p in topic.partitions:
                records = RECORDS if p.fetch_offset == 0 else b""
                if not records:
                    time.sleep(0.05)
                partitions.append({"partition_index": p.partition, "error_code": 0, "high_watermark": 3,
                                   "last_stable_offset": 3, "log_start_offset": 0, "records": records})
        return {"responses": [{"topic": TOPIC, "topic_id": TOPIC_ID, "partitions": partitions}]}

    def _api_0(self, request: Any, version: int) -> dict[str, Any]:
        responses = [{"name": t.name, "topic_id": getattr(t, "topic_id", None),
                      "partition_responses": [{"index": p.index, "error_code": 0, "base_offset": 0,
                                               "log_append_time": -1, "log_start_offset": 0}
                                              for p in t.partition_data]}
                     for t in request.topic_data]
        return {"responses": responses}

    def _api_10(self, request: Any, version: int) -> dict[str, Any]:
        keys = list(getattr(request, "coordinator_keys", ())) or [getattr(request, "key", "")]
        return {"error_code": 0, "node_id": 1, "host": "127.0.0.1", "port": self.port,
                "coordinators": [{"key": k, "node_id": 1, "host": "127.0.0.1", "port": self.port, "error_code": 0}
                                 for k in keys]}

    def _api_22(self, request: Any, version: int) -> dict[str, Any]:
        return {"error_code": 0, "producer_id": 1000, "producer_epoch": 0}

    def _api_9(self, request: Any, version: int) -> dict[str, Any]:
        return {"error_code": 0, "topics": [], "groups": []}

    def _api_8(self, request: Any, version: int) -> dict[str, Any]:
        return {"topics": []}


def kafka_python(port: int, client_id: str) -> None:
    import kafka

    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", client_id=client_id, group_id=None,
                                   auto_offset_reset="earliest", request_timeout_ms=5000)
    partition = kafka.TopicPartition(TOPIC, 0)
    consumer.assign([partition])
    consumer.seek_to_end(partition)
    consumer.position(partition)
    consumer.seek(partition, 0)
    got = [m.value for batch in consumer.poll(timeout_ms=3000).values() for m in batch]
    consumer.close()
    assert got[:2] == [b"golden-0", b"golden-1"], got
    headers = None if client_id.endswith("legacy") else [("h", b"1")]  # it picks magic 1 for old brokers
    for codec in ("gzip", "lz4", None):
        producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", client_id=client_id,
                                       compression_type=codec, enable_idempotence=False, acks=1)
        producer.send(TOPIC, key=b"key", value=f"golden-{codec}".encode(), headers=headers).get(timeout=10)
        producer.close()


def aiokafka_client(port: int, client_id: str) -> None:
    import aiokafka

    async def run() -> None:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", client_id=client_id,
                                             auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        partition = aiokafka.TopicPartition(TOPIC, 0)
        consumer.assign([partition])
        await consumer.seek_to_end(partition)
        await consumer.position(partition)
        consumer.seek(partition, 0)
        message = await asyncio.wait_for(consumer.getone(), 10)
        await consumer.stop()
        assert message.value == b"golden-0", message
        for codec in ("snappy", "zstd"):
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", client_id=client_id,
                                                 compression_type=codec, acks=1)
            await producer.start()
            await producer.send_and_wait(TOPIC, value=f"golden-{codec}".encode(), key=b"key")
            await producer.stop()

    asyncio.run(run())


def confluent(port: int, client_id: str) -> None:
    import confluent_kafka

    common = {"bootstrap.servers": f"127.0.0.1:{port}", "client.id": client_id,
              "broker.address.family": "v4", "topic.metadata.refresh.interval.ms": 60000}
    consumer = confluent_kafka.Consumer({**common, "group.id": "golden", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_END)])
    consumer.poll(1.0)
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    message = None
    deadline = time.monotonic() + 10
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
    consumer.close()
    assert message is not None and message.value() == b"golden-0", message
    for codec in ("snappy", "zstd", "lz4", "gzip"):
        producer = confluent_kafka.Producer({**common, "compression.codec": codec, "enable.idempotence": False,
                                             "linger.ms": 0})
        producer.produce(TOPIC, key=b"key", value=f"golden-{codec}".encode(), headers=[("h", b"1")])
        assert producer.flush(10) == 0


CLIENTS = {"kafka-python": kafka_python, "aiokafka": aiokafka_client, "confluent-kafka": confluent}
VERSIONS = {
    "kafka-python": f"kafka-python {__import__('kafka').__version__}",
    "aiokafka": f"aiokafka {__import__('aiokafka').__version__}",
    "confluent-kafka": "confluent-kafka {} / librdkafka {}".format(
        __import__("confluent_kafka").version()[0], __import__("confluent_kafka").libversion()[0]),
}


def main() -> int:
    GOLDEN.mkdir(exist_ok=True)
    failures = 0
    for scenario, versions in (("modern", MODERN), ("legacy", LEGACY)):
        for name, run in CLIENTS.items():
            broker = FakeBroker(versions)
            client_id = f"golden-{name}-{scenario}"
            try:
                run(broker.port, client_id)
                status = "ok"
            except Exception as exc:  # noqa: BLE001 - report and keep the frames captured so far
                status = f"failed: {exc!r}"
                failures += 1
            finally:
                broker.close()
            capture = {"client": VERSIONS[name], "scenario": scenario, "advertised": versions,
                       "status": status, "frames": broker.frames}
            path = GOLDEN / f"{name}-{scenario}.json"
            path.write_text(json.dumps(capture, indent=1) + "\n")
            print(f"{path.name}: {len(broker.frames)} frames, {status}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
