"""``walgate consume``: kafka-console-consumer / kcat ``-C`` — print a topic's records with their key, headers,
partition, offset and timestamp, as text in a ``--format`` or as JSON lines.

Without ``--group`` the CLI reads the partitions directly (assign, no group joined, nothing committed) from
the end, the beginning, an offset or a time. With ``--group`` it joins the group (subscribe) and commits what
it printed; where it starts is the group's committed offset, else the end (``--from-beginning``: the
beginning). It stops after ``-n`` records, at the end of every partition with ``--exit-at-end``, or at Ctrl-C;
the count goes to stderr as Kafka's tool prints it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from walgate.admin.client import (
    AdminError,
    Connection,
    UsageError,
    client_config,
    connect,
    describe_error,
)
from walgate.admin.output import note

__all__ = ["compile_format", "consume", "record_json"]

_POLL = 0.5  # seconds per poll; output is flushed whenever a poll comes back empty
_TOKEN = re.compile(r"%.?|\\.?|[^%\\]+", re.DOTALL)
_ESCAPES = {r"\n": "\n", r"\t": "\t", "\\\\": "\\", "%%": "%"}
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}


def _text(data: bytes | str | None) -> str | None:
    if data is None or isinstance(data, str):
        return data
    return data.decode("utf-8", "replace")


def _null(text: str | None) -> str:
    return "null" if text is None else text


def _timestamp(msg: Message) -> int | None:
    kind, ms = msg.timestamp()
    return ms if kind in _TIMESTAMP_TYPES else None


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _header_pairs(msg: Message) -> list[tuple[str, str | None]]:
    headers = msg.headers() or []
    return [(k, _text(v)) for k, v in (headers.items() if isinstance(headers, dict) else headers)]


def _headers(msg: Message) -> str:
    pairs = _header_pairs(msg)
    return ",".join(f"{k}={v or ''}" for k, v in pairs) if pairs else "NO_HEADERS"


_FIELDS: dict[str, Callable[[Message], str]] = {
    "%t": lambda m: m.topic() or "",
    "%p": lambda m: str(m.partition()),
    "%o": lambda m: str(m.offset()),
    "%k": lambda m: _null(_text(m.key())),
    "%v": lambda m: _null(_text(m.value())),
    "%h": _headers,
    "%T": lambda m: str(m.timestamp()[1]),  # -1 when the record has none
    "%d": lambda m: _iso(_timestamp(m)),
}


def compile_format(fmt: str) -> Callable[[Message], str]:
    """A record → line renderer for ``fmt``: ``%t`` topic, ``%p`` partition, ``%o`` offset, ``%k`` key, ``%v``
    value, ``%h`` headers (``k=v,...``), ``%T`` timestamp (ms), ``%d`` timestamp (ISO 8601 UTC), ``%%``, and
    ``\\n`` ``\\t`` ``\\\\``. A null key or value prints ``null``; ``UsageError`` for an unknown ``%x``."""
    parts: list[str | Callable[[Message], str]] = []
    for token in _TOKEN.findall(fmt):
        if token in _FIELDS:
            parts.append(_FIELDS[token])
        elif token in _ESCAPES:
            parts.append(_ESCAPES[token])
        elif token[0] in "%\\" and len(token) == 2:
            raise UsageError(f"unknown {token!r} in --format (known: {' '.join(_FIELDS)} %% \\n \\t \\\\)")
        else:
            parts.append(token)
    return lambda msg: "".join(p if isinstance(p, str) else p(msg) for p in parts)


def record_json(msg: Message) -> dict[str, Any]:
    """One record as ``--json`` prints it (key, value and header values decoded as UTF-8)."""
    return {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "timestamp": _timestamp(msg), "timestamp_type": _TIMESTAMP_TYPES.get(msg.timestamp()[0]),
        "key": _text(msg.key()), "value": _text(msg.value()),
        "headers": [{"key": k, "value": v} for k, v in _header_pairs(msg)],
    }


def _start_offsets(conn: Connection, args: argparse.Namespace, partitions: list[int]) -> list[TopicPartition]:
    if args.from_timestamp is not None:
        at = conn.offsets([(args.topic, p) for p in partitions], OffsetSpec.for_timestamp(args.from_timestamp))
        return [TopicPartition(args.topic, p, at[args.topic, p] if at[args.topic, p] >= 0 else OFFSET_END) for p in partitions]
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END if args.offset is None else args.offset
    return [TopicPartition(args.topic, p, start) for p in partitions]


def consume(args: argparse.Namespace) -> None:
    """``walgate consume``: print records until ``-n``, the end (``-e``) or Ctrl-C; the count to stderr."""
    if args.group and (args.offset is not None or args.from_timestamp is not None or args.partition is not None):
        raise UsageError("--offset, --from-timestamp and --partition read partitions directly: not with --group "
                         "(the group's committed offsets decide; move them with `walgate group reset-offsets`)")
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("-n/--max-messages must be at least 1")
    if args.offset is not None and args.offset < 0:
        raise UsageError("--offset must be a non-negative offset")
    render = (lambda msg: orjson.dumps(record_json(msg)).decode()) if args.json else compile_format(args.format)
    conn = connect(args)
    partitions = conn.partitions(args.topic)
    if args.partition is not None:
        if args.partition not in partitions:
            raise AdminError(f"topic '{args.topic}' has no partition {args.partition}")
        partitions = [args.partition]
    consumer = Consumer(client_config(args) | {
        "group.id": args.group or "walgate-cli-consume",  # without --group: never joined, nothing committed
        "enable.auto.commit": bool(args.group),
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.partition.eof": True,
    })
    count = 0
    try:
        if args.group:
            consumer.subscribe([args.topic])
        else:
            consumer.assign(_start_offsets(conn, args, partitions))
        at_end: set[int | None] = set()
        while args.max_messages is None or count < args.max_messages:
            msg = consumer.poll(_POLL)
            if msg is None:
                sys.stdout.flush()
                continue
            error = msg.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                assigned = {tp.partition for tp in consumer.assignment()}
                if args.exit_at_end and assigned and assigned <= at_end:
                    break
                continue
            if error is not None:
                raise AdminError(f"cannot consume '{args.topic}': {describe_error(error)}")
            at_end.discard(msg.partition())
            sys.stdout.write(render(msg) + "\n")
            count += 1
        sys.stdout.flush()
    except BrokenPipeError:  # `walgate consume ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()  # with --group: commits what was printed
    note(f"Processed a total of {count} messages")
