"""Asking the controller, through etcd, for what only it writes: leader elections (ElectLeaders) and replica moves
(AlterPartitionReassignments); :func:`walgate.cluster.elections.ask` bounded by the request's timeout, with the
answer every partition gets when the controller could not be asked or did not answer."""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from walgate.cluster.elections import ElectionRequest, ask
from walgate.cluster.model import ControlPlaneError
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.reassignments import ReassignmentRequest
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.kafka.broker import Broker
from walgate.wire.errors import ErrorCode

__all__ = ["NotAnswered", "ask_controller", "ask_through"]


class NotAnswered(NamedTuple):
    """Why the controller gave no answer: REQUEST_TIMED_OUT and a message, for every partition asked."""

    error: ErrorCode
    message: str


async def ask_controller(broker: Broker, request: ElectionRequest | ReassignmentRequest, timeout_s: float,
                         what: str) -> dict[PartitionId, ErrorCode] | NotAnswered:
    """The controller's answer per partition to ``request`` asked through ``broker``'s cluster membership
    (:func:`ask_through`)."""
    return await ask_through(broker.cluster, request, timeout_s, what)


async def ask_through(member: ClusterMember | None, request: ElectionRequest | ReassignmentRequest, timeout_s: float,
                      what: str) -> dict[PartitionId, ErrorCode] | NotAnswered:
    """The controller's answer per partition to ``request`` (``what``: "elections", "replica moves", for the
    messages), asked on ``member``'s registration (the Kafka APIs and the SQL statements alike), or
    :class:`NotAnswered` when this node is not registered, the controller did not answer within ``timeout_s`` (no
    controller, no etcd quorum: what it did meanwhile stands) or etcd refused the question."""
    lease = None if member is None or member.registration is None else member.registration.lease_id
    if member is None or lease is None:
        return NotAnswered(ErrorCode.request_timed_out, "This node is not registered in its cluster now")
    try:
        async with asyncio.timeout(timeout_s):
            return await ask(member.session, member.keys, member.node_id, lease, request)
    except TimeoutError:
        return NotAnswered(ErrorCode.request_timed_out, f"The controller did not make the {what} within "
                           f"{timeout_s:g} s (no controller elected, or no etcd quorum)")
    except ControlPlaneError as e:  # (ElectionRequestDamaged included: an outcome that is not walgate's)
        return NotAnswered(ErrorCode.request_timed_out, f"The {what} could not be asked of the controller: {e}")
