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
* TDengine topics (rows of supertables) do not take produced batches yet:
  INVALID_REQUEST with a message; unknown topics UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import time
from typing import Any

from walgate.gateway.kafka.broker import Broker
from walgate.storage.errors import NotFound, StorageError
from walgate.storage.kafka_topics import TOPIC_CONFIG_DEFAULTS
from walgate.storage.producers import SequenceError
from walgate.wire.errors import ErrorCode, WireError
from walgate.wire.records import validate_produced, with_log_append_time

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
            elif topic is None:
                answers[key] = _answer(p.index, ErrorCode.unknown_topic_or_partition, f"unknown topic {t.name}")
            elif topic.kind != "kafka":
                answers[key] = _answer(p.index, ErrorCode.invalid_request,
                                       f"{t.name} is a TDengine topic: walgate takes produced records in Kafka-native "
                                       "topics (CreateTopics) only")
            else:
                configs = {**TOPIC_CONFIG_DEFAULTS, **topic.configs}
                records = p.records or b""
                if len(records) > int(configs["segment.bytes"]):
                    answers[key] = _answer(p.index, ErrorCode.record_list_too_large,
                                           f"{len(records)} bytes are above segment.bytes {configs['segment.bytes']}")
                    continue
                try:
                    batches = validate_produced(records, int(configs["max.message.bytes"]))
                except WireError as exc:
                    answers[key] = _answer(p.index, exc.error_code, str(exc))
                    continue
                append_time = configs["message.timestamp.type"] == "LogAppendTime"
                raws = [with_log_append_time(b.raw, now) if append_time else b.raw for b in batches]
                work.append((t.name, p.index, raws, append_time))

    def append() -> dict[tuple[str, int], dict[str, Any]]:
        done = {}
        for name, index, raws, append_time in work:
            try:
                base = engine.append_batches(name, index, raws)
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
