"""AlterPartitionReassignments (key 45) v0-v1: moving a partition's replicas (KIP-455; the Admin's
``alterPartitionReassignments``, ``kafka-reassign-partitions``; v1: KIP-860's ``allow_replication_factor_change``).

As Kafka's ``ControllerApis.handleAlterPartitionReassignments`` and ``ReplicationControlManager``:

* Alter on the cluster, else the request's error and every partition's CLUSTER_AUTHORIZATION_FAILED;
* a topic or partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION;
* ``allow_replication_factor_change`` false and a target of another size than the replicas it moves from:
  INVALID_REPLICA_ASSIGNMENT;
* a replicated partition (issue 25) is decided and written by the controller, whichever node is asked
  (:mod:`walgate.cluster.reassignments`, through etcd: one writer of partition states): NONE when the move is
  written (or needs no change), INVALID_REPLICA_ASSIGNMENT (an empty or repeated target, a node not registered, fewer
  replicas than ``min.insync.replicas``, a cancellation that would need an unclean election),
  NO_REASSIGNMENT_IN_PROGRESS (a cancellation, null ``replicas``, with none); REQUEST_TIMED_OUT when the controller did
  not answer within the request's ``timeout_ms``;
* a target may name any registered node: the controller places the vgroup on the union while the move is in
  progress (a ``place_vgroup`` catalog record written with the state), an adding node opens the vnode empty and
  catches up from the leader, a removed node deletes its copy once the move completed (docs/cluster.md "Moving
  replicas");
* a partition of one copy (issue 26) moves as any other once the cluster runs with ``replication.enable``: the
  controller makes its first partition state with the move (:mod:`walgate.cluster.reassignments`); without it, or on
  a single node, INVALID_REPLICA_ASSIGNMENT saying why (:func:`~walgate.cluster.placement.one_copy_unmovable`).

The move then completes as the controller finds its target replicas in sync (ListPartitionReassignments shows it
meanwhile).
"""

from __future__ import annotations

from collections.abc import Iterable

from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.placement import one_copy_unmovable
from walgate.cluster.reassignments import ReassignmentRequest
from walgate.gateway.kafka.access import Operation, cluster_allowed
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.controller_requests import NotAnswered, ask_controller
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.handlers.metadata import broker_states
from walgate.wire.errors import ErrorCode
from walgate.wire.messages import AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse

API_KEY, MIN_VERSION, MAX_VERSION = 45, 0, 1

_MESSAGES = {
    ErrorCode.invalid_replica_assignment: "The replica assignment is invalid: empty or repeating a replica, naming a "
                                          "broker not registered, with fewer replicas than min.insync.replicas, or a "
                                          "cancellation that would need an unclean leader election.",
    ErrorCode.no_reassignment_in_progress: "No reassignment is in progress for this partition.",
}

Target = tuple[int, ...] | None


def _response(results: Iterable[tuple[str, int, int, str | None]], error: int = ErrorCode.none,
              message: str | None = None) -> AlterPartitionReassignmentsResponse:
    by_topic: dict[str, list[dict[str, object]]] = {}
    for topic, partition, code, text in results:
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code, "error_message": text})
    return {"throttle_time": 0, "error_code": error, "error_message": message, "allow_replication_factor_change": True,
            "responses": [{"name": t, "partitions": p} for t, p in by_topic.items()]}  # type: ignore[typeddict-item]


def _refused(topic: str, partition: int, placed: tuple[int, ...], stated: bool, target: Target,
             current: tuple[int, ...], allow_rf_change: bool, replication: bool) -> str | None:
    """Why this node refuses the move before asking the controller (the module docstring), None when it does not;
    ``stated``: whether the partition has a partition state (a replicated vgroup's)."""
    if target is None:
        return None  # (a cancellation of a partition with no state: NO_REASSIGNMENT_IN_PROGRESS, by the caller)
    if not stated:
        why = one_copy_unmovable(f"{topic}-{partition}", not placed, replication)
        if why is not None:
            return why
    if not allow_rf_change and len(target) != len(current):
        return f"The replication factor is changed from {len(current)} to {len(target)}"
    return None


async def handle(broker: Broker, ctx: RequestContext,
                 request: AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse:
    asked = [(t.name, p.partition_index, p.replicas) for t in request.topics for p in t.partitions]
    if not cluster_allowed(broker, ctx, Operation.ALTER):
        failed = ErrorCode.cluster_authorization_failed
        return _response(((t, p, failed, None) for t, p, _ in asked), failed)
    try:
        topics = broker.topics()
    except Exception as exc:  # noqa: BLE001 - answered, as every handler answers
        code = error_of(exc)
        return _response(((t, p, code, str(exc)) for t, p, _ in asked), code, str(exc))
    states = broker_states(broker)
    replication = topics.replication
    answers: dict[tuple[str, int], tuple[int, str | None]] = {}
    moves: dict[tuple[str, int], tuple[PartitionId, Target]] = {}
    for topic, partition, target in asked:
        if not topics.has_partition(topic, partition):
            answers[topic, partition] = ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
            continue
        vgroup = topics.vgroup_of(topic, partition)
        stated = topics.replicated_vgroup(topic, partition) is not None
        placed = topics.placed_replicas(topic, partition)
        state = states(*vgroup) if stated and vgroup is not None else None
        current = placed if state is None else state.original
        why = _refused(topic, partition, placed, stated, target, current, request.allow_replication_factor_change,
                       replication)
        if why is not None:
            answers[topic, partition] = ErrorCode.invalid_replica_assignment, why
        elif vgroup is None or (not stated and target is None):
            answers[topic, partition] = ErrorCode.no_reassignment_in_progress, None
        else:
            moves[topic, partition] = PartitionId(*vgroup), target
    if moves:
        request_moves = ReassignmentRequest(tuple(moves.values()))
        outcome = await ask_controller(broker, request_moves, request.timeout.total_seconds(), "replica moves")
        for key, (pid, _) in moves.items():
            answers[key] = ((outcome.error, outcome.message) if isinstance(outcome, NotAnswered)
                            else (outcome.get(pid, ErrorCode.unknown_server_error), None))
    return _response((t, p, code, message if message is not None or code == ErrorCode.none
                      else _MESSAGES.get(ErrorCode(code))) for (t, p), (code, message) in
                     ((k, answers[k]) for k in dict.fromkeys((t, p) for t, p, _ in asked)))
