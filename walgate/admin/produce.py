"""``walgate produce``: kafka-console-producer — one record per input line (stdin or a file), with an optional
key (``--key-separator``), headers, partition, compression and acks.

Every record is delivered or the command fails: it waits (within ``--timeout``) until the server has answered
for each one, then prints how many records went to which partition and offsets; a record the server refused
makes the exit code 1 with the first refusal. The topic must exist (``walgate topic create``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from confluent_kafka import KafkaError, Message, Producer

from walgate.admin.client import (
    AdminError,
    UsageError,
    client_config,
    connect,
    describe_error,
)
from walgate.admin.output import print_json

__all__ = ["produce", "split_line"]

_POLL_EVERY = 1000  # records between serving delivery reports


def split_line(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    """``(key, value)`` of one input line without its line ending; ``UsageError`` when ``separator`` is missing."""
    line = line.rstrip(b"\n").removesuffix(b"\r")
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise UsageError(f"line {number} has no key separator {separator.decode()!r}")
    return key, value


@dataclass
class _Partition:
    """What one partition took: the record count and offset range (``None`` with acks=0: not reported)."""

    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None


@dataclass
class _Deliveries:
    """Delivery reports: per partition what it took, and the refusals."""

    partitions: dict[int, _Partition] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def report(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            self.failures.append(describe_error(error))
            return
        partition, offset = msg.partition(), msg.offset()
        if partition is None:  # never on a delivered record; narrows the type
            return
        seen = self.partitions.setdefault(partition, _Partition())
        seen.records += 1
        if offset is not None and offset >= 0:
            seen.first_offset = offset if seen.first_offset is None else seen.first_offset
            seen.last_offset = offset

    @property
    def delivered(self) -> int:
        return sum(p.records for p in self.partitions.values())


def _lines(path: str) -> Iterator[bytes]:
    """The input lines, from stdin for ``-``; ``UsageError`` when the file cannot be read."""
    if path == "-":
        yield from sys.stdin.buffer
        return
    try:
        with open(path, "rb") as source:
            yield from source
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror}") from None


def produce(args: argparse.Namespace) -> None:
    """``walgate produce``: one record per line; ``AdminError`` unless the server took every one."""
    headers: list[tuple[str, str | bytes | None]] = [(k, v.encode()) for k, v in args.header]
    separator = args.key_separator.encode() if args.key_separator is not None else None
    if separator == b"":
        raise UsageError("--key-separator must not be empty")
    conn = connect(args)
    partitions = conn.partitions(args.topic)
    if args.partition is not None and args.partition not in partitions:
        raise AdminError(f"topic '{args.topic}' has no partition {args.partition}")
    producer = Producer(client_config(args) | {
        "acks": args.acks, "compression.type": args.compression, "linger.ms": 5,
        "message.timeout.ms": int(args.timeout * 1000),
    })
    deliveries = _Deliveries()
    produced = 0
    target = {"partition": args.partition} if args.partition is not None else {}
    try:
        for number, line in enumerate(_lines(args.file), 1):
            key, value = split_line(line, separator, number)
            while True:
                try:
                    producer.produce(args.topic, value, key, headers=headers or None,
                                     on_delivery=deliveries.report, **target)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            produced += 1
            if produced % _POLL_EVERY == 0:
                producer.poll(0)
    finally:
        undelivered = producer.flush(args.timeout)
    if deliveries.failures or undelivered:
        reason = deliveries.failures[0] if deliveries.failures else f"no answer within {args.timeout:g} s"
        raise AdminError(f"{produced - deliveries.delivered} of {produced} record(s) not produced to "
                         f"'{args.topic}': {reason}")
    ranges = [{"partition": p} | asdict(taken) for p, taken in sorted(deliveries.partitions.items())]
    if args.json:
        print_json({"topic": args.topic, "records": produced, "partitions": ranges})
        return
    where = ", ".join(f"partition {r['partition']}: {r['records']}" for r in ranges)
    print(f"{produced} record(s) produced to {args.topic}" + (f" ({where})" if where else ""))
