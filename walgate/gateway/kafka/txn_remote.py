"""The three transaction requests one cluster node makes of another (docs/cluster.md, "Transaction coordinators").

* :func:`write_markers`: the coordinator of a transaction asks the node of some of its partitions to write their
  markers (WriteTxnMarkers v1, Kafka's ``TransactionMarkerChannelManager``).
* :func:`add_partitions`: the node of a partition a transactional Produce writes to asks the producer's coordinator to
  add the partitions to its transaction (KIP-890 part 2, Produce v12) or whether they are in it (part 1, Produce v3 to
  v11): AddPartitionsToTxn v5, the brokers' form, as Kafka's ``AddPartitionsToTxnManager`` sends it; a group's
  coordinator asks it too (``verify_only``, for the group's ``__consumer_offsets`` partition) for a TxnOffsetCommit
  v0–v4 of a transactional id another node coordinates, as Kafka's group coordinator verifies it.
* :func:`add_offsets`: a group's coordinator, given a TxnOffsetCommit v5 of a transactional id another node
  coordinates, asks that node to take the group into the producer's transaction (AddOffsetsToTxn v4, KIP-890 part 2's
  implicit add).
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest
from kio.schema.add_offsets_to_txn.v4.response import AddOffsetsToTxnResponse
from kio.schema.add_partitions_to_txn.v5.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.schema.add_partitions_to_txn.v5.response import AddPartitionsToTxnResponse
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse
from kio.static.primitive import i16, i32

from walgate.gateway.kafka.node_links import NodeLinks, NodeUnreachable
from walgate.wire.errors import ErrorCode

__all__ = ["add_offsets", "add_partitions", "write_markers"]


def _topics(partitions: Sequence[tuple[str, int]]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


async def write_markers(links: NodeLinks, node: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                        commit: bool, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Node ``node``'s answer per partition (NONE once its marker is durable there). Raises
    :class:`~walgate.gateway.kafka.node_links.NodeUnreachable`."""
    marker = WritableTxnMarker(
        producer_id=ProducerId(producer_id), producer_epoch=i16(producer_epoch), transaction_result=commit,
        coordinator_epoch=i32(coordinator_epoch),
        topics=tuple(WritableTxnMarkerTopic(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
                     for t, ps in _topics(partitions).items()))
    answer: WriteTxnMarkersResponse = await links.call(node, WriteTxnMarkersRequest(markers=(marker,)))
    codes: dict[tuple[str, int], int] = {(str(t.name), int(p.partition_index)): int(p.error_code) for m in answer.markers for t in m.topics
             for p in t.partitions}
    return {tp: codes.get(tp, ErrorCode.unknown_server_error) for tp in partitions}


async def add_partitions(links: NodeLinks, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                         partitions: Sequence[tuple[str, int]], verify_only: bool) -> dict[tuple[str, int], int]:
    """The coordinator ``node``'s answer per partition; NETWORK_EXCEPTION for each when it could not be asked (Produce
    answers it as retriable)."""
    request = AddPartitionsToTxnRequest(transactions=(AddPartitionsToTxnTransaction(
        transactional_id=TransactionalId(transactional_id), producer_id=ProducerId(producer_id),
        producer_epoch=i16(producer_epoch), verify_only=verify_only,
        topics=tuple(AddPartitionsToTxnTopic(name=TopicName(t), partitions=tuple(i32(p) for p in ps))
                     for t, ps in _topics(partitions).items())),))
    try:
        answer: AddPartitionsToTxnResponse = await links.call(node, request)
    except NodeUnreachable:
        return dict.fromkeys(partitions, ErrorCode.network_exception)
    if answer.error_code == ErrorCode.cluster_authorization_failed:  # never the client's to see (fatal for the Java
        return dict.fromkeys(partitions, ErrorCode.invalid_txn_state)  # producer): Kafka's AddPartitionsToTxnManager
    if answer.error_code != ErrorCode.none:
        return dict.fromkeys(partitions, int(answer.error_code))
    codes: dict[tuple[str, int], int] = {(str(t.name), int(p.partition_index)): int(p.partition_error_code) for r in answer.results_by_transaction
             for t in r.topic_results for p in t.results_by_partition}
    return {tp: codes.get(tp, ErrorCode.unknown_server_error) for tp in partitions}


async def add_offsets(links: NodeLinks, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                      group: str) -> int:
    """The coordinator ``node``'s answer. Raises :class:`~walgate.gateway.kafka.node_links.NodeUnreachable`."""
    answer: AddOffsetsToTxnResponse = await links.call(node, AddOffsetsToTxnRequest(
        transactional_id=TransactionalId(transactional_id), producer_id=ProducerId(producer_id),
        producer_epoch=i16(producer_epoch), group_id=GroupId(group)))
    return int(answer.error_code)
