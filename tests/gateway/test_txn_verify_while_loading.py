"""A transactional Produce to a node that coordinates its transactional id but is still loading that id's replicated
coordinator partition (it took the lead on): the verification answers COORDINATOR_LOAD_IN_PROGRESS, which Produce
answers NOT_ENOUGH_REPLICAS (retriable), as Kafka's coordinator and ``AddPartitionsToTxnManager`` do; before, the
coordinator's state, not loaded yet, did not know the id and refused the batch INVALID_PRODUCER_ID_MAPPING, which made
clients abort a sound transaction (compat-tests/test_clients_under_kills.py's transactional producer after a node's
restart). walgate/gateway/kafka/transactions.py (``TransactionService._remote``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.gateway.test_handlers_hardening import Node, node  # noqa: F401 - node: the fixture
from tests.gateway.test_transactions_partition import TOPIC, produce, txn
from walgate.coordinator.transactions import TransactionCoordinator
from walgate.gateway.kafka.transactions import TransactionService
from walgate.wire.errors import ErrorCode


class Coordinators:
    """This node (1) coordinates every transactional id; ``loading``: its replicated partition is not loaded yet."""

    def __init__(self, loading: bool) -> None:
        self.member = SimpleNamespace(node_id=1)
        self.replicated = SimpleNamespace(loading=lambda key: loading)

    async def owner(self, key: str) -> int:
        return 1


def service(gw: Node, loading: bool) -> TransactionService:
    coordinators: Any = Coordinators(loading)
    return TransactionService(gw.engine, gw.storage, gw.storage, TransactionCoordinator(), coordinators=coordinators,
                              replicated=True)


async def test_verification_while_the_coordinator_partition_loads_is_retriable(node: Node) -> None:  # noqa: F811
    await node.storage.call(node.engine.create_kafka_topic, TOPIC, 1, {})
    loading = service(node, loading=True)
    parts = [(TOPIC, 0)]
    assert await loading.verify("app", 7, 0, parts, 9) == {(TOPIC, 0): ErrorCode.coordinator_load_in_progress}
    assert await loading.add_implicitly("app", 7, 0, parts) == {(TOPIC, 0): ErrorCode.coordinator_load_in_progress}
    node.broker.transactions = loading
    assert await produce(node, "app", TOPIC, {0: txn(7, 0)}) == {0: (ErrorCode.not_enough_replicas, -1)}
    assert await node.storage.call(node.engine.ongoing_transactions) == {}  # nothing written


async def test_once_loaded_an_unknown_id_is_refused_as_before(node: Node) -> None:  # noqa: F811
    await node.storage.call(node.engine.create_kafka_topic, TOPIC, 1, {})
    loaded = service(node, loading=False)
    assert await loaded.verify("app", 7, 0, [(TOPIC, 0)], 9) == {(TOPIC, 0): ErrorCode.invalid_producer_id_mapping}
