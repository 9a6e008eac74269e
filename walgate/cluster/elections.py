"""Leader elections (ElectLeaders, api 43; KIP-460) and replica moves (AlterPartitionReassignments, api 45;
KIP-455: :mod:`walgate.cluster.reassignments`) asked of the controller, through etcd.

Any node takes the request; only the controller writes partition states (one writer: its fenced transactions,
:class:`~walgate.cluster.partition_states.Reconciler`). So the node asked puts ``elections/requests/<id>``
(:meth:`Keys.election <walgate.cluster.model.Keys.election>`) on its own lease, the controller's next pass decides
it on the states and registrations it read at one revision (:func:`decide`, :func:`walgate.replication.elections.
elect_leader`) and writes the elected states, deletes the request and puts ``elections/outcomes/<id>`` in one
fenced transaction (per :data:`~walgate.cluster.partition_codec.MAX_STATES_PER_TXN` elections), and the node asked
reads the outcome (:func:`ask`). etcd is the transport, as for catalog proposals (:mod:`walgate.gateway.
shared_catalog`): every node reaches it, and a request whose node died goes with its lease.

Values (JSON): a request ``{"type": 0|1, "partitions": [[db id, vgroup], ...]}``, or a reassignment's
(:mod:`walgate.cluster.reassignments`); an outcome ``{"results": [[db id, vgroup, error code], ...]}`` (0: elected,
or moved).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneError, Keys
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.reassignments import ReassignmentRequest, decode_reassignment, encode_reassignment
from walgate.cluster.reassignments import decide as decide_moves
from walgate.replication.elections import ElectionType, elect_leader
from walgate.replication.partition import PartitionState
from walgate.wire.errors import ErrorCode

__all__ = ["ElectionRequest", "ElectionRequestDamaged", "decode_request", "encode_request", "decode_outcome",
           "encode_outcome", "decide", "ask", "POLL_S"]

log = logging.getLogger("walgate.cluster")

POLL_S = 0.02
"""How often the node asked reads whether the controller answered."""


class ElectionRequestDamaged(ControlPlaneError):
    """An ``elections/`` value that is not walgate's: a request the controller answers with no result (the node
    asked answers UNKNOWN_SERVER_ERROR for each partition), or an outcome the node asked cannot read."""


@dataclass(frozen=True)
class ElectionRequest:
    """An election of ``partitions`` of type ``election``."""

    election: ElectionType
    partitions: tuple[PartitionId, ...]


def encode_request(request: ElectionRequest | ReassignmentRequest) -> bytes:
    if isinstance(request, ReassignmentRequest):
        return encode_reassignment(request)
    partitions = [[p.db_id, p.vgroup] for p in request.partitions]
    return json.dumps({"type": int(request.election), "partitions": partitions}).encode()


def decode_request(value: bytes) -> ElectionRequest | ReassignmentRequest:
    """Raises :class:`ElectionRequestDamaged`."""
    try:
        d = json.loads(value)
        if isinstance(d, dict) and "reassign" in d:
            return decode_reassignment(d)
        election = ElectionType(d["type"])
        partitions = tuple(_pid(p) for p in d["partitions"])
    except (ValueError, KeyError, TypeError) as e:
        raise ElectionRequestDamaged(f"an election request in etcd is not walgate's: {value[:200]!r} ({e})") from e
    return ElectionRequest(election, partitions)


def _pid(pair: object) -> PartitionId:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str) or type(pair[1]) is not int:
        raise TypeError(f"{pair!r} is not [db id, vgroup]")
    return PartitionId(pair[0], pair[1])


def encode_outcome(results: Mapping[PartitionId, ErrorCode]) -> bytes:
    return json.dumps({"results": [[p.db_id, p.vgroup, int(code)] for p, code in sorted(results.items())]}).encode()


def decode_outcome(value: bytes) -> dict[PartitionId, ErrorCode]:
    """Raises :class:`ElectionRequestDamaged`."""
    try:
        return {PartitionId(db, vgroup): ErrorCode(code) for db, vgroup, code in json.loads(value)["results"]}
    except (ValueError, KeyError, TypeError) as e:
        raise ElectionRequestDamaged(f"an election outcome in etcd is not walgate's: {value[:200]!r} ({e})") from e


def decide(request: ElectionRequest | ReassignmentRequest, states: Mapping[PartitionId, PartitionState],
           live: Mapping[int, int]) -> tuple[dict[PartitionId, PartitionState], dict[PartitionId, ErrorCode]]:
    """(the states to write, every partition's answer: NONE for those) of ``request`` on ``states`` under the
    registrations ``live`` (a reassignment: :func:`walgate.cluster.reassignments.decide`). A partition with no
    state (none made yet, or its key damaged) is answered as one with no eligible replica:
    PREFERRED_LEADER_NOT_AVAILABLE or ELIGIBLE_LEADERS_NOT_AVAILABLE."""
    if isinstance(request, ReassignmentRequest):
        return decide_moves(request, states, live)
    unavailable = (ErrorCode.preferred_leader_not_available if request.election == ElectionType.PREFERRED
                   else ErrorCode.eligible_leaders_not_available)
    writes: dict[PartitionId, PartitionState] = {}
    answers: dict[PartitionId, ErrorCode] = {}
    for pid in request.partitions:
        state = states.get(pid)
        answer = unavailable if state is None else elect_leader(state, request.election, live)
        if isinstance(answer, ErrorCode):
            answers[pid] = answer
        else:
            writes[pid], answers[pid] = answer, ErrorCode.none
    return writes, answers


async def ask(session: EtcdSession, keys: Keys, node_id: int, lease: int,
              request: ElectionRequest | ReassignmentRequest) -> dict[PartitionId, ErrorCode]:
    """Have the controller make ``request``: its answer per partition, once it wrote the states. Bound it
    with a timeout: a request not answered (no controller, no etcd quorum) is withdrawn when cancelled, unless the
    controller took it meanwhile (then its elections stand). Raises :class:`ControlPlaneError` (etcd did not take
    or answer a call) or :class:`ElectionRequestDamaged` (an outcome that is not walgate's)."""
    request_id = f"{node_id}-{uuid.uuid4().hex}"
    await session.txn([], [tx.Put(keys.election(request_id), encode_request(request), lease=lease)])
    try:
        while (kv := await session.get(keys.election_outcome(request_id))) is None:
            await asyncio.sleep(POLL_S)
    except BaseException:
        await asyncio.shield(_withdraw(session, keys, request_id))
        raise
    await session.txn([], [tx.Delete(keys.election_outcome(request_id))])
    return decode_outcome(kv.value)


async def _withdraw(session: EtcdSession, keys: Keys, request_id: str) -> None:
    key = keys.election(request_id)
    try:
        withdrawn, _ = await session.txn([tx.Version(key) > 0], [tx.Delete(key)])
    except ControlPlaneError as e:  # it goes with the lease
        log.warning("election request %s not withdrawn: %s", request_id, e)
        return
    if not withdrawn:  # answered meanwhile: the outcome goes with the lease
        log.info("election request %s was made after its node stopped waiting", request_id)
