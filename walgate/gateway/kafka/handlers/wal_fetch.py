"""WalFetch (internal key 10001) v0-v1: a follower copies its leader's WAL entries (docs/plans/replication-wiring.md,
step 4), never advertised in ApiVersions (a node's registration names the versions it answers,
:meth:`NodeLinks.version <walgate.gateway.kafka.node_links.NodeLinks.version>`).

Only a cluster node may send it (Kafka's ClusterAction on the cluster, as for a replica's Fetch: a connection
authenticated with the node token, :mod:`walgate.gateway.kafka.node_auth`), and only as itself: a client, any
request to a single node, or a node whose ``replica_id`` is not the node its connection authenticated as (which
would move another replica's position and the high watermark) gets CLUSTER_AUTHORIZATION_FAILED for every
partition (Kafka's brokers share one principal, so its leader cannot tell; each walgate node has its own user).
Per vnode, in the request's order, on the vnode's lane:

* a database this node does not know, a vnode not here, or one it does not lead (:attr:`Broker.led
  <walgate.gateway.kafka.broker.Broker.led>` has no view of it, or the view was deposed): NOT_LEADER_OR_FOLLOWER;
* ``current_leader_epoch`` older than the leader's: FENCED_LEADER_EPOCH, newer: UNKNOWN_LEADER_EPOCH (KIP-320);
  then, as Kafka's leader checks a follower before it reads: a replica not of the vnode, NOT_LEADER_OR_FOLLOWER; a
  broker epoch older than the follower's registration or last fetch, STALE_BROKER_EPOCH (KIP-903);
* ``fetch_version`` below the WAL's log start: OFFSET_OUT_OF_RANGE with ``log_start_version`` (the follower must
  start over at it: Kafka's ``truncateFullyAndStartAt``);
* ``last_fetched_epoch`` given and the leader's cache not knowing where it ends (a newer epoch than the leader's,
  an empty cache): OFFSET_OUT_OF_RANGE, as Kafka's leader answers it (never a divergence to version 0, which would
  make the follower cut everything); saying that epoch ends before ``fetch_version``, or holding
  only an older one: no entries but ``diverging_epoch`` = (the largest epoch held up to it, where it ends), the
  follower truncates there and fetches again (KIP-101/279, delivered as Kafka's Fetch does since KIP-595's
  DivergingEpoch: one round trip, no window for a leader change between asking and fetching);
* the fetch recorded in the leader's :class:`~walgate.replication.leader.LeaderView` (``fetch_version`` past the
  WAL's end: OFFSET_OUT_OF_RANGE), never a diverging one, whose position would overstate what the follower holds;
  the high watermark updated and :meth:`LedVnodes.fetched <walgate.gateway.kafka.led_vnodes.LedVnodes.fetched>`
  told (readers woken, acks=all writes answered);
* else whole batches from ``fetch_version`` (:meth:`Wal.batches_from <walgate.storage.wal.Wal.batches_from>`, sent
  with ``sendfile`` from :data:`~walgate.storage.partitions.SENDFILE_MIN_BYTES` on, as Fetch's), never past the
  start of the next leader epoch, all of ``entries_epoch``: more than one only within ``partition_max_bytes`` and
  what is left of ``max_bytes``; at least one (whatever its size) until a vnode before it in the request has
  entries, none after once nothing is left; with the high watermark (a WAL version) and the log start;
* v1 (KIP-107's log start offsets): every answer carries the log start offset of each topic over the vnode whose log
  start is past 0 (DeleteRecords', retention's), which the follower takes, and a fetch records the ones the follower
  reports in its view (:meth:`LeaderView.low_watermark <walgate.replication.leader.LeaderView.low_watermark>`:
  what DeleteRecords waits for);
* none at all, the fetch recorded as above, for a follower outside the ISR of a vnode the leader's replication
  throttle holds back (KIP-73: :meth:`ReplicationTraffic.hold_leader
  <walgate.gateway.replication_traffic.ReplicationTraffic.hold_leader>`); the entry bytes answered are counted there.

A follower at the end waits (long poll) until ``max_wait_ms`` passes or the answer holds ``min_bytes``: woken by
any append to a vnode it asked for (:meth:`FetchWakeups.watch_vnodes
<walgate.gateway.kafka.wakeups.FetchWakeups.watch_vnodes>`, which every WAL append tells, whatever the vnode holds),
and at once when a partition has an error or a divergence.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence, Sized
from typing import cast

from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.context import RequestContext
from walgate.gateway.kafka.handlers.common import error_of
from walgate.gateway.kafka.led_vnodes import LedVnodes
from walgate.gateway.kafka.node_auth import from_cluster_node
from walgate.gateway.replication_traffic import ReplicationTraffic
from walgate.replication.epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from walgate.replication.partition import PartitionState, check_leader_epoch
from walgate.storage.engine import Engine
from walgate.storage.errors import NotHere
from walgate.storage.lanes import LaneViolation, VnodeKey
from walgate.storage.partitions import SENDFILE_MIN_BYTES
from walgate.storage.vnode import Vnode
from walgate.wire.errors import ErrorCode
from walgate.wire.internal import WAL_FETCH
from walgate.wire.messages import WalFetchPartition, WalFetchPartitionData, WalFetchRequest, WalFetchResponse

API_KEY, MIN_VERSION, MAX_VERSION = WAL_FETCH, 0, 1

_NOT_DIVERGING = {"epoch": -1, "end_version": -1}


def _answer(p: WalFetchPartition, code: int, **fields: object) -> WalFetchPartitionData:
    return {"db_id": p.db_id, "vgroup": p.vgroup, "error_code": code, "diverging_epoch": dict(_NOT_DIVERGING),
            "entries": None, "log_starts": [], **fields}  # type: ignore[typeddict-item]


def _entries_epoch(vnode: Vnode, version: int) -> tuple[int, int]:
    """(the epoch that wrote ``version``, the version where the next epoch starts, else the WAL's end)."""
    epoch, stop = -1, vnode.wal.next_version
    for entry in vnode.epochs.entries:
        if entry.start_offset <= version:
            epoch = entry.epoch
        else:
            stop = entry.start_offset
            break
    return epoch, stop


def _partition(engine: Engine, led: LedVnodes, request: WalFetchRequest, p: WalFetchPartition, db: str | None,
               limit: int, now_ms: int, version: int) -> WalFetchPartitionData:
    """One vnode's answer (the module docstring; ``version``: the request's), on its lane."""
    if db is None or p.db_id is None:
        return _answer(p, ErrorCode.not_leader_or_follower)
    view = led.leader_view(p.db_id.hex, p.vgroup)
    if view is None or view.deposed:
        return _answer(p, ErrorCode.not_leader_or_follower)
    try:
        vnode = engine.store.local_vnode(db, p.vgroup)
    except (NotHere, LaneViolation):  # (a database made since the keys were taken: the follower asks again)
        return _answer(p, ErrorCode.not_leader_or_follower)
    wal = vnode.wal
    known: dict[str, object] = {"leader_epoch": view.leader_epoch, "log_start_version": wal.first_version,
                                "high_watermark": view.hw, "log_starts": [  # (v1+: a v0 answer has none)
                                    {"topic_id": t, "start_offset": o} for t, o in engine.views.log_starts(
                                        db, p.vgroup).items()] if version >= 1 else []}
    registered = led.registered_epoch(request.replica_id)
    error = check_leader_epoch(view.leader_epoch, p.current_leader_epoch) or view.check_follower(
        request.replica_id, request.broker_epoch, registered)
    if error is not None:
        return _answer(p, error, **known)
    if p.fetch_version < wal.first_version:
        return _answer(p, ErrorCode.offset_out_of_range, **known)
    if p.last_fetched_epoch >= 0:
        end = vnode.epochs.end_for(p.last_fetched_epoch, wal.next_version)
        if end.epoch == UNDEFINED_EPOCH or end.end_offset == UNDEFINED_OFFSET:  # (as Kafka's readRecords)
            return _answer(p, ErrorCode.offset_out_of_range, **known)
        if end.epoch < p.last_fetched_epoch or end.end_offset < p.fetch_version:
            return _answer(p, ErrorCode.none, **known,
                           diverging_epoch={"epoch": end.epoch, "end_version": end.end_offset})
    reported = None if version < 1 else {t.topic_id.hex: t.start_offset for t in p.log_starts if t.topic_id}
    error = view.on_fetch(request.replica_id, request.broker_epoch, registered, p.current_leader_epoch,
                          p.fetch_version, p.durable_version, wal.next_version, now_ms, reported)
    if error is not None:
        return _answer(p, error, **known)
    known["high_watermark"] = view.update_hw(wal.next_version, wal.durable_version)
    led.fetched(p.db_id.hex, p.vgroup)
    epoch, stop = _entries_epoch(vnode, p.fetch_version)
    if limit <= 0:
        return _answer(p, ErrorCode.none, **known, entries_epoch=epoch)
    try:
        entries = wal.batches_from(p.fetch_version, limit, stop)
    except ValueError:  # no batch starts there: not a version this leader's log has a batch boundary at
        return _answer(p, ErrorCode.offset_out_of_range, **known)
    if entries is None:
        return _answer(p, ErrorCode.none, **known, entries_epoch=epoch)
    chunk = entries if len(entries) >= SENDFILE_MIN_BYTES else entries.read()  # (as Fetch: small ones copied)
    return _answer(p, ErrorCode.none, **known, entries_epoch=epoch, entries=[chunk])


def _read(engine: Engine, led: LedVnodes, request: WalFetchRequest, names: Sequence[str | None],
          held_back: frozenset[int], now_ms: int, version: int) -> list[WalFetchPartitionData]:
    """Every vnode's answer, in order; ``max_bytes`` shared: each vnode's limit is the least of its
    ``partition_max_bytes`` and what is left, until a vnode has entries at least one batch (as Kafka's
    ``ReplicaManager.readFromLog``, ``minOneMessage``); none for the vnodes (their indexes) ``held_back`` by the
    leader's replication throttle, whose fetch is still recorded (as Kafka reads and then empties it)."""
    left = request.max_bytes
    out: list[WalFetchPartitionData] = []
    sent = False
    for i, (p, db) in enumerate(zip(request.partitions, names)):
        limit = min(p.partition_max_bytes, left)
        limit = 0 if i in held_back else limit if sent else max(1, limit)
        try:
            answer = _partition(engine, led, request, p, db, limit, now_ms, version)
        except Exception as exc:  # noqa: BLE001 - answered per vnode, the others go on
            answer = _answer(p, error_of(exc))
        size = _size(answer)
        sent, left = sent or size > 0, left - size
        out.append(answer)
    return out


def _size(answer: WalFetchPartitionData) -> int:
    """The entry bytes of ``answer`` (the one chunk :func:`_partition` gives, bytes or a file region)."""
    chunks = cast("list[Sized] | None", answer["entries"])
    return sum(len(chunk) for chunk in chunks or ())


def _enough(answers: list[WalFetchPartitionData], min_bytes: int) -> bool:
    """Whether to answer now rather than wait: an error or a divergence to act on, or ``min_bytes`` of entries."""
    if any(a["error_code"] or a["diverging_epoch"]["epoch"] != -1 for a in answers):  # type: ignore[index]
        return True
    return sum(_size(a) for a in answers) >= min_bytes


def _led_states(led: LedVnodes, request: WalFetchRequest,
                names: Sequence[str | None]) -> Iterator[tuple[int, str, int, PartitionState]]:
    """(index, database, vgroup, partition state) of each vnode of the request this node leads now."""
    for i, (p, db) in enumerate(zip(request.partitions, names)):
        view = None if db is None or p.db_id is None else led.leader_view(p.db_id.hex, p.vgroup)
        if db is not None and view is not None and not view.deposed:
            yield i, db, p.vgroup, view.state


def _held_back(traffic: ReplicationTraffic, led: LedVnodes, request: WalFetchRequest,
               names: Sequence[str | None]) -> frozenset[int]:
    """The vnodes (indexes) answered without entries now: the leader's replication throttle (KIP-73) holds the
    follower back (:meth:`ReplicationTraffic.hold_leader`)."""
    return frozenset(i for i, db, vgroup, state in _led_states(led, request, names)
                     if traffic.hold_leader(db, vgroup, request.replica_id, state))


def _count(traffic: ReplicationTraffic, led: LedVnodes, request: WalFetchRequest, names: Sequence[str | None],
           answers: list[WalFetchPartitionData]) -> None:
    """The entry bytes answered, counted and recorded in the leader's throttle (:meth:`ReplicationTraffic.sent`)."""
    for i, db, vgroup, state in _led_states(led, request, names):
        traffic.sent(db, vgroup, request.replica_id, state, _size(answers[i]))


def _refused(request: WalFetchRequest, code: int) -> WalFetchResponse:
    return {"throttle_time": 0, "partitions": [_answer(p, code) for p in request.partitions]}


async def handle(broker: Broker, ctx: RequestContext, request: WalFetchRequest) -> WalFetchResponse:
    led = broker.led
    auth = ctx.authentication  # (a node fetches only as itself, the module docstring)
    if not from_cluster_node(broker, ctx) or auth is None or auth.node != request.replica_id:
        return _refused(request, ErrorCode.cluster_authorization_failed)
    if led is None:  # this node leads no vnode with followers
        return _refused(request, ErrorCode.not_leader_or_follower)
    topics = broker.topics()
    dbs = [None if p.db_id is None else topics.database_by_id(p.db_id.hex) for p in request.partitions]
    names = [None if db is None else db.name for db in dbs]
    keys: list[VnodeKey] = sorted({(name, p.vgroup) for name, p in zip(names, request.partitions) if name})
    if not keys:  # no database known here: nothing to read, nothing to wait for
        return _refused(request, ErrorCode.not_leader_or_follower)
    held = frozenset(keys)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait.total_seconds()
    traffic = broker.replication_traffic
    while True:
        woken = broker.wakeups.watch_vnodes(keys)  # before reading: an append meanwhile still wakes it
        try:
            held_back = frozenset() if traffic is None else _held_back(traffic, led, request, names)
            answers = await broker.call_on(lambda _: held, _read, led, request, names, held_back,
                                           int(time.monotonic() * 1000), ctx.api_version)
            if _enough(answers, request.min_bytes) or loop.time() >= deadline:
                if traffic is not None:
                    _count(traffic, led, request, names, answers)
                return {"throttle_time": 0, "partitions": answers}
            try:
                async with asyncio.timeout(deadline - loop.time()):  # (not wait_for, which may swallow a cancel)
                    await woken.wait()
            except TimeoutError:
                pass
        finally:
            broker.wakeups.unwatch_vnodes(keys, woken)
