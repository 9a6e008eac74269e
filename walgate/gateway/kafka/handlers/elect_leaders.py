"""ElectLeaders (key 43) v0–v2: preferred and unclean leader elections (KIP-460; the Admin's ``electLeaders``,
``kafka-leader-election``).

As Kafka's ``KafkaApis.handleElectLeaders`` and its controller's ``ReplicationControlManager.electLeaders``:

* Alter on the cluster, else the request's error and every partition's CLUSTER_AUTHORIZATION_FAILED;
* an ``election_type`` other than PREFERRED (0) and UNCLEAN (1): INVALID_REQUEST;
* a topic or partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION;
* a partition of one copy: its node is its preferred and only leader: ELECTION_NOT_NEEDED while that node is
  registered, else PREFERRED_LEADER_NOT_AVAILABLE (PREFERRED) or ELIGIBLE_LEADERS_NOT_AVAILABLE (UNCLEAN);
* a replicated partition (issue 25) is decided and written by the controller, whichever node is asked
  (:mod:`walgate.cluster.elections`: the request goes through etcd, one writer of partition states):
  NONE when elected, ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE
  (:mod:`walgate.replication.elections`); REQUEST_TIMED_OUT when the controller did not answer within the
  request's ``timeout_ms`` (no controller, no etcd quorum: the elections it made meanwhile stand);
* null ``topic_partitions``: every partition of every topic, and only those whose election was not ELECTION_NOT_NEEDED
  are answered.
"""

from __future__ import annotations

from collections.abc import Iterable

from walgate.cluster.elections import ElectionRequest
from walgate.cluster.partition_codec import PartitionId
from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.controller_requests import NotAnswered, ask_controller
from walgate.gateway.kafka.handlers.common import error_of
from walgate.replication.elections import ElectionType
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResponseReplicaElectionResult,
)

API_KEY, MIN_VERSION, MAX_VERSION = 43, 0, 2

_MESSAGES = {
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: "The preferred leader is not in the ISR or not registered.",
    ErrorCode.eligible_leaders_not_available: "No replica of the partition is registered.",
}


def _named(request: ElectLeadersRequest) -> list[tuple[str, int]]:
    """The (topic, partition) pairs the request names, in its order without repeats (none for a null
    ``topic_partitions``)."""
    return list(dict.fromkeys((t.topic, p) for t in request.topic_partitions or () for p in t.partitions))


def _response(results: Iterable[tuple[str, int, int, str | None]], error: int = ErrorCode.none) -> ElectLeadersResponse:
    by_topic: dict[str, ElectLeadersResponseReplicaElectionResult] = {}
    for topic, partition, code, message in results:
        entry = by_topic.setdefault(topic, {"topic": topic, "partition_result": []})
        entry["partition_result"].append({"partition_id": partition, "error_code": code,  # type: ignore[attr-defined]
                                          "error_message": message})
    return {"throttle_time": 0, "error_code": error, "replica_election_results": list(by_topic.values())}


async def handle(broker: Broker, ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    asked = _named(request)
    if not cluster_allowed(broker, ctx, Operation.ALTER):
        failed = ErrorCode.cluster_authorization_failed
        return _response(((t, p, failed, None) for t, p in asked), failed)
    if request.election_type not in tuple(ElectionType):
        message = f"Unknown election type {request.election_type}"
        return _response(((t, p, ErrorCode.invalid_request, message) for t, p in asked), ErrorCode.invalid_request)
    try:
        topics = broker.topics()
    except Exception as exc:  # noqa: BLE001 - answered, as every handler answers
        code = error_of(exc)
        return _response(((t, p, code, str(exc)) for t, p in asked), code)
    if request.topic_partitions is None:
        asked = [(t, p) for t in sorted(topics.names()) for p in range(topics.partition_count(t) or 0)]
    election = ElectionType(request.election_type)
    unavailable = (ErrorCode.preferred_leader_not_available if election == ElectionType.PREFERRED
                   else ErrorCode.eligible_leaders_not_available)
    live = broker.cluster.broker_epochs if broker.cluster is not None else {broker.node_id: 0}
    answers: dict[tuple[str, int], tuple[int, str | None]] = {}
    replicated: dict[tuple[str, int], PartitionId] = {}
    for topic, partition in asked:
        if not topics.has_partition(topic, partition):
            answers[topic, partition] = ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
        elif (vgroup := topics.replicated_vgroup(topic, partition)) is not None:
            replicated[topic, partition] = PartitionId(*vgroup)
        else:
            node = topics.node_of(topic, partition, broker.node_id)
            answers[topic, partition] = (ErrorCode.election_not_needed, None) if node in live else (unavailable, None)
    if replicated:
        answers |= await _controller(broker, election, replicated, request.timeout.total_seconds())
    results = [(t, p, code, message if message is not None else _MESSAGES.get(ErrorCode(code)))
               for (t, p), (code, message) in ((k, answers[k]) for k in asked)]
    if request.topic_partitions is None:  # (as Kafka: a partition whose leader is already the one asked is left out)
        results = [r for r in results if r[2] != ErrorCode.election_not_needed]
    return _response(results)


async def _controller(broker: Broker, election: ElectionType, replicated: dict[tuple[str, int], PartitionId],
                      timeout_s: float) -> dict[tuple[str, int], tuple[int, str | None]]:
    """The controller's answers for the ``replicated`` partitions (topic, partition -> its vgroup), through etcd."""
    request = ElectionRequest(election, tuple(dict.fromkeys(replicated.values())))
    outcome = await ask_controller(broker, request, timeout_s, "elections")
    if isinstance(outcome, NotAnswered):
        return {k: (outcome.error, outcome.message) for k in replicated}
    return {k: (outcome.get(pid, ErrorCode.unknown_server_error), None) for k, pid in replicated.items()}
