"""A follower's copy of its leader's WAL: one fetcher per leader node (docs/plans/replication-wiring.md, step 4).

As Kafka's ``ReplicaFetcherThread``, a :class:`ReplicaFetcher` fetches every vnode this node follows from one
leader node in one WalFetch request (:mod:`walgate.gateway.kafka.handlers.wal_fetch`), sent as this node over its
authenticated node link (:class:`~walgate.gateway.kafka.node_links.NodeLinks`), and applies each vnode's answer:

* entries (whole batches of ``entries_epoch``): appended as they are on the vnode's lane
  (:meth:`Engine.append_replicated <walgate.storage.engine.Engine.append_replicated>`: the epoch begun first when
  newer, then the bytes, meta entries and every topic's offset index; nothing written when a check fails); the
  high watermark the answer carries (capped by what this WAL holds) is the vnode's visible version from then on,
  and a rise wakes the long polls of consumers fetching from this follower (KIP-392);
* a divergence (KIP-101/279, Kafka's DivergingEpoch): :func:`walgate.replication.epochs.follower_truncation` on the
  vnode's epoch cache, then :meth:`Engine.truncate_vnode <walgate.storage.engine.Engine.truncate_vnode>` (an
  exclusive call), never below the high watermark it last learned; the next fetch names the epoch left, so a fast
  double failover's repeated exchange (KIP-279) is one more round trip each. A cut the disk refused part of (its
  WAL cut, a derived file not rewritten: the WAL refuses appends, :attr:`Wal.held
  <walgate.storage.wal.Wal.held>`) is finished before the vnode's next fetch (:attr:`FollowedVnode.cut_unfinished`),
  never left to wedge it until a restart;
* no leader epoch known for the entries of its WAL (its epoch file damaged, unreadable or missing when the vnode
  opened): its WAL is first cut to the high watermark it knows, once, as Kafka's fetcher truncates a partition without
  epochs (``truncateToHighWatermark``), then fetched from there (with no epoch to name, the leader cannot answer where
  the logs diverge: a tail it never acknowledged would be kept);
* OFFSET_OUT_OF_RANGE below the leader's log start (retention or DeleteRecords removed what the follower lacks: a
  replica added by a move, or one back after a long absence): as Kafka's follower (``truncateFullyAndStartAt``), a
  Kafka-native partition's copy is emptied and starts at the leader's log start before its next fetch
  (:meth:`Engine.start_vnode_at <walgate.storage.engine.Engine.start_vnode_at>`, an exclusive call; its high
  watermark is that version, :attr:`FollowedVnode.start_at` kept until the disk took it). An SQL vgroup's cannot
  (the tables of the entries retention deleted and a TDengine topic's offsets below them are not in the leader's WAL
  any more): it is restored from the leader's snapshot (docs/plans/vnode-snapshot.md; :meth:`ReplicaFetcher._restore`:
  paged with VnodeSnapshot, staged, installed, then fetched from the snapshot's log start, deriving nothing below its
  end; until its WAL reaches that end, :attr:`FollowedVnode.restoring`, its fetches report no durable end, so that
  it never joins the ISR, and it serves no consumer; a divergence below that end, which no cut can undo, has it
  restored anew); a leader of a release that does not answer VnodeSnapshot
  leaves the vnode no longer fetched and the condition logged at ERROR (it stays as it is, out of the ISR);
* any other error (a leader epoch not yet or no longer the leader's, NOT_LEADER_OR_FOLLOWER, STALE_BROKER_EPOCH,
  OFFSET_OUT_OF_RANGE at or past the leader's log start: an epoch the leader cannot end, which a leader elected by
  the controller never answers; a storage refusal): kept in :attr:`FollowedVnode.error`, and that vnode alone left
  out of the requests for ``backoff_s`` (:attr:`FollowedVnode.retry_at`, as Kafka's
  ``AbstractFetcherThread.delayPartitions``), the others fetched on (an error in a request answers it at once: a
  vnode erring in every request would end every long poll), as the replica manager (step 5) moves the vnode to its
  new leader or epoch. The leader unreachable delays every vnode the request held.

A vnode the follower's replication throttle holds back (KIP-73: throttled on this node, not caught up after its
last answer, the follower quota exceeded; :meth:`ReplicationTraffic.hold_follower
<walgate.gateway.replication_traffic.ReplicationTraffic.hold_follower>`) is left out of the requests until the quota
allows it again (at most one quota window), as Kafka's ``shouldFollowerThrottle`` leaves it out of the fetch; the
entry bytes each answer brings are counted there (:meth:`ReplicationTraffic.copied`).

An answer for a vnode unfollowed, or followed anew (another leader epoch, as Kafka's fetcher checks its fetch state
before it processes a partition's data), while the request was out is dropped; a divergence's cut checks it again in
the truncating call itself, so a vnode unfollowed while its cut waited to run is not cut. The fetch position is read
on the vnode's lane before each request: the WAL's end (``fetch_version``), its epoch cache's latest epoch (also for
an empty WAL: :func:`_position`), and its durable end (what the leader's high watermark counts, issue 25). Nothing
here reads or writes etcd: which vnodes are followed, from which leader at which epoch, is the replica manager's
(:meth:`follow`, :meth:`unfollow`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import logging
import uuid
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from walgate.gateway.replication_traffic import ReplicationTraffic
from walgate.gateway.storage_thread import StorageThread
from walgate.replication.epochs import EpochEnd, LeaderEpochCache, follower_truncation
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError, Unsupported
from walgate.storage.lanes import VnodeKey
from walgate.storage.vnode import HalfRestored
from walgate.storage.vnode_snapshot import Staging
from walgate.wire.errors import ErrorCode
from walgate.wire.internal import VNODE_SNAPSHOT, WAL_FETCH
from walgate.wire.protocol import ZERO_UUID, request_class
from walgate.wire.serial import fields_of

__all__ = ["FollowedVnode", "Link", "ReplicaFetcher", "finish_cut", "followed_hw"]

log = logging.getLogger("walgate.replication")

_SNAPSHOT_REQUEST: Any = request_class(VNODE_SNAPSHOT, 0)
_REQUESTS: Any = {v: request_class(WAL_FETCH, v) for v in (0, 1)}
_PARTITIONS: Any = {v: next(f.entity for f in fields_of(cls) if f.name == "partitions") for v, cls in _REQUESTS.items()}
_LOG_START: Any = next(f.entity for f in fields_of(_PARTITIONS[1]) if f.name == "log_starts")


class Link(Protocol):
    def call(self, node: int, request: Any) -> Awaitable[Any]:
        """Send ``request`` to ``node`` as this node; its decoded response (:meth:`NodeLinks.call
        <walgate.gateway.kafka.node_links.NodeLinks.call>`, which raises NodeUnreachable)."""

    def version(self, node: int, api_key: int) -> int:
        """The version of internal API ``api_key`` to send ``node`` (:meth:`NodeLinks.version
        <walgate.gateway.kafka.node_links.NodeLinks.version>`)."""


@dataclass
class FollowedVnode:
    """A vnode this node follows: vgroup ``vgroup`` of database ``db`` (id ``db_id``), led in ``leader_epoch``."""

    db: str
    db_id: str
    vgroup: int
    leader_epoch: int
    high_watermark: int = 0  # the leader's, as last answered, capped by this WAL's end: never truncated below
    error: int = ErrorCode.none  # the last fetch's error (NONE: it went well)
    stopped: str | None = None  # why it is no longer fetched (below the leader's log start), else None
    retry_at: float = 0.0  # the event loop's time before which it is not fetched (after an error, or held back by
    # the replication throttle), else 0
    cut_unfinished: bool = False  # a truncation was refused: finished (if its WAL is held) before the next fetch
    lag: int = 0  # versions the leader's high watermark was past this WAL's end after the last answer applied
    cut_to_hw: bool = False  # its WAL, no epoch known for its entries, was cut to the HW (once: then fetched from it)
    in_sync: bool = False  # caught up (lag 0) after the last answer applied: never held back by the throttle
    start_at: int | None = None  # its copy ends below the leader's log start: emptied and started at this version
    # before its next fetch (Kafka's truncateFullyAndStartAt), else None
    restoring: bool = False  # restored from its leader's snapshot, its WAL not at the snapshot's end yet (as its
    # last position read): never in the ISR, never serving consumers (docs/plans/vnode-snapshot.md, step 4)

    @property
    def key(self) -> VnodeKey:
        return self.db, self.vgroup


@dataclass(frozen=True)
class _Position:
    fetch_version: int
    last_fetched_epoch: int
    durable_version: int
    epochless: bool = False  # entries in its WAL, no leader epoch known for them: cut to the HW before fetching
    log_starts: Mapping[uuid.UUID, int] = dataclasses.field(default_factory=dict)  # its topics' log starts past 0
    restoring: bool = False  # its WAL below the end of the snapshot it was restored from (Vnode.restoring)


def followed_hw(vnode: FollowedVnode, _end: int, _durable: int) -> int:
    """A followed vnode's WAL's :attr:`Wal.replication <walgate.storage.wal.Wal.replication>`: its visible version is
    the high watermark its leader's answers carry (capped by what it holds)."""
    return vnode.high_watermark


def _position(engine: Engine, db: str, vgroup: int, with_log_starts: bool) -> _Position:
    """Where ``db``'s vnode ``vgroup`` is fetched from: its WAL's end, named with its epoch cache's latest epoch
    whatever the WAL holds, as Kafka's follower names its log's ``latestEpoch`` (KIP-595's ``LastFetchedEpoch``, the
    KIP-101/279 truncation): an empty WAL too, whose cache may hold an epoch this node began when it was elected
    and then wrote nothing in (a lease storm's brief leadership, issue 25). Naming no epoch there got the leader's
    older entries refused on every fetch (:meth:`Vnode.append_replicated
    <walgate.storage.vnode.Vnode.append_replicated>`: older than the cache's latest); naming it gets the divergence,
    whose cut at the WAL's end drops the empty epoch (:func:`walgate.storage.truncation.truncate_vnode`). Its log
    starts only ``with_log_starts`` (a WalFetch v1 carries them, and its answer the leader's; a v0 neither). A copy
    restored from a snapshot whose WAL reached the snapshot's end at its last start has its restoring marker removed
    here (its topics' indexes were opened from that end on)."""
    vnode = engine.store.local_vnode(db, vgroup)
    wal = vnode.wal
    starts = engine.views.log_starts(db, vgroup) if with_log_starts else {}
    if vnode.restoring is not None and wal.next_version >= vnode.restoring[1]:
        vnode.restored()  # (opened with its WAL past the snapshot's end, a crash before the marker went: derived)
    restoring = vnode.restoring is not None
    if vnode.epochs.entries:
        return _Position(wal.next_version, vnode.epochs.latest_epoch, wal.durable_version, log_starts=starts,
                         restoring=restoring)
    return _Position(wal.next_version, -1, wal.durable_version, epochless=wal.next_version != wal.first_version,
                     log_starts=starts, restoring=restoring)


def _positions(engine: Engine, vnodes: list[FollowedVnode], with_log_starts: bool) -> list[_Position | StorageError]:
    """Each vnode's position (:func:`_position`), or why it cannot be read now (not open: the disk refused it, no
    such database)."""
    out: list[_Position | StorageError] = []
    for v in vnodes:
        try:
            out.append(_position(engine, v.db, v.vgroup, with_log_starts))
        except StorageError as e:
            out.append(e)
    return out


def finish_cut(engine: Engine, db: str, vgroup: int, high_watermark: int) -> None:
    """Finish a truncation the disk refused part of: the vnode's WAL, held, cut again at its end (which rewrites the
    derived files, :func:`walgate.storage.truncation.truncate_vnode`); nothing when it is not held (nothing was
    cut). An exclusive call; the replica manager's too, before it leads a vnode whose WAL a cut left held."""
    wal = engine.store.local_vnode(db, vgroup).wal
    if wal.held is not None:
        engine.truncate_vnode(db, vgroup, wal.next_version, high_watermark=high_watermark)


def _copy(engine: Engine, v: FollowedVnode, entries: bytes | None, fetch_version: int, epoch: int,
          high_watermark: int) -> int:
    """On ``v``'s lane, one call per answer: its ``entries`` (whole batches of leader ``epoch`` from
    ``fetch_version``; None: none) appended and durable (:meth:`Engine.append_replicated
    <walgate.storage.engine.Engine.append_replicated>`), then the leader's ``high_watermark``, capped by what the WAL
    holds, taken as ``v``'s when higher, and when it rose, consumers' long polls on this follower (KIP-392) woken to
    read what it now serves; the WAL's end."""
    end = fetch_version if entries is None else engine.append_replicated(v.db, v.vgroup, entries, fetch_version,
                                                                           epoch)
    if min(high_watermark, end) > v.high_watermark:
        v.high_watermark = min(high_watermark, end)
        engine.store.records_visible(v.key)
    return end


def _truncation_point(engine: Engine, db: str, vgroup: int, answer: EpochEnd) -> int:
    """Where the follower's log diverging from the leader's ``answer`` is cut (KIP-101/279)."""
    vnode = engine.store.local_vnode(db, vgroup)
    return follower_truncation(LeaderEpochCache(vnode.epochs.entries), vnode.wal.next_version, answer).offset


class ReplicaFetcher:
    """Node ``node_id`` (registered under ``broker_epoch``) fetching what it follows from leader node ``source``."""

    def __init__(self, node_id: int, broker_epoch: int, source: int, link: Link, storage: StorageThread,
                 engine: Engine, *, max_wait_ms: int = 500, min_bytes: int = 1, max_bytes: int = 10 << 20,
                 partition_max_bytes: int = 1 << 20, backoff_s: float = 1.0,
                 traffic: ReplicationTraffic | None = None) -> None:
        self.node_id = node_id
        self.broker_epoch = broker_epoch
        self.source = source
        self.link = link
        self.storage = storage
        self.engine = engine
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.backoff_s = backoff_s
        self.traffic = traffic
        self.followed: dict[VnodeKey, FollowedVnode] = {}
        self._changed = asyncio.Event()

    def follow(self, vnode: FollowedVnode) -> None:
        """Fetch ``vnode`` from this leader from the next request on (again, when it was stopped); a cut its previous
        following here left unfinished is kept, to be finished first (one left by a following elsewhere: the caller
        sets :attr:`FollowedVnode.cut_unfinished` from the WAL, :attr:`Wal.held <walgate.storage.wal.Wal.held>`)."""
        old = self.followed.get(vnode.key)
        vnode.cut_unfinished = vnode.cut_unfinished or old is not None and old.cut_unfinished
        self.followed[vnode.key] = vnode
        self._changed.set()

    def unfollow(self, key: VnodeKey) -> None:
        self.followed.pop(key, None)

    async def run(self) -> None:
        """Fetch until cancelled: at once again while a vnode is due (not stopped, its retry time passed), else
        waiting for the first retry time or a :meth:`follow`, whichever comes first."""
        loop = asyncio.get_running_loop()
        while True:
            live = [v.retry_at for v in self.followed.values() if v.stopped is None]
            wait = min(live) - loop.time() if live else None
            if wait is None or wait > 0:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):  # (not wait_for: NodeLinks' module docstring)
                        await self._changed.wait()
                continue
            try:
                await self.fetch_once()
            except Exception as e:  # noqa: BLE001 - NodeUnreachable, or a refusal: logged, fetched again
                log.warning("fetching from node %d: %s: %s", self.source, type(e).__name__, e)

    def _settle(self, v: FollowedVnode, code: int) -> None:
        """Keep ``code`` as ``v``'s error; an error leaves ``v`` out of the requests for ``backoff_s``."""
        v.error = code
        v.retry_at = 0.0 if code == ErrorCode.none else asyncio.get_running_loop().time() + self.backoff_s

    async def fetch_once(self) -> bool:
        """One WalFetch of every vnode followed, not stopped and due (its retry time passed), its answers applied;
        whether every vnode's went well (no error). A vnode's copy to start at its leader's log start is started
        first and its unfinished cut finished, the vnode left out while the disk refuses either. The leader
        unreachable (raised) delays each vnode the request held."""
        now = asyncio.get_running_loop().time()
        vnodes = [v for v in self.followed.values() if v.stopped is None and v.retry_at <= now]
        if self.traffic is not None:  # the follower's replication throttle (KIP-73's shouldFollowerThrottle)
            for v in vnodes:
                v.retry_at = now + self.traffic.hold_follower(v.db, v.vgroup, v.in_sync)
            vnodes = [v for v in vnodes if v.retry_at <= now]
        if not vnodes:
            return True
        starting = [v for v in vnodes if v.start_at is not None]
        for v in starting:
            await self._start_copy(v)
        started = all(v.start_at is None and v.stopped is None for v in starting)
        vnodes = [v for v in vnodes if v.start_at is None and v.stopped is None]
        if not vnodes:
            return False
        unfinished = [v for v in vnodes if v.cut_unfinished]
        for v in unfinished:
            try:
                await self.storage.call(finish_cut, self.engine, v.db, v.vgroup, v.high_watermark)
                v.cut_unfinished = False
            except StorageError as e:
                log.warning("vnode %d of database %s: its truncation is still unfinished: %s", v.vgroup, v.db, e)
                self._settle(v, ErrorCode.kafka_storage_error)
        vnodes = [v for v in vnodes if not v.cut_unfinished]
        if not vnodes:
            return False
        finished = started and not any(v.cut_unfinished for v in unfinished)
        keys = frozenset(v.key for v in vnodes)
        version = self.link.version(self.source, WAL_FETCH)  # (v1: log starts, to a leader that answers it)
        read = await self.storage.call_on(keys, functools.partial(_positions, self.engine, vnodes, version >= 1))
        for v, p in zip(vnodes, read):
            if isinstance(p, StorageError):
                log.warning("vnode %d of database %s is not fetched now: %s", v.vgroup, v.db, p)
                self._settle(v, ErrorCode.kafka_storage_error)
        fetched = [(v, p) for v, p in zip(vnodes, read) if isinstance(p, _Position)]
        for v, p in fetched:
            v.restoring = p.restoring
        if not fetched:
            return False
        epochless = {v.key: v for v, p in fetched if p.epochless and not v.cut_to_hw}
        for v in epochless.values():
            await self._cut_to_high_watermark(v)
        fetched = [(v, p) for v, p in fetched if v.key not in epochless]  # (fetched from their new end next round)
        if not fetched:
            return False
        vnodes, positions = [v for v, _ in fetched], [p for _, p in fetched]
        request = _REQUESTS[version](
            replica_id=self.node_id, broker_epoch=self.broker_epoch,
            max_wait=datetime.timedelta(milliseconds=self.max_wait_ms), min_bytes=self.min_bytes,
            max_bytes=self.max_bytes, partitions=tuple(
                _PARTITIONS[version](
                    db_id=uuid.UUID(v.db_id), vgroup=v.vgroup, current_leader_epoch=v.leader_epoch,
                    fetch_version=p.fetch_version, last_fetched_epoch=p.last_fetched_epoch,
                    durable_version=-1 if p.restoring else p.durable_version,
                    partition_max_bytes=self.partition_max_bytes,
                    **({"log_starts": tuple(_LOG_START(topic_id=t, start_offset=o) for t, o in p.log_starts.items())}
                       if version >= 1 else {}))
                for v, p in zip(vnodes, positions)))
        try:
            response = await self.link.call(self.source, request)
        except Exception:
            for v in vnodes:
                self._settle(v, ErrorCode.network_exception)
            raise
        by_key = {(a.db_id, a.vgroup): a for a in response.partitions}
        well = finished and len(fetched) == len(read)
        for v, p in zip(vnodes, positions):
            if self.followed.get(v.key) is not v:  # unfollowed or followed anew meanwhile: the answer is stale
                continue
            answer = by_key.get((uuid.UUID(v.db_id), v.vgroup))
            self._settle(v, ErrorCode.unknown_server_error if answer is None else await self._apply(
                v, p, answer, version))
            well = well and v.error == ErrorCode.none
        return well

    def _truncate(self, v: FollowedVnode, to: int) -> int | None:
        """An exclusive call: ``v``'s vnode cut back to version ``to`` while it is still followed as ``v`` (what was
        cut to), else None, nothing cut. Checked here, not before the call was queued: the replica manager may
        unfollow the vnode and take its leadership over while the call waits (:meth:`unfollow` runs on the event
        loop; a takeover queued after this call runs after it, as Kafka removes a partition's fetcher before
        ``makeLeader``)."""
        if self.followed.get(v.key) is not v:
            return None
        return self.engine.truncate_vnode(v.db, v.vgroup, to, high_watermark=v.high_watermark)

    def _start_at(self, v: FollowedVnode, version: int) -> bool:
        """An exclusive call: ``v``'s copy emptied and started at ``version`` while it is still followed as ``v``
        (:meth:`Engine.start_vnode_at <walgate.storage.engine.Engine.start_vnode_at>`), its new WAL's visible
        version the high watermark it learns, from ``version`` (Kafka's ``truncateFullyAndStartAt`` sets the high
        watermark to the new log end); whether it was (not: unfollowed meanwhile, or the copy reaches ``version``
        by now)."""
        if self.followed.get(v.key) is not v:
            return False
        try:
            vnode = self.engine.start_vnode_at(v.db, v.vgroup, version)
        except ValueError:
            return False
        v.high_watermark = version
        vnode.wal.replication = functools.partial(followed_hw, v)
        return True

    async def _start_copy(self, v: FollowedVnode) -> None:
        """Empty ``v``'s copy and start it at :attr:`FollowedVnode.start_at` (the module docstring); a refusal is kept
        as its error (tried again after ``backoff_s``), an SQL vgroup's stops its fetching (logged at ERROR)."""
        assert v.start_at is not None
        try:
            started = await self.storage.call(self._start_at, v, v.start_at)
        except Unsupported as e:
            if self.link.version(self.source, VNODE_SNAPSHOT) < 0:  # a leader of a release without snapshots
                v.stopped = f"{e}: node {self.source} does not answer VnodeSnapshot (an older release)"
                log.error("vnode %d of database %s is no longer fetched from node %d: %s", v.vgroup, v.db,
                          self.source, v.stopped)
                return
            await self._restore(v)
            return
        except (StorageError, OSError) as e:
            log.warning("vnode %d of database %s: its copy could not start at the leader's log start, version %d: "
                        "%s", v.vgroup, v.db, v.start_at, e)
            self._settle(v, ErrorCode.kafka_storage_error)
            return
        if started:
            log.warning("vnode %d of database %s: its copy ended below node %d's log start: emptied, it starts at "
                        "version %d", v.vgroup, v.db, self.source, v.start_at)
        v.start_at = None
        self._settle(v, ErrorCode.none)

    async def _snapshot_page(self, v: FollowedVnode, snapshot_id: uuid.UUID, position: int) -> Any:
        """One VnodeSnapshot page of ``v`` (a begin when ``snapshot_id`` is zero); raises NodeUnreachable."""
        return await self.link.call(self.source, _SNAPSHOT_REQUEST(
            replica_id=self.node_id, broker_epoch=self.broker_epoch, db_id=uuid.UUID(v.db_id), vgroup=v.vgroup,
            current_leader_epoch=v.leader_epoch, snapshot_id=snapshot_id, position=position,
            max_bytes=self.partition_max_bytes))

    async def _restore(self, v: FollowedVnode) -> None:
        """``v``'s SQL vgroup copy, below its leader's log start, replaced by the leader's snapshot
        (docs/plans/vnode-snapshot.md): begun, paged into the staging directory on the vnode's lane
        (:class:`~walgate.storage.vnode_snapshot.Staging`), then installed (:meth:`Engine.install_vnode_snapshot
        <walgate.storage.engine.Engine.install_vnode_snapshot>`, an exclusive call, while ``v`` is still followed
        as it is), its high watermark the snapshot's log start; fetched from there. An error answer, a page that
        does not continue the stream, a staged file that does not verify or a disk that refuses is kept as its
        error (begun again after ``backoff_s``)."""
        assert v.start_at is not None
        try:
            page = await self._snapshot_page(v, ZERO_UUID, 0)
            if page.error_code != ErrorCode.none:
                self._settle(v, int(page.error_code))
                return
            sid, size = page.snapshot_id, int(page.size)
            staging = await self.storage.call_on(frozenset([v.key]), functools.partial(
                Staging, self.engine.staging_dir(v.db, v.vgroup), size, self.engine.syncs))
            for _ in range(size + 1):  # (bounded: each page but the last holds a byte at least)
                await self.storage.call_on(frozenset([v.key]), functools.partial(
                    staging.take, int(page.position), bytes(page.data)))
                if staging.done or self.followed.get(v.key) is not v:
                    break
                page = await self._snapshot_page(v, sid, staging.position)
                if page.error_code != ErrorCode.none or page.snapshot_id != sid or not page.data:
                    self._settle(v, int(page.error_code) or ErrorCode.snapshot_not_found)
                    return
            installed = staging.done and await self.storage.call(self._install, v)
        except (StorageError, ValueError, OSError) as e:
            log.warning("vnode %d of database %s: node %d's snapshot was not installed: %s", v.vgroup, v.db,
                        self.source, e)
            self._settle(v, ErrorCode.kafka_storage_error)
            return
        except Exception:
            self._settle(v, ErrorCode.network_exception)
            raise
        if installed:
            log.warning("vnode %d of database %s: its copy ended below node %d's log start: restored from its "
                        "snapshot of version %d, fetched from version %d", v.vgroup, v.db, self.source,
                        int(page.end_version), v.high_watermark)
            v.start_at = None
        self._settle(v, ErrorCode.none)

    def _install(self, v: FollowedVnode) -> bool:
        """An exclusive call: the snapshot staged for ``v`` installed while ``v`` is still followed as it is, its new
        WAL's visible version the high watermark it learns, from the snapshot's log start; whether it was."""
        if self.followed.get(v.key) is not v:
            return False
        vnode = self.engine.install_vnode_snapshot(v.db, v.vgroup)
        v.high_watermark, v.restoring = vnode.wal.next_version, True
        vnode.wal.replication = functools.partial(followed_hw, v)
        return True

    async def _cut_to_high_watermark(self, v: FollowedVnode) -> None:
        """Cut ``v``'s WAL, whose entries no leader epoch is known for (its epoch file damaged, unreadable or missing
        at open), back to the high watermark it knows, as Kafka's fetcher truncates a partition without epochs
        (``AbstractFetcherThread.truncateToHighWatermark``): with no epoch to name, the leader cannot find where its
        log diverges (KIP-101), so a tail it never acknowledged is dropped, never kept. A refusal is kept as the
        vnode's error (fetched again after ``backoff_s``, its cut finished first)."""
        try:
            cut = await self.storage.call(self._truncate, v, v.high_watermark)
        except StorageError as e:
            v.cut_unfinished = True
            log.warning("vnode %d of database %s: its cut to the high watermark was refused: %s", v.vgroup, v.db, e)
            self._settle(v, ErrorCode.kafka_storage_error)
            return
        v.cut_to_hw = True
        if cut is not None:
            log.warning("vnode %d of database %s: no leader epoch known for its WAL's entries (its epoch file lost): "
                        "truncated to its high watermark, version %d, before fetching from node %d", v.vgroup, v.db,
                        cut, self.source)
        self._settle(v, ErrorCode.none)

    async def _apply(self, v: FollowedVnode, p: _Position, answer: Any, version: int) -> int:
        """Apply one vnode's answer (the module docstring; ``version``: the request's); the error to keep."""
        code = int(answer.error_code)
        if code == ErrorCode.offset_out_of_range and p.fetch_version < answer.log_start_version:
            v.start_at = int(answer.log_start_version)  # (started before the next fetch: fetch_once)
            return ErrorCode.none
        if code != ErrorCode.none:
            return code
        try:
            if answer.diverging_epoch.epoch != -1 or answer.diverging_epoch.end_version != -1:
                diverging = EpochEnd(answer.diverging_epoch.epoch, answer.diverging_epoch.end_version)
                to = await self.storage.call_on(frozenset([v.key]), functools.partial(
                    _truncation_point, self.engine, v.db, v.vgroup, diverging))
                try:
                    cut = await self.storage.call(self._truncate, v, to)
                except HalfRestored:  # (its tables are the snapshot's end's, which no cut undoes: restored anew)
                    log.warning("vnode %d of database %s: diverging from node %d below the end of the snapshot it "
                                "is restoring from: restored anew", v.vgroup, v.db, self.source)
                    v.start_at = int(answer.log_start_version)
                    return ErrorCode.none
                except StorageError:
                    v.cut_unfinished = True
                    raise
                if cut is None:
                    return ErrorCode.none  # (unfollowed meanwhile: the answer is stale, nothing cut)
                log.info("vnode %d of database %s: truncated to version %d, diverging from node %d at epoch %d "
                         "(ending at %d)", v.vgroup, v.db, cut, self.source, diverging.epoch, diverging.end_offset)
                return ErrorCode.none
            end = p.fetch_version
            if answer.entries or min(answer.high_watermark, end) > v.high_watermark:
                end = await self.storage.call_on(frozenset([v.key]), functools.partial(
                    _copy, self.engine, v, bytes(answer.entries) if answer.entries else None, p.fetch_version,
                    answer.entries_epoch, answer.high_watermark))
            v.lag = max(0, answer.high_watermark - end)  # (Kafka's FetcherLagMetrics: the HW minus the next offset)
            v.in_sync = v.lag == 0
            if self.traffic is not None and answer.entries:
                self.traffic.copied(v.db, v.db_id, v.vgroup, len(answer.entries))
            starts = {} if version < 1 else {t.topic_id: t.start_offset for t in answer.log_starts}
            if any(p.log_starts.get(t, 0) < o for t, o in starts.items()):  # (KIP-107: DeleteRecords' on the leader)
                await self.storage.call_on(frozenset([v.key]), functools.partial(
                    self.engine.views.follow_log_starts, v.db, v.vgroup, starts))
            return ErrorCode.none
        except (StorageError, ValueError) as e:  # refused (EntriesRefused is both): nothing written, fetched again
            log.warning("vnode %d of database %s: the answer of node %d was not applied: %s", v.vgroup, v.db,
                        self.source, e)
            return ErrorCode.kafka_storage_error
