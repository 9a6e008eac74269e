"""Produce (key 0) v3–v11: batches into Kafka-native topics, stored as produced, durable before the answer.

* Each partition's records are validated first (:func:`validate_produced`:
  CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE; a request above the
  topic's segment size: RECORD_LIST_TOO_LARGE); then all valid partitions are
  appended in one storage-thread call, each atomically (all its batches or
  none) and durable per the database's WAL level when the answer is sent.
  ``acks`` 1 and -1 (all) are the same on one node; ``acks=0`` gets no response.
* Idempotent producers: sequence checks per (producer id, partition), a retried
  batch answers its original offset (see :mod:`walgate.storage.producers`).
* ``message.timestamp.type=LogAppendTime`` topics stamp each batch with the
  append time (``log_append_time`` in the answer).
* TDengine topics take rows (:func:`write_rows`): each record of a batch is
  either a JSON object (key = the subtable; fields = columns, and tags for a
  subtable that is new) for topics over a supertable, or InfluxDB line protocol
  (ns timestamps unless the record has a ``precision`` header) whose
  measurement is the topic's supertable (any, for database topics). A batch is
  written whole or refused with INVALID_RECORD and the reason. Rows land in
  the partition of their table (the vnode it hashes to), so the answer's base
  offset is -1. Unknown topics get UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from walgate.gateway.kafka.broker import Broker
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, NotFound, StorageError
from walgate.storage.kafka_topics import TOPIC_CONFIG_DEFAULTS
from walgate.storage.producers import SequenceError
from walgate.wire.errors import ErrorCode, WireError
from walgate.wire.records import DecodedBatch, validate_produced, with_log_append_time

API_KEY, MIN_VERSION, MAX_VERSION = 0, 3, 11
_ACKS = (-1, 0, 1)


def _answer(index: int, error: int, message: str | None = None, base_offset: int = -1,
            log_append_time: int = -1, log_start: int = -1) -> dict[str, Any]:
    return {"index": index, "error_code": error, "base_offset": base_offset, "log_append_time": log_append_time,
            "log_start_offset": log_start, "record_errors": [], "error_message": message}


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any] | None:
    engine = broker.engine
    topics = engine.catalog.topics
    now = int(time.time() * 1000)
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    work: list[tuple[str, int, list[bytes], bool]] = []
    for t in request.topic_data:
        topic = topics.get(t.name)
        for p in t.partition_data:
            key = (t.name, p.index)
            if request.acks not in _ACKS:
                answers[key] = _answer(p.index, ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, not {request.acks}")
            elif topic is None or not engine.has_partition(t.name, p.index):
                answers[key] = _answer(p.index, ErrorCode.unknown_topic_or_partition,
                                       f"unknown topic or partition {t.name}-{p.index}")
            else:
                configs = {**TOPIC_CONFIG_DEFAULTS, **topic.configs}
                records = p.records or b""
                if len(records) > int(configs["segment.bytes"]):
                    answers[key] = _answer(p.index, ErrorCode.record_list_too_large,
                                           f"{len(records)} bytes are above segment.bytes {configs['segment.bytes']}")
                    continue
                try:
                    batches = validate_produced(records, int(configs["max.message.bytes"]), with_records=topic.kind != "kafka")
                except WireError as exc:
                    answers[key] = _answer(p.index, exc.error_code, str(exc))
                    continue
                append_time = configs["message.timestamp.type"] == "LogAppendTime"
                raws = [with_log_append_time(b.raw, now) if append_time else b.raw for b in batches]
                work.append((t.name, p.index, raws if topic.kind == "kafka" else batches, append_time))

    def append() -> dict[tuple[str, int], dict[str, Any]]:
        done = {}
        for name, index, raws, append_time in work:
            try:
                if engine.is_native(name):
                    base = engine.append_batches(name, index, raws)
                else:
                    write_rows(engine, name, raws)
                    base, append_time = -1, False
                start, _ = engine.watermarks(name, index)
                done[(name, index)] = _answer(index, ErrorCode.none, None, base, now if append_time else -1, start)
            except SequenceError as exc:
                done[(name, index)] = _answer(index, ErrorCode[exc.code], str(exc))
            except NotFound as exc:
                done[(name, index)] = _answer(index, ErrorCode.unknown_topic_or_partition, str(exc))
            except StorageError as exc:
                done[(name, index)] = _answer(index, ErrorCode.invalid_record, str(exc))
        return done

    if work:
        answers.update(await broker.storage.call(append))
    if request.acks == 0:
        return None
    responses = [
        {"name": t.name, "partition_responses": [answers[(t.name, p.index)] for p in t.partition_data]}
        for t in request.topic_data
    ]
    return {"throttle_time": 0, "responses": responses}


def write_rows(engine: Engine, topic_name: str, batches: list[DecodedBatch]) -> None:
    """The records of *batches* as rows of a TDengine topic's tables (storage thread); each batch all or nothing."""
    topic = engine.catalog.topics[topic_name]
    stable = engine.catalog.stables.get((topic.db, topic.source))
    for batch in batches:
        values = [r.value or b"" for r in batch.records]
        if all(v.lstrip().startswith(b"{") for v in values):
            if stable is None:
                raise InvalidValue(f"JSON rows need a topic over a supertable; {topic_name} is not")
            rows = []
            for r in batch.records:
                try:
                    fields = orjson.loads(r.value or b"")
                except orjson.JSONDecodeError as exc:
                    raise InvalidValue(f"record at offset delta {r.offset - batch.base_offset}: {exc}") from None
                if not isinstance(fields, dict):
                    raise InvalidValue("a JSON row is an object")
                name = fields.pop("tbname", None) or (r.key or b"").decode()
                if not name:
                    raise InvalidValue("a JSON row names its subtable: the record key or a tbname field")
                rows.append((name, fields, r.timestamp))
            engine.write_json_rows(topic.db, stable.name, rows)
            continue
        if any(v.lstrip().startswith(b"{") for v in values):
            raise InvalidValue("a batch is either JSON rows or line protocol, not both")
        if stable is not None:
            measurements = {line.split(b",", 1)[0].split(b" ", 1)[0] for v in values for line in v.splitlines() if line}
            if measurements - {stable.name.encode()}:
                raise InvalidValue(f"line protocol into {topic_name} writes measurement {stable.name} only")
        precision = dict(batch.records[0].headers).get("precision") or b"ns"
        engine.write_lines(topic.db, b"\n".join(values), precision.decode())
