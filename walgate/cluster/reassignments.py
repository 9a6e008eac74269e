"""Replica moves asked of the controller (AlterPartitionReassignments, api 45; KIP-455), through etcd.

As leader elections (:mod:`walgate.cluster.elections`): any node takes the request, only the controller writes
partition states. A reassignment request travels as an election request does (``elections/requests/<id>`` on the
asking node's lease, answered in ``elections/outcomes/<id>`` with the states it wrote, in one fenced transaction:
:meth:`Reconciler.serve_elections <walgate.cluster.partition_states.Reconciler.serve_elections>`), so the
controller serves both kinds in the order they were asked; its value tells them apart.

Value (JSON): ``{"reassign": [[db id, vgroup, [replica, ...] or null], ...]}``: null cancels the move in progress.
Each partition is decided on the states and registrations the controller read at one revision (:func:`decide`,
:mod:`walgate.replication.reassignment`); the controller's later passes complete each move once its target replicas
are in sync (:func:`walgate.replication.partition.settle`).

**A vgroup of one copy** (issue 26) has no partition state until its first move: the move starts from the state
:func:`first_states` makes from the catalog (its one replica leading in leader epoch 0, the only ISR member, as
``partition.initial_state`` makes any state), and the controller creates the moved state (the key compared absent)
with the ``place_vgroup`` record that places the vgroup on the move's replicas, in one transaction. The state then
lives on after the move completed (the catalog marks the vgroup replicated from that record on:
``DatabaseDef.replicated``): its leader epochs only grow, as every replicated vgroup's, where a state dropped after
the move and made again by a later one would start at epoch 0 below the epochs its copies' leader-epoch caches
hold; and the vgroup is served as a replicated one (acks=all, the high watermark, elections) by every node, so no
node ever serves it both ways at once. A kill -9 of the controller or a node mid-move is what it is for any
replicated vgroup's move: the state and the record are one transaction, the next controller completes or the
operator cancels the move (the vgroup then keeps its state, on its one original replica).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from walgate.cluster.partition_codec import PartitionId, ReplicatedVnode
from walgate.replication.partition import PartitionState, initial_state
from walgate.replication.reassignment import Refusal, cancel, reassign
from walgate.wire.errors import ErrorCode

__all__ = ["ReassignmentRequest", "encode_reassignment", "decode_reassignment", "decide", "first_states"]

log = logging.getLogger("walgate.cluster")


@dataclass(frozen=True)
class ReassignmentRequest:
    """Each partition's target replicas (the first the preferred leader), or None to cancel its move."""

    moves: tuple[tuple[PartitionId, tuple[int, ...] | None], ...]

    @property
    def partitions(self) -> tuple[PartitionId, ...]:
        return tuple(pid for pid, _ in self.moves)


def encode_reassignment(request: ReassignmentRequest) -> bytes:
    return json.dumps({"reassign": [[p.db_id, p.vgroup, None if target is None else list(target)]
                                    for p, target in request.moves]}).encode()


def decode_reassignment(d: Mapping[str, Any]) -> ReassignmentRequest:
    """The request a decoded value ``d`` holds; TypeError or ValueError when it is not one (the caller names the
    value as damaged)."""
    moves = []
    for entry in d["reassign"]:
        if not isinstance(entry, list) or len(entry) != 3:
            raise TypeError(f"{entry!r} is not [db id, vgroup, replicas or null]")
        db_id, vgroup, target = entry
        if not isinstance(db_id, str) or type(vgroup) is not int:
            raise TypeError(f"{entry!r} does not start with a db id and a vgroup")
        if target is not None and (not isinstance(target, list) or any(type(r) is not int for r in target)):
            raise TypeError(f"{target!r} is not a list of replicas or null")
        moves.append((PartitionId(db_id, vgroup), None if target is None else tuple(target)))
    return ReassignmentRequest(tuple(moves))


def first_states(request: ReassignmentRequest, states: Mapping[PartitionId, PartitionState],
                 one_copy: Mapping[PartitionId, ReplicatedVnode], live: Mapping[int, int]
                 ) -> dict[PartitionId, PartitionState]:
    """The states the moves ``request`` asks of vgroups of one copy start from (the module docstring): for each
    partition it moves (a cancellation moves nothing) that has no state in ``states`` and is in ``one_copy`` (the
    catalog's vgroups of one copy with no state), ``partition.initial_state`` of its one replica when that replica is
    registered in ``live`` (else none: nothing registered holds its data to copy, and the move is answered as a
    partition with no state)."""
    made: dict[PartitionId, PartitionState] = {}
    for pid, target in request.moves:
        vnode = one_copy.get(pid)
        if target is None or pid in states or vnode is None or not set(vnode.replicas) <= live.keys():
            continue
        made[pid] = initial_state(vnode.replicas, live, vnode.min_isr, vnode.unclean_election)
    return made


def decide(request: ReassignmentRequest, states: Mapping[PartitionId, PartitionState], live: Mapping[int, int]
           ) -> tuple[dict[PartitionId, PartitionState], dict[PartitionId, ErrorCode]]:
    """(the states to write, every partition's answer: NONE for those, and for a move that changes nothing) of
    ``request`` on ``states`` under the registrations ``live``. A partition with no state (none made yet, or its key
    damaged) is UNKNOWN_TOPIC_OR_PARTITION, as Kafka's controller answers a partition it does not hold; a partition
    named twice is decided once per naming, the later on the earlier's outcome. Refusals are logged with why."""
    writes: dict[PartitionId, PartitionState] = {}
    answers: dict[PartitionId, ErrorCode] = {}
    for pid, target in request.moves:
        state = writes.get(pid) or states.get(pid)
        if state is None:
            answers[pid] = ErrorCode.unknown_topic_or_partition
            continue
        new = cancel(state, live) if target is None else reassign(state, target, live)
        if isinstance(new, Refusal):
            log.info("controller: %s/%d: reassignment refused: %s", pid.db_id, pid.vgroup, new.message)
            answers[pid] = new.error
            continue
        answers[pid] = ErrorCode.none
        if replace(new, partition_epoch=state.partition_epoch) != state:
            writes[pid] = new
    return writes, answers
