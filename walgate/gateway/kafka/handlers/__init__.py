"""The handler table: one module per Kafka API, registered by api key.

ApiVersions advertises exactly this table intersected with what the wire
layer can decode/encode, so nothing is advertised that is not handled; walgate's internal APIs
(:mod:`walgate.wire.internal`: WalFetch, VnodeSnapshot) are in the table but never advertised (:func:`internal`).
A handler is ``async (broker, ctx, request) -> fields``, ``ctx`` the request's
:class:`~walgate.gateway.kafka.context.RequestContext` (who sent it: principal,
peer, listener; its header: api key and version, client id, correlation id), ``request`` the API's
request view (:mod:`walgate.wire.messages`' ``<Api>Request``: every field of every version, Kafka's default where
the version lacks it), where ``fields`` is
the version-agnostic mapping (the API's ``<Api>Response`` typed dict) :func:`walgate.wire.protocol.build_response`
turns into the response of the request's version, or, for a request that gets
no response (Produce with acks=0), that mapping wrapped in
:class:`~.common.Unanswered`; Produce gives a :class:`~.common.Deferred` of either once its appends are made, the
rest awaited while the connection's next Produce is handled. A handler does not raise: whatever the
engine or the coordinator raises is answered as an error code, per partition,
group or resource (:mod:`.common`), so the connection stays up. It reaches the
engine only on the storage thread (:meth:`~walgate.gateway.kafka.broker.Broker.call`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition_reassignments,
    alter_share_group_offsets,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_producers,
    describe_share_group_offsets,
    describe_topic_partitions,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    read_share_group_state,
    read_share_group_state_summary,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    sync_group,
    txn_offset_commit,
    vnode_snapshot,
    wal_fetch,
    write_share_group_state,
    write_txn_markers,
)
from walgate.gateway.kafka.handlers.common import Deferred, Unanswered
from walgate.wire import messages
from walgate.wire.internal import VERSIONS as INTERNAL
from walgate.wire.protocol import WIRE_VERSIONS

__all__ = ["Handler", "HANDLERS", "advertised", "internal"]

HandlerFn = Callable[[Any, RequestContext, Any],
                     Awaitable[Mapping[str, Any] | Unanswered | Deferred[Mapping[str, Any] | Unanswered]]]


@dataclass(frozen=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn


_MODULES = (
    api_versions, metadata, list_offsets, fetch, produce, describe_cluster, describe_topic_partitions, offset_for_leader_epoch,
    find_coordinator, join_group, sync_group, heartbeat, leave_group, offset_commit, offset_fetch, describe_groups,
    list_groups, delete_groups, offset_delete, consumer_group_heartbeat, consumer_group_describe,
    init_producer_id, create_topics, delete_topics, describe_configs, incremental_alter_configs, create_partitions,
    delete_records, create_acls, describe_acls, delete_acls,
    describe_client_quotas, alter_client_quotas, alter_configs,
    sasl_handshake, sasl_authenticate, describe_user_scram_credentials, alter_user_scram_credentials,
    describe_producers, elect_leaders, alter_partition_reassignments, list_partition_reassignments,
    add_partitions_to_txn, add_offsets_to_txn, txn_offset_commit, end_txn, write_txn_markers, describe_transactions,
    list_transactions,
    share_group_heartbeat, share_group_describe, share_fetch, share_acknowledge,
    describe_share_group_offsets, alter_share_group_offsets, delete_share_group_offsets,
    wal_fetch, vnode_snapshot,
    initialize_share_group_state, delete_share_group_state, read_share_group_state_summary,
    read_share_group_state, write_share_group_state,
)
HANDLERS: dict[int, Handler] = {m.API_KEY: Handler(m.API_KEY, m.MIN_VERSION, m.MAX_VERSION, m.handle) for m in _MODULES}

if messages.VERSIONS != WIRE_VERSIONS:  # an API or version without its request view: refused at start, not per request
    raise RuntimeError("walgate/wire/messages.py was generated for other API versions: run ./run gen")


def _clipped(internal_apis: bool) -> dict[int, tuple[int, int]]:
    out = {}
    for key, h in sorted(HANDLERS.items()):
        if (key in INTERNAL) != internal_apis:
            continue
        lo, hi = WIRE_VERSIONS[key]
        lo, hi = max(lo, h.min_version), min(hi, h.max_version)
        if lo <= hi:
            out[key] = (lo, hi)
    return out


def advertised() -> dict[int, tuple[int, int]]:
    """(min, max) version per api key: the handler's range clipped to the wire layer's; never an internal API's."""
    return _clipped(internal_apis=False)


def internal() -> dict[int, tuple[int, int]]:
    """(min, max) version per internal api key (:mod:`walgate.wire.internal`): handled, never advertised."""
    return _clipped(internal_apis=True)
