"""confluent-kafka admin requests sent to a group's coordinator (DescribeConsumerGroups, ListConsumerGroupOffsets,
DeleteConsumerGroups) made so that they cannot abort the process that makes them.

librdkafka 2.16 (bundled by confluent-kafka 2.16; confluentinc/librdkafka#4605, fix proposed in #5397, not released)
calls abort() -- ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed``, which a test run
shows only as ``Fatal Python error: Aborted`` -- when such a request's ``request_timeout`` lapses before the request
was sent to the coordinator (the coordinator not named yet: FindCoordinator answers COORDINATOR_NOT_AVAILABLE while
``__consumer_offsets`` is made, as Kafka's does; or its connection not up yet) and the coordinator is reached
afterwards: ``rd_kafka_admin_coord_request`` drops the last reference to the timed-out request's once-only trigger
and returns an error, on which ``rd_kafka_coord_req_fail`` hands the freed trigger to
``rd_kafka_admin_coord_response_parse``. Nothing in the broker's answers is needed: a timeout of 0.01 s against one
idle walgate node aborts at the first request. It killed a pytest-xdist worker in three CI runs (a 10 s timeout while
a 3-node cluster made ``__consumer_offsets`` on a loaded machine).

So every request here is made with librdkafka's longest timeout (:data:`NEVER_S`, which does not lapse within a
test) on an AdminClient of its own, and the wait is bounded here instead: a request not answered within ``wait_s``
is left out of the answer, and the AdminClient, dropped on return, fails it while it is still waiting for its
coordinator (a destroyed client fails a coordinator request before sending it, which is safe).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent import futures
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

NEVER_S = 3600.0
"""librdkafka's longest admin request timeout (``request_timeout`` 0..3600000 ms)."""

Ask = Callable[[AdminClient, float], Mapping[str, "futures.Future[Any]"]]
"""A coordinator-targeted request on an AdminClient with a ``request_timeout``, e.g.
``lambda admin, timeout: admin.describe_consumer_groups(groups, request_timeout=timeout)``."""


def coordinator_answers(bootstrap: str, ask: Ask, wait_s: float) -> dict[str, Any]:
    """Each group's answer to ``ask`` made through ``bootstrap`` (its result, or the KafkaException it failed with),
    for the groups answered within ``wait_s``; the others are left out."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    asked = ask(admin, NEVER_S)
    futures.wait(asked.values(), timeout=wait_s)
    return {group: _outcome(future) for group, future in asked.items() if future.done()}


def _outcome(future: futures.Future[Any]) -> Any:
    error = future.exception()
    if error is None:
        return future.result()
    assert isinstance(error, KafkaException), error
    return error


def described_groups(bootstrap: str, groups: list[str], wait_s: float) -> dict[str, Any]:
    """:func:`coordinator_answers` of DescribeConsumerGroups: group id -> ConsumerGroupDescription or
    KafkaException."""
    return coordinator_answers(
        bootstrap, lambda admin, timeout: admin.describe_consumer_groups(groups, request_timeout=timeout), wait_s)


def deleted_groups(bootstrap: str, groups: list[str], wait_s: float) -> dict[str, Any]:
    """:func:`coordinator_answers` of DeleteConsumerGroups: group id -> None (deleted) or KafkaException."""
    return coordinator_answers(
        bootstrap, lambda admin, timeout: admin.delete_consumer_groups(groups, request_timeout=timeout), wait_s)
