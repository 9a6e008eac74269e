"""VnodeSnapshot (internal key 10002) v0: a follower whose copy of an SQL vgroup ends below its leader's log start
pages the leader's snapshot of the vnode (docs/plans/vnode-snapshot.md; Kafka's FetchSnapshot, KIP-630), never
advertised in ApiVersions (a node's registration names the versions it answers).

Only a cluster node may send it, and only as itself (as WalFetch: :mod:`walgate.gateway.kafka.handlers.wal_fetch`):
anything else is CLUSTER_AUTHORIZATION_FAILED. On the vnode's lane:

* a database this node does not know, a vnode not here, or one it does not lead now: NOT_LEADER_OR_FOLLOWER;
* ``current_leader_epoch`` older than the leader's: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH (KIP-320); a
  replica not of the vnode: NOT_LEADER_OR_FOLLOWER; a broker epoch older than the follower's registration or last
  fetch: STALE_BROKER_EPOCH (KIP-903), as WalFetch checks a follower;
* ``snapshot_id`` zero (begin): the leader takes a snapshot at its WAL's end (:meth:`Engine.snapshot_vnode
  <walgate.storage.engine.Engine.snapshot_vnode>`), holds it for this follower in this leader epoch
  (:class:`~walgate.gateway.kafka.held_snapshots.HeldSnapshots`, displacing the follower's earlier one) and answers
  its id, ``S0``, ``L``, size and first page; a disk that refuses it: KAFKA_STORAGE_ERROR, nothing held;
* else a snapshot not held for this follower, vnode and leader epoch (another epoch's, expired, displaced, or a
  leader restarted): SNAPSHOT_NOT_FOUND; ``position`` outside ``[0, size]``: POSITION_OUT_OF_RANGE; else the page
  of at most ``max_bytes`` (and :data:`PAGE_MAX`) from ``position``, empty at the end.

Every answer carries the leader's epoch once the vnode is led here.
"""

from __future__ import annotations

import shutil
import time
import uuid
from typing import cast

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.held_snapshots import Held, HeldSnapshots
from walgate.gateway.kafka.led_vnodes import LedVnodes
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.replication.partition import check_leader_epoch
from walgate.storage.engine import Engine
from walgate.storage.errors import NotHere
from walgate.storage.lanes import LaneViolation
from walgate.storage.vnode_snapshot import read
from walgate.wire.errors import ErrorCode
from walgate.wire.internal import VNODE_SNAPSHOT
from walgate.wire.messages import VnodeSnapshotRequest, VnodeSnapshotResponse
from walgate.wire.protocol import ZERO_UUID

API_KEY, MIN_VERSION, MAX_VERSION = VNODE_SNAPSHOT, 0, 0

PAGE_MAX = 8 << 20
"""The most bytes of one page, whatever the follower asks (a response is built in memory)."""


def _answer(code: int, **fields: object) -> VnodeSnapshotResponse:
    return cast(VnodeSnapshotResponse, {"throttle_time": 0, "error_code": code, "snapshot_id": ZERO_UUID, "data": b"",
                                        **fields})


def _page(held: Held, position: int, max_bytes: int, leader_epoch: int) -> VnodeSnapshotResponse:
    m = held.manifest
    known = {"leader_epoch": leader_epoch, "snapshot_id": uuid.UUID(hex=m.snapshot_id), "start_version":
             m.start_version, "end_version": m.end_version, "size": m.total_bytes, "position": position}
    if not 0 <= position <= m.total_bytes:
        return _answer(ErrorCode.position_out_of_range, **known)
    try:
        data = read(held.directory, m, position, min(max_bytes, PAGE_MAX)) if position < m.total_bytes else b""
    except OSError:  # (its files removed meanwhile: the follower begins again)
        return _answer(ErrorCode.snapshot_not_found, leader_epoch=leader_epoch)
    return _answer(ErrorCode.none, **known, data=data)


def _drop(gone: list[Held]) -> None:
    for h in gone:
        shutil.rmtree(h.directory, ignore_errors=True)


def _on_lane(engine: Engine, led: LedVnodes, held: HeldSnapshots, request: VnodeSnapshotRequest, db: str,
             now_ms: int) -> VnodeSnapshotResponse:
    """The answer (the module docstring), on the vnode's lane."""
    db_id = request.db_id.hex if request.db_id is not None else ""
    view = led.leader_view(db_id, request.vgroup)
    if view is None or view.deposed:
        return _answer(ErrorCode.not_leader_or_follower)
    epoch = view.leader_epoch
    error = check_leader_epoch(epoch, request.current_leader_epoch) or view.check_follower(
        request.replica_id, request.broker_epoch, led.registered_epoch(request.replica_id))
    if error is not None:
        return _answer(error, leader_epoch=epoch)
    _drop(held.expire(now_ms))
    if request.snapshot_id is None or request.snapshot_id == ZERO_UUID:
        try:
            directory, manifest = engine.snapshot_vnode(db, request.vgroup, uuid.uuid4().hex)
        except (NotHere, LaneViolation):
            return _answer(ErrorCode.not_leader_or_follower, leader_epoch=epoch)
        taken = Held(db_id, request.vgroup, request.replica_id, epoch, directory, manifest, now_ms)
        _drop(held.add(taken, now_ms))
        return _page(taken, 0, request.max_bytes, epoch)
    found = held.page(request.snapshot_id.hex, db_id, request.vgroup, request.replica_id, epoch, now_ms)
    if found is None:
        return _answer(ErrorCode.snapshot_not_found, leader_epoch=epoch)
    return _page(found, request.position, request.max_bytes, epoch)


async def handle(broker: Broker, ctx: RequestContext, request: VnodeSnapshotRequest) -> VnodeSnapshotResponse:
    led = broker.led
    auth = ctx.authentication  # (a node pages only as itself: the module docstring)
    if not from_cluster_node(broker, ctx) or auth is None or auth.node != request.replica_id:
        return _answer(ErrorCode.cluster_authorization_failed)
    db = None if request.db_id is None else broker.topics().database_by_id(request.db_id.hex)
    if led is None or db is None:
        return _answer(ErrorCode.not_leader_or_follower)
    keys = frozenset({(db.name, request.vgroup)})
    try:
        return await broker.call_on(lambda _: keys, _on_lane, led, broker.held_snapshots, request, db.name,
                                    int(time.monotonic() * 1000))
    except Exception as exc:  # noqa: BLE001 - answered as an error code (a refused disk: KAFKA_STORAGE_ERROR)
        return _answer(error_of(exc))
