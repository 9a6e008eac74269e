"""Connecting to a Kafka listener (walgate's or any broker's) with confluent-kafka, and turning its failures into
one-line :class:`AdminError` messages.

Every admin command starts with :func:`connect`: one Metadata request answered within ``--timeout`` seconds, or an
``AdminError`` — at once when the connection is refused (librdkafka reports all brokers down), else when the
time is up. Every later request is bounded by the same timeout through :func:`result`. librdkafka's own log lines
are silenced (``log_level`` 0): the command reports the failure itself, once. A failed TLS handshake or SASL
authentication fails the command at once with librdkafka's reason. Every client gets the settings of
``--command-config`` and ``-X`` (:mod:`walgate.admin.client_properties`) under the CLI's own.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, OffsetSpec

from walgate.admin.client_properties import ClientPropertiesError, client_properties

__all__ = [
    "AdminError",
    "Connection",
    "UsageError",
    "client_config",
    "connect",
    "describe_error",
    "result",
]

_FIRST_ATTEMPT = 0.1  # seconds; each Metadata attempt waits twice as long as the one before, checking in between
# whether librdkafka found every broker down (connection refused)

_BROKER_PREFIX = re.compile(r"^\S+/(bootstrap|\d+): ")  # librdkafka's "host:port/bootstrap: " before a reason

T = TypeVar("T")


class AdminError(Exception):
    """The server refused a request, or could not be reached (exit code 1)."""


class UsageError(Exception):
    """The command line does not make sense (exit code 2)."""


def describe_error(error: KafkaError) -> str:
    """``"<message> (<ERROR_NAME>)"`` for a librdkafka or broker error."""
    return f"{error.str()} ({error.name()})"


def client_config(args: argparse.Namespace, errors: list[KafkaError] | None = None) -> dict[str, Any]:
    """The settings every client of the CLI shares: ``--command-config`` and ``-X`` (named ``walgate-cli`` unless
    they set ``client.id``), then ``--bootstrap-server``, quiet, errors collected in ``errors``."""
    if args.command_config is None:
        text = None
    else:
        try:
            text = Path(args.command_config).read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read --command-config {args.command_config}: {e}") from None
    try:
        settings = client_properties(text, args.client_settings)
    except ClientPropertiesError as e:
        source = f"--command-config {args.command_config} / -X" if text is not None else "-X"
        raise UsageError(f"{source}: {e}") from None
    config: dict[str, Any] = {"client.id": "walgate-cli"} | settings
    config |= {"bootstrap.servers": args.bootstrap_server, "log_level": 0}
    if errors is not None:
        config["error_cb"] = errors.append
    return config


@dataclass
class Connection:
    """An AdminClient whose bootstrap server answered, with the cluster's metadata at that moment."""

    timeout: float
    admin: AdminClient
    metadata: ClusterMetadata

    def partitions(self, topic: str) -> list[int]:
        """The partition ids of ``topic``, sorted; ``AdminError`` if the server does not know it."""
        meta = self.metadata.topics.get(topic)
        if meta is None or (meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            raise AdminError(f"unknown topic '{topic}'")
        if meta.error is not None:
            raise AdminError(f"topic '{topic}': {describe_error(meta.error)}")
        return sorted(meta.partitions)

    def offsets(self, partitions: Iterable[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
        """ListOffsets for each ``(topic, partition)``: the earliest, latest or first at a timestamp (-1: none)."""
        request = {TopicPartition(topic, partition): spec for topic, partition in partitions}
        if not request:
            return {}
        futures = self.admin.list_offsets(request, request_timeout=self.timeout)
        return {
            (tp.topic, tp.partition): result(future, f"cannot list offsets of {tp.topic}[{tp.partition}]", self.timeout).offset
            for tp, future in futures.items()
        }


def connect(args: argparse.Namespace) -> Connection:
    """Connect to ``args.bootstrap_server`` and read the cluster's metadata, within ``args.timeout`` seconds."""
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    errors: list[KafkaError] = []
    try:
        admin = AdminClient(client_config(args, errors))
    except KafkaException as e:
        raise UsageError(f"bad client settings: {describe_error(e.args[0])}") from None
    deadline = time.monotonic() + args.timeout
    attempt = _FIRST_ATTEMPT
    while True:
        try:
            metadata = admin.list_topics(timeout=min(attempt, max(deadline - time.monotonic(), 0.001)))
        except KafkaException as e:
            error: KafkaError = e.args[0]
            if error.code() not in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
                raise AdminError(f"cannot read metadata from {args.bootstrap_server}: {describe_error(error)}") from None
        else:
            return Connection(args.timeout, admin, metadata)
        attempt *= 2
        admin.poll(0)  # serves error_cb
        refused = [e for e in errors if e.code() in (KafkaError._SSL, KafkaError._AUTHENTICATION)]
        if refused:  # a certificate or a password does not get better by retrying
            raise AdminError(f"cannot connect to {args.bootstrap_server}: {_BROKER_PREFIX.sub('', refused[0].str())}")
        if any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors):
            reasons = [e.str() for e in errors if e.code() in (KafkaError._TRANSPORT, KafkaError._RESOLVE)]
            reason = _BROKER_PREFIX.sub("", reasons[-1]) if reasons else (
                # connected, then closed without a word: typically plaintext to a TLS listener, or no SASL
                f"{errors[-1].str()}: the server closed the connection (a TLS or SASL listener needs "
                "--command-config or -X security.protocol=...)")
            raise AdminError(f"cannot connect to {args.bootstrap_server}: {reason}")
        if time.monotonic() >= deadline:
            raise AdminError(f"no answer from {args.bootstrap_server} within {args.timeout:g} s")


COORDINATOR_REQUEST_TIMEOUT_S = 3600.0
"""librdkafka's request timeout of the requests sent to a group's coordinator (DescribeConsumerGroups,
ListConsumerGroupOffsets, AlterConsumerGroupOffsets, DeleteConsumerGroups): its longest. librdkafka 2.16 aborts the
process when such a request's timeout lapses before the request went to the coordinator (one still being looked up;
confluentinc/librdkafka#4605, compat-tests/FINDINGS.md), so the wait is bounded by :func:`result` instead, and the
request still pending when the command exits is failed unsent by the AdminClient's destruction."""


def result(future: concurrent.futures.Future[T], what: str, timeout: float) -> T:
    """The value of an AdminClient future; ``AdminError("<what>: <reason>")`` if it failed or took too long."""
    try:
        return future.result(timeout=timeout)
    except KafkaException as e:
        raise AdminError(f"{what}: {describe_error(e.args[0])}") from None
    except concurrent.futures.TimeoutError:
        raise AdminError(f"{what}: no answer within {timeout:g} s") from None
