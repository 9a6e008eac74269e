"""A transaction coordinator's reading of another node's WriteTxnMarkers answers (walgate/gateway/kafka/transactions.py,
``TransactionService._remote_markers``): UNKNOWN_TOPIC_OR_PARTITION for a partition the coordinator still knows is
retriable (a node restarting or taking the partition over may not know it yet), the transaction stays decided and its
marker is sent again, as Kafka's ``TransactionMarkerRequestCompletionHandler`` retries it; for a partition the
coordinator's own topics no longer have (deleted) no marker is owed, as Kafka's ``TransactionMarkerChannelManager``
drops it. Before, every UNKNOWN_TOPIC_OR_PARTITION counted as written, so a node that did not know the partition yet
let the transaction complete with no marker there (its records open until the producer's next marker)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.gateway.test_handlers_hardening import Node, node  # noqa: F401 - node: the fixture
from walgate.coordinator.transactions import TransactionCoordinator, Txn, TxnState
from walgate.gateway.kafka.transactions import TransactionService
from walgate.storage.errors import StorageUnavailable
from walgate.wire.errors import ErrorCode

TOPIC = "tx"


class Links:
    """Node 2 answering every marker of a WriteTxnMarkers request with ``code``; the requests it got."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.requests: list[Any] = []

    async def call(self, to: int, request: Any) -> Any:
        self.requests.append((to, request))
        return SimpleNamespace(markers=[SimpleNamespace(topics=[
            SimpleNamespace(name=t.name, partitions=[SimpleNamespace(partition_index=p, error_code=self.code)
                                                     for p in t.partition_indexes])
            for t in m.topics]) for m in request.markers])


def aborting(partitions: list[tuple[str, int]]) -> Txn:
    return Txn("app", 7, 0, 60_000, TxnState.PREPARE_ABORT, 0, start_ms=1, partitions=frozenset(partitions))


def service(gw: Node, links: Links) -> TransactionService:
    coordinators: Any = SimpleNamespace(member=SimpleNamespace(node_id=1))
    return TransactionService(gw.engine, gw.storage, gw.storage, TransactionCoordinator(), coordinators=coordinators,
                              links=links)  # type: ignore[arg-type]


async def test_unknown_partition_the_coordinator_knows_is_sent_again(node: Node) -> None:  # noqa: F811
    await node.storage.call(node.engine.create_kafka_topic, TOPIC, 2, {})
    links = Links(ErrorCode.unknown_topic_or_partition)
    svc, written = service(node, links), set()
    with pytest.raises(StorageUnavailable, match=r"tx-1 UNKNOWN_TOPIC_OR_PARTITION"):
        await svc._remote_markers(aborting([(TOPIC, 1)]), {2: [(TOPIC, 1)]}, written)
    assert written == set() and len(links.requests) == 1


async def test_unknown_partition_the_coordinator_does_not_know_needs_no_marker(node: Node) -> None:  # noqa: F811
    await node.storage.call(node.engine.create_kafka_topic, TOPIC, 2, {})
    svc, written = service(node, Links(ErrorCode.unknown_topic_or_partition)), set()
    deleted = [("gone", 0), (TOPIC, 5)]  # a topic it does not have; a partition past the topic's count
    await svc._remote_markers(aborting(deleted), {2: deleted}, written)
    assert written == set(deleted)


async def test_written_markers_count_and_other_errors_do_not(node: Node) -> None:  # noqa: F811
    await node.storage.call(node.engine.create_kafka_topic, TOPIC, 2, {})
    svc, written = service(node, Links(ErrorCode.none)), set()
    await svc._remote_markers(aborting([(TOPIC, 0)]), {2: [(TOPIC, 0)]}, written)
    assert written == {(TOPIC, 0)}
    svc, written = service(node, Links(ErrorCode.not_leader_or_follower)), set()
    with pytest.raises(StorageUnavailable, match="NOT_LEADER_OR_FOLLOWER"):
        await svc._remote_markers(aborting([(TOPIC, 0)]), {2: [(TOPIC, 0)]}, written)
    assert written == set()
