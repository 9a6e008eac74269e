"""The replica manager: this node's part in every replicated vnode it holds (docs/plans/replication-wiring.md,
step 5; Kafka's ``ReplicaManager.applyDelta``).

It follows the partition states in etcd (:meth:`PartitionStates.follow
<walgate.cluster.partition_states.PartitionStates.follow>`) and applies each change of a vnode this node holds, in
the order etcd reports them, the vnode's calls on its lane:

* **lead** it, when the state names this node leader under its own broker epoch
  (:func:`~walgate.replication.partition.leads`, KIP-903): on taking over, the leader epoch is begun in the vnode's
  cache at its WAL's end (:meth:`LeaderEpochs.begin <walgate.storage.leader_epochs.LeaderEpochs.begin>`) and a
  :class:`~walgate.replication.leader.LeaderView` made from the state, which WalFetch answers from (this object is
  the :class:`~walgate.gateway.kafka.led_vnodes.LedVnodes` set on :attr:`Broker.led
  <walgate.gateway.kafka.broker.Broker.led>`); a later state of the same epoch (an ISR change) is given to the view.
  Every ``lag_max_ms / 2`` the view's ISR proposal (KIP-497: shrink the members not caught up for ``lag_max_ms``,
  expand by followers caught up under their registered broker epoch) is written with
  :meth:`PartitionStates.alter_isr <walgate.cluster.partition_states.PartitionStates.alter_isr>`; refused because
  the state moved on, the state read back is taken and the next round proposes again; refused because this node no
  longer leads (FENCED_LEADER_EPOCH) or is fenced (STALE_BROKER_EPOCH), it stops leading, and once it holds its
  lease again applies its newest state again if etcd still holds that very state (:meth:`_relead`);
* **follow** ``state.leader`` in ``state.leader_epoch``: one :class:`~walgate.gateway.replica_fetcher.ReplicaFetcher`
  per leader node, each over a :class:`~walgate.gateway.kafka.node_links.NodeLinks` of its own (a long-polling
  WalFetch must not hold up other requests to that node); a vnode moves between fetchers as its leader changes, and
  a fetcher left with no vnode is stopped;
* **stop** (this node no longer a replica, the state deleted, or no leader elected): neither; a vnode of a database
  dropped here is let go as the catalog record applies (:meth:`catalog_changed`), before the controller deletes its
  state.

**Replica moves** (issue 26): the controller writes a moved state and the ``place_vgroup`` catalog record placing
the vgroup on its replicas in one etcd transaction (:class:`~walgate.cluster.partition_states.Reconciler`), and this
node applies the two from two streams, in either order. A state naming this node for a vnode its catalog does not
place here yet is stopped, not followed, until the record applies: the engine then opens the vnode empty
(:meth:`Store.open_placed <walgate.storage.store.Store.open_placed>`) and :meth:`catalog_changed` applies the state
again, so the adding replica fetches from the leader from its log start. A vnode the catalog no longer places here
(a move completed without it, or cancelled) is let go once the record applies, as a dropped database's, then closed
and its files deleted (:meth:`Engine.drop_moved_vnode <walgate.storage.engine.Engine.drop_moved_vnode>`, crash-safe:
:mod:`walgate.storage.moved_vnodes`); the state written with that record no longer names this node.

The high watermark (issue 25): a replicated vnode's visible version is the least of its durable end and the
replicas' high watermark (:attr:`Wal.replication <walgate.storage.wal.Wal.replication>`, the one seam every
watermark, ListOffsets and Fetch go through). On the leader it is :meth:`LeaderView.update_hw` over the ISR's
durable ends, asked at every read, after every follower fetch (:meth:`fetched`) and after a local write's sync
(:meth:`after_sync`), so the leader's own sync moves it too; each rise wakes the vnode's topics' long polls and
answers the acks=all writes it passed (:class:`~walgate.gateway.purgatory.Purgatory`). On a follower it is the high
watermark the leader's answers carried (capped by what the follower holds); on a replica that stopped, the visible
version it had then. Each starts from the one the vnode had (:func:`_baseline`): after a restart, its high watermark
checkpoint (:mod:`walgate.storage.hw_checkpoint`, written every ``checkpoint_s`` where it changed and at
:meth:`close`), else the WAL's log start. A vnode that never had a partition state (a single node's, every vnode
before step 2 of the plan) is not touched: its watermarks are as before.

``walgate serve`` in cluster mode starts :meth:`run` once the node read the cluster's catalog, sets
:attr:`Broker.led` to it, gives it the broker epochs its membership reads and stops it at shutdown
(``gateway/server.py``); after each catalog record applied it calls :meth:`catalog_changed`, so a state seen before
its database was known here is applied once it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from walgate.cluster.model import ControlPlaneUnavailable
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.partition_states import PartitionStates
from walgate.gateway.kafka.node_links import NodeLinks
from walgate.gateway.kafka.wakeups import Waiters
from walgate.gateway.purgatory import Purgatory
from walgate.gateway.replica_fetcher import FollowedVnode, ReplicaFetcher, finish_cut, followed_hw
from walgate.gateway.replication_traffic import ReplicationTraffic
from walgate.gateway.storage_thread import StorageThread
from walgate.replication.leader import LeaderView
from walgate.replication.partition import NO_LEADER, PartitionState, leads
from walgate.storage import hw_checkpoint
from walgate.storage.catalog import DatabaseDef
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError, StorageUnavailable, Unsupported
from walgate.storage.lanes import VnodeKey
from walgate.storage.led_appends import LedAppend
from walgate.storage.vnode import Vnode
from walgate.storage.wal import Wal, never_refused
from walgate.wire.errors import ErrorCode

__all__ = ["ReplicaManager"]

log = logging.getLogger("walgate.replication")


def monotonic_ms() -> int:
    """The clock of the views and of WalFetch's handler (the same one: lag is measured between their readings)."""
    return int(time.monotonic() * 1000)


def _fixed(version: int, _end: int, _durable: int) -> int:
    return version


def _database_named(engine: Engine, db_id: str) -> str | None:
    """The name of the database whose id is ``db_id`` here, None when this node does not know it (yet)."""
    return next((db.name for db in engine.catalog.databases.values() if db.id == db_id), None)


def _placement(engine: Engine, db_id: str, vgroup: int) -> tuple[str | None, bool]:
    """(:func:`_database_named`, whether this node's catalog places vgroup ``vgroup`` of that database here: its
    vnode is open here)."""
    name = _database_named(engine, db_id)
    db = None if name is None else engine.catalog.databases[name]
    return name, db is not None and vgroup in engine.store.placed_here(db)


def _wal(engine: Engine, key: VnodeKey) -> Wal:
    return engine.store.local_vnode(*key).wal


def _baseline(vnode: Vnode) -> int:
    """The high watermark a replica of ``vnode`` starts from as it leads, follows or stops: the visible version while
    this engine gave its WAL one (led, followed or stopped since it opened); else, its WAL just opened (no high
    watermark, :attr:`Wal.replication` None: its visible version would be its whole durable log, a divergent tail
    included), the one its checkpoint holds (:mod:`walgate.storage.hw_checkpoint`, capped by the WAL's end), or
    the WAL's log start when there is none (missing, damaged): the log start never refuses a truncation the
    leader's log needs, at the cost of serving nothing until a high watermark is learned."""
    wal = vnode.wal
    if wal.replication is not None:
        return wal.visible_version
    hw = hw_checkpoint.read(vnode.dir, vnode.damage)
    return wal.first_version if hw is None else max(wal.first_version, min(hw, wal.next_version))


def _checkpoint(engine: Engine, key: VnodeKey, written: int | None) -> int:
    """On the vnode's lane: its visible version, written as its high watermark checkpoint unless it is ``written``
    (what the last write recorded); OSError when the disk refused the write."""
    vnode = engine.store.local_vnode(*key)
    hw = vnode.wal.visible_version
    if hw != written:
        vnode.write_hw_checkpoint(hw)
    return hw


def _held(engine: Engine, key: VnodeKey) -> bool:
    """Whether a truncation the disk refused part of left the vnode's WAL refusing appends (:attr:`Wal.held`)."""
    return _wal(engine, key).held is not None


def _step_down(wal: Wal) -> None:
    """On the vnode's lane: its WAL takes no write from now (:meth:`Store.written_vnode
    <walgate.storage.store.Store.written_vnode>`)."""
    wal.leading = False
    wal.acks_all_refused = never_refused


def _isr_short(view: LeaderView) -> str | None:
    """Why an acks=all write to the vnode ``view`` leads is refused before its append: its ISR below
    ``min.insync.replicas`` (:meth:`LeaderView.check_produce`; a view deposed meanwhile lets the write be appended:
    it is answered NOT_LEADER_OR_FOLLOWER once the manager resigns, :class:`~walgate.gateway.purgatory.Purgatory`)."""
    if view.check_produce() != ErrorCode.not_enough_replicas:
        return None
    return (f"{len(view.state.isr)} in-sync replica(s) (the ISR {sorted(m.replica for m in view.state.isr)}), "
            f"fewer than MIN_INSYNC {view.state.min_isr}")


def _take_over(engine: Engine, key: VnodeKey, state: PartitionState, node_id: int, broker_epoch: int, now_ms: int,
               lag_max_ms: int) -> LeaderView:
    """On the vnode's lane: begin ``state``'s leader epoch at the WAL's end (unless the cache has it already) and
    make the vnode's view from the high watermark it knew (:func:`_baseline`); its visible version is the view's from
    now on. Then, first in the epoch, the ALTER/DROP STABLE meta entries its WAL lacks are appended
    (:meth:`SqlObjects.take_over <walgate.storage.sql_objects.SqlObjects.take_over>`); when the disk refuses, it
    steps down again and raises (the takeover is retried). Unsupported, nothing done, for a copy restoring from a
    snapshot (:attr:`Vnode.restoring <walgate.storage.vnode.Vnode.restoring>`): its tables are ahead of its WAL, so
    an election of it (an unclean one: it never joins the ISR) leaves the vgroup without a serving leader rather
    than serve them (docs/plans/vnode-snapshot.md, step 4)."""
    vnode = engine.store.local_vnode(*key)
    wal = vnode.wal
    if vnode.restoring is not None:
        raise Unsupported(f"its copy is restoring from a snapshot up to version {vnode.restoring[1]} and holds the "
                          f"WAL up to {wal.next_version} only: it cannot lead")
    if vnode.epochs.latest_epoch > state.leader_epoch:
        raise ValueError(f"its epoch cache holds epoch {vnode.epochs.latest_epoch}, newer than {state.leader_epoch}")
    if vnode.epochs.latest_epoch < state.leader_epoch:
        vnode.epochs.begin(state.leader_epoch, wal.next_version)
    start = next(e.start_offset for e in vnode.epochs.entries if e.epoch == state.leader_epoch)
    view = LeaderView(node_id, broker_epoch, state, start, _baseline(vnode), now_ms, lag_max_ms)
    wal.replication = view.update_hw
    wal.acks_all_refused = functools.partial(_isr_short, view)
    wal.leading = True
    try:
        engine.sql_objects.take_over(vnode)  # the meta entries its WAL lacks, before any other write here
    except BaseException:
        _step_down(wal)  # (the takeover is retried: nothing is written here until it leads)
        raise
    return view


@dataclass
class _Led:
    """A vnode this node leads: its view, the highest high watermark posted for it, its ISR proposer."""

    key: VnodeKey
    view: LeaderView
    posted: int
    proposer: asyncio.Task[None] | None = None
    outage: bool = False  # the control plane did not take its last ISR change (logged once per outage)


@dataclass
class _Fetching:
    """The fetcher of one leader node, its own links, its task and the vnodes it fetches."""

    fetcher: ReplicaFetcher
    links: NodeLinks
    task: asyncio.Task[None]


class ReplicaManager:
    """Node ``node_id``'s replicas, registered under ``broker_epoch`` (the module docstring). ``led`` and
    ``following`` (vnode -> leader node) say what it does now; ``registered()`` gives the broker epoch of every
    registered node (KIP-903), ``eligible()`` those of the nodes that may join an ISR (KIP-841: not one in a
    controlled shutdown; default: ``registered()``), ``links()`` a new :class:`NodeLinks` for a fetcher.

    Invariants: a vnode is in at most one of ``led`` and ``following``; each followed vnode is in the fetcher of
    its leader only; the event loop alone changes these maps (lanes read them)."""

    def __init__(self, node_id: int, broker_epoch: int, engine: Engine, storage: StorageThread,
                 states: PartitionStates, registered: Callable[[], Mapping[int, int]],
                 links: Callable[[], NodeLinks], *, lag_max_ms: int = 30_000, fetch_wait_ms: int = 500,
                 backoff_s: float = 1.0, checkpoint_s: float = 5.0,
                 clock: Callable[[], int] = monotonic_ms, lease_held: Callable[[], bool] = lambda: True,
                 eligible: Callable[[], Mapping[int, int]] | None = None) -> None:
        self.node_id = node_id
        self.eligible = registered if eligible is None else eligible
        self._lease_held = lease_held
        self.broker_epoch = broker_epoch
        self.engine = engine
        self.storage = storage
        self.states = states
        self.registered = registered
        self.links = links
        self.lag_max_ms = lag_max_ms
        self.fetch_wait_ms = fetch_wait_ms
        self.backoff_s = backoff_s
        self.checkpoint_s = checkpoint_s
        self.clock = clock
        self._checkpointed: dict[VnodeKey, int] = {}  # the high watermark each vnode's checkpoint was written with
        self._checkpoint_refused: set[VnodeKey] = set()  # vnodes whose last checkpoint write was refused (logged once)
        self.purgatory = Purgatory()
        self.led: dict[PartitionId, _Led] = {}
        self.following: dict[PartitionId, int] = {}
        self.fetching: dict[int, _Fetching] = {}
        # the states to apply, in order; None: the catalog changed (let go of the vnodes of databases dropped)
        self._changes: asyncio.Queue[tuple[PartitionId, PartitionState | None] | None] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._releads: set[asyncio.Task[None]] = set()  # fenced leaders' states to apply again (:meth:`_relead`)
        # every vnode led or followed (or being taken on) since the start, but those of databases dropped: close()
        self._taken: dict[PartitionId, VnodeKey] = {}
        # told (on the event loop) each vnode this node begins to lead, with its leader epoch, and each it stops
        # leading (None): the coordinators load and drop the partitions of their internal topic so
        self.leadership: list[Callable[[VnodeKey, int | None], None]] = []
        # the replication throttles and byte counts (KIP-73) of its fetchers and of the WalFetch answers it leads
        self.traffic = ReplicationTraffic(node_id, engine.topics, self.state_of)
        # DeleteRecords' and Produce's waits on vnodes (:meth:`watch`), told by :meth:`_changed`
        self._watched: Waiters[PartitionId] = Waiters(self._loop)

    # ------------------------------------------------------------ LedVnodes (WalFetch's handler, on the lane)

    def leader_view(self, db_id: str, vgroup: int) -> LeaderView | None:
        led = self.led.get(PartitionId(db_id, vgroup))
        return None if led is None else led.view

    def lease_held(self) -> bool:
        return self._lease_held()

    def registered_epoch(self, node_id: int) -> int | None:
        return self.registered().get(node_id)

    def state_of(self, db_id: str, vgroup: int) -> PartitionState | None:
        return self.states.states.get(PartitionId(db_id, vgroup))

    def leader_of(self, db_id: str, vgroup: int) -> int | None:
        """The leader the vgroup's partition state names as last read (-1: none), None before one is read (read by
        ``SHOW VGROUPS`` on a storage lane: one dictionary lookup, atomic beside the loop's changes of the dictionary,
        of an immutable state)."""
        state = self.state_of(db_id, vgroup)
        return None if state is None else state.leader

    def followed_epoch(self, db_id: str, vgroup: int) -> int | None:
        pid = PartitionId(db_id, vgroup)
        leader = self.following.get(pid)
        fetching = None if leader is None else self.fetching.get(leader)
        if fetching is None:
            return None
        followed = tuple(fetching.fetcher.followed.values())  # (one C-level copy: the loop may change the map)
        v = next((v for v in followed if v.db_id == db_id and v.vgroup == vgroup), None)
        return None if v is None or v.restoring else v.leader_epoch  # (a copy restoring from a snapshot serves none)

    def led_database(self, db: DatabaseDef) -> DatabaseDef:
        """``db`` as SQL writes and reads are routed: each replicated vgroup's replicas with its current leader (its
        partition state's, as read here) first, so that :meth:`DatabaseDef.node_of
        <walgate.storage.catalog.DatabaseDef.node_of>` names it; a vgroup with no state or no leader as placed. Any
        lane (a read of what the event loop last learned)."""
        if not db.any_replicated:
            return db
        placed = []
        for vgroup in range(db.vgroups):
            replicas = db.replicas_of(vgroup, self.node_id)
            state = self.state_of(db.id, vgroup) if db.replicated(vgroup) else None
            leader = NO_LEADER if state is None else state.leader
            placed.append(replicas if leader not in replicas else (leader, *(r for r in replicas if r != leader)))
        # (placed_anew keeps its vgroups, as led now: a database of one copy's moved ones stay replicated)
        return dataclasses.replace(db, replicas=tuple(placed), placed_anew={v: placed[v] for v in db.placed_anew})

    def fetched(self, db_id: str, vgroup: int) -> None:
        pid = PartitionId(db_id, vgroup)
        led = self.led.get(pid)
        if led is not None:
            self._post(led)
            self._changed(pid)

    def watch(self, vnodes: list[tuple[str, int]]) -> asyncio.Event:
        return self._watched.watch([PartitionId(*v) for v in vnodes])

    def unwatch(self, vnodes: list[tuple[str, int]], event: asyncio.Event) -> None:
        self._watched.unwatch([PartitionId(*v) for v in vnodes], event)

    def _changed(self, pid: PartitionId) -> None:
        """Vnode ``pid``'s state was read or applied, its leadership here changed, or a follower's fetch was recorded
        in its view: its waits look again (:meth:`watch`). Any thread."""
        self._watched.appended(pid)

    async def acknowledged(self, key: VnodeKey, leader_epoch: int, last_version: int, timeout_s: float) -> ErrorCode:
        """The answer of one acks=all write to ``key`` appended in ``leader_epoch`` up to ``last_version``
        (:meth:`writes_acknowledged`)."""
        await self.after_sync(key)  # (its high watermark posted before or after the wait begins: either is seen)
        return await self.purgatory.wait(key, leader_epoch, last_version, timeout_s)

    async def writes_acknowledged(self, appended: list[LedAppend], timeout_s: float) -> ErrorCode:
        """acks=all for SQL, line-protocol and CSV writes (their "acks" is all, as TDengine's REPLICA 3 writes are
        majority-committed) and Produce of rows: NONE once the high watermark of each vnode the write ``appended``
        to passed its last version in the leader epoch it was appended in (the write's own appends, noted on its
        lane call: :mod:`walgate.storage.led_appends`), else the first error :meth:`acknowledged` answers:
        NOT_LEADER_OR_FOLLOWER when this node no longer leads that epoch (deposed: the write may be truncated),
        REQUEST_TIMED_OUT after ``timeout_s``, NOT_ENOUGH_REPLICAS_AFTER_APPEND. Nothing appended: NONE at once."""
        last: dict[tuple[VnodeKey, int], int] = {}
        for a in appended:
            last[a.key, a.leader_epoch] = max(a.last_version, last.get((a.key, a.leader_epoch), -1))
        codes = await asyncio.gather(*(self.acknowledged(key, epoch, version, timeout_s)
                                       for (key, epoch), version in last.items()))
        return next((code for code in codes if code != ErrorCode.none), ErrorCode.none)

    # ------------------------------------------------------------ the high watermark

    def _post(self, led: _Led) -> None:
        """On the vnode's lane, after its view's high watermark was updated: a rise wakes the vnode's topics' long
        polls; the acks=all writes waiting are told the high watermark and the ISR (on the event loop)."""
        view = led.view
        if view.hw > led.posted:
            led.posted = view.hw
            self.engine.store.records_visible(led.key)
        self._loop.call_soon_threadsafe(self.purgatory.advance, led.key, view.leader_epoch, view.hw,
                                        len(view.state.isr), view.state.min_isr)

    def _synced(self, led: _Led) -> None:
        wal = _wal(self.engine, led.key)
        led.view.update_hw(wal.next_version, wal.durable_version)
        self._post(led)

    async def after_sync(self, key: VnodeKey) -> None:
        """A local write to vnode ``key`` is durable: its high watermark counts this node's new durable end (the
        followers may have fetched it before the leader's own sync completed)."""
        led = next((led for led in self.led.values() if led.key == key), None)
        if led is not None:
            await self.storage.call_on(frozenset([key]), functools.partial(self._synced, led))

    # ------------------------------------------------------------ following the partition states

    async def run(self) -> None:
        """Follow the partition states until cancelled, then stop leading and following everything. First the
        vnodes open here that the catalog no longer places here are let go (a move completed while this node was
        down, its record applied before this manager started: :meth:`_let_go_unplaced`)."""
        self._changes.put_nowait(None)
        workers = [asyncio.create_task(self._apply_changes(), name="walgate-replicas"),
                   asyncio.create_task(self._checkpoints(), name="walgate-hw-checkpoints")]
        try:
            await self.states.follow(self._seen)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await self.close()

    def _seen(self, pid: PartitionId, state: PartitionState | None) -> None:
        """A change of ``pid``'s state read: applied in turn (:meth:`_apply_changes`); its waits look again now (a
        takeover's wait ends once the state read no longer names this node)."""
        self._changes.put_nowait((pid, state))
        self._changed(pid)

    async def _checkpoints(self) -> None:
        """Every ``checkpoint_s`` (Kafka's ``replica.high.watermark.checkpoint.interval.ms``): the high watermark
        checkpoint of every vnode led or followed written where it changed."""
        while True:
            await asyncio.sleep(self.checkpoint_s)
            await self.write_checkpoints([led.key for led in self.led.values()] + [
                key for f in self.fetching.values() for key in f.fetcher.followed])

    async def write_checkpoints(self, keys: list[VnodeKey]) -> None:
        """Write the high watermark checkpoint of each vnode of ``keys`` whose visible version changed since its last
        (:mod:`walgate.storage.hw_checkpoint`); one the disk refused is logged (WARNING, once until a write succeeds)
        and written again next time; a vnode not open here is skipped."""
        for key in keys:
            try:
                self._checkpointed[key] = await self.storage.call_on(frozenset([key]), functools.partial(
                    _checkpoint, self.engine, key, self._checkpointed.get(key)))
                self._checkpoint_refused.discard(key)
            except OSError as e:
                if key not in self._checkpoint_refused:
                    log.warning("vnode %d of database %s: high watermark checkpoint not written (written again in "
                                "%.1f s): %s", key[1], key[0], self.checkpoint_s, e)
                self._checkpoint_refused.add(key)
            except StorageError:
                continue

    async def _apply_changes(self) -> None:
        """Apply each change in turn; one the disk refused (the epoch's begin: StorageUnavailable) is applied again
        after ``backoff_s`` while it is still the newest state seen of its vnode; any other failure (the vnode not
        here, its epoch cache ahead of the state) is logged and left to the next change, as is a catalog change's
        :meth:`_let_go_unplaced` that failed (its next one looks again)."""
        while True:
            change = await self._changes.get()
            if change is None:
                try:
                    await self._let_go_unplaced()
                except Exception as e:  # noqa: BLE001 - this task must go on applying states (rv4 R5)
                    log.error("vnodes of databases dropped here, or moved away, not let go yet: %s: %s",
                              type(e).__name__, e)
                continue
            pid, state = change
            if state is not None and self.states.states.get(pid) != state:
                continue  # (a retry overtaken by a newer change, which is applied instead)
            try:
                await self.apply(pid, state)
            except StorageUnavailable as e:
                log.error("vnode %d of database %s: partition state not applied, retried in %.1f s: %s",
                          pid.vgroup, pid.db_id, self.backoff_s, e)
                self._loop.call_later(self.backoff_s, self._changes.put_nowait, (pid, state))
            except Exception as e:  # noqa: BLE001 - not here, an epoch cache ahead: logged, the next change applied
                log.error("vnode %d of database %s: partition state not applied: %s: %s", pid.vgroup, pid.db_id,
                          type(e).__name__, e)

    def catalog_changed(self) -> None:
        """The node's catalog changed: every vnode led or followed of a database dropped is let go, and every vnode
        moved away let go and deleted (:meth:`_let_go_unplaced`), then the current state of every vnode naming this
        node a replica that it neither leads nor follows is applied again (its database may be known now, or the
        vnode placed here now: :meth:`apply` having skipped it)."""
        self._changes.put_nowait(None)
        for pid, state in self.states.states.items():
            if self.node_id in state.replicas and pid not in self.led and pid not in self.following:
                self._changes.put_nowait((pid, state))

    async def apply(self, pid: PartitionId, state: PartitionState | None) -> None:
        """Lead, follow or stop vnode ``pid`` as ``state`` says (the module docstring); its waits look again after,
        whatever the outcome."""
        try:
            await self._apply(pid, state)
        finally:
            self._changed(pid)

    async def _apply(self, pid: PartitionId, state: PartitionState | None) -> None:
        db, placed = await self.storage.call(_placement, self.engine, pid.db_id, pid.vgroup)
        if db is None:
            await self._forget(pid)
            if state is not None and self.node_id in state.replicas:
                log.warning("vnode %d of database %s: not applied, the database is not known here", pid.vgroup,
                            pid.db_id)
            return
        key = (db, pid.vgroup)
        if state is not None and not placed:
            state = None  # (a move's: followed once its catalog record opened the vnode here, catalog_changed)
        held = [p for p, led in self.led.items() if led.key == key]
        held += [PartitionId(v.db_id, v.vgroup) for f in self.fetching.values()
                 if (v := f.fetcher.followed.get(key)) is not None]
        for other in [p for p in held if p != pid]:
            await self._forget(other)  # a dropped database's, of the same name (rv4 R5): let go before ``key`` is taken
        if state is None or self.node_id not in state.replicas or state.leader == NO_LEADER:
            await self._stop(pid, key)
        elif leads(state, self.node_id, self.broker_epoch):
            await self._lead(pid, key, state)
        elif state.leader == self.node_id:  # named leader under an older incarnation: wait for the next election
            await self._stop(pid, key)
        else:
            await self._follow(pid, key, state)

    async def _lead(self, pid: PartitionId, key: VnodeKey, state: PartitionState) -> None:
        self._taken[pid] = key
        led = self.led.get(pid)
        if led is not None and led.view.leader_epoch == state.leader_epoch:
            await self.storage.call_on(frozenset([key]), functools.partial(self._restate, led, state))
            return
        await self._resign(pid)
        self._unfollow(pid, key)
        if await self.storage.call_on(frozenset([key]), functools.partial(_held, self.engine, key)):
            # a cut its following left unfinished: finished before it leads (else every write refused); refused by
            # the disk again, StorageUnavailable: the takeover is retried
            await self.storage.call(finish_cut, self.engine, key[0], key[1], 0)
        self.purgatory.lead(key, state.leader_epoch)  # (before any write appended in it can begin its wait)
        try:
            view = await self.storage.call_on(frozenset([key]), functools.partial(
                _take_over, self.engine, key, state, self.node_id, self.broker_epoch, self.clock(), self.lag_max_ms))
        except BaseException:
            self.purgatory.fail(key, ErrorCode.not_leader_or_follower)
            raise
        led = self.led[pid] = _Led(key, view, view.hw)
        led.proposer = asyncio.create_task(self._propose(pid, led), name=f"walgate-isr-{key[0]}-{key[1]}")
        log.info("vnode %d of database %s: leading epoch %d from version %d", key[1], key[0], state.leader_epoch,
                 view.epoch_start)
        for told in self.leadership:
            told(key, state.leader_epoch)

    def _restate(self, led: _Led, state: PartitionState) -> None:
        wal = _wal(self.engine, led.key)
        led.view.on_state(state)
        led.view.update_hw(wal.next_version, wal.durable_version)
        self._post(led)

    async def _follow(self, pid: PartitionId, key: VnodeKey, state: PartitionState) -> None:
        self._taken[pid] = key
        await self._resign(pid)
        now = self.following.get(pid)
        if now is not None:
            held = self.fetching[now].fetcher.followed.get(key)
            if now == state.leader and held is not None and held.leader_epoch == state.leader_epoch:
                return
            self._unfollow(pid, key)
        vnode = FollowedVnode(key[0], pid.db_id, pid.vgroup, state.leader_epoch)
        vnode.cut_unfinished = await self.storage.call_on(frozenset([key]), functools.partial(
            self._start_following, key, vnode))
        fetching = self.fetching.get(state.leader)
        if fetching is None:
            links = self.links()
            fetcher = ReplicaFetcher(self.node_id, self.broker_epoch, state.leader, links, self.storage,
                                     self.engine, max_wait_ms=self.fetch_wait_ms, backoff_s=self.backoff_s,
                                     traffic=self.traffic)
            fetching = self.fetching[state.leader] = _Fetching(
                fetcher, links, asyncio.create_task(fetcher.run(), name=f"walgate-fetch-{state.leader}"))
        fetching.fetcher.follow(vnode)
        self.following[pid] = state.leader

    def _start_following(self, key: VnodeKey, vnode: FollowedVnode) -> bool:
        """On the lane: the vnode's visible version is the high watermark its leader's answers carry, from the one
        it knew (:func:`_baseline`: never below what it served since its WAL was opened; its truncation floor), set
        in ``vnode`` before the WAL reads it, so no reader (a consumer on this follower, a checkpoint, this manager's
        close after the follow was cancelled here) ever sees it lower; whether a cut (of an earlier following) left
        the WAL held: the fetcher finishes it before its first fetch."""
        followed = self.engine.store.local_vnode(*key)
        wal = followed.wal
        vnode.high_watermark = min(_baseline(followed), wal.next_version)
        wal.replication = functools.partial(followed_hw, vnode)
        _step_down(wal)
        return wal.held is not None

    async def _stop(self, pid: PartitionId, key: VnodeKey) -> None:
        await self._resign(pid)
        self._unfollow(pid, key)
        with contextlib.suppress(Exception):  # (a vnode not open here: nothing to freeze)
            await self.storage.call_on(frozenset([key]), functools.partial(self._freeze, key))

    def _freeze(self, key: VnodeKey) -> None:
        vnode = self.engine.store.local_vnode(*key)
        _step_down(vnode.wal)
        vnode.wal.replication = functools.partial(_fixed, _baseline(vnode))

    async def _let_go_unplaced(self) -> None:
        """Let go of every vnode led or followed whose database this node's catalog no longer has (:meth:`_forget`),
        and of every vnode open here the catalog no longer places here (a replica moved away): not led nor followed
        from now on, then closed and its files deleted (:meth:`Engine.drop_moved_vnode
        <walgate.storage.engine.Engine.drop_moved_vnode>`)."""
        known = await self.storage.call(lambda: {db.id for db in self.engine.catalog.databases.values()})
        for pid in [p for p in (*self.led, *self.following) if p.db_id not in known]:
            await self._forget(pid)
        for name, db_id, vgroup in await self.storage.call(self.engine.moved_away):
            pid, key = PartitionId(db_id, vgroup), (name, vgroup)
            await self._resign(pid)
            self._unfollow(pid, key)
            self._checkpointed.pop(key, None)
            if await self.storage.call(self.engine.drop_moved_vnode, name, vgroup):
                log.info("vnode %d of database %s: its replica moved away from this node: closed, its files deleted",
                         vgroup, name)

    async def _forget(self, pid: PartitionId) -> None:
        """Stop leading or following ``pid``, a vnode of a database dropped here (closed with it: nothing to
        freeze); a database made again under its name has another id, so no view, wait or fetch of this one is
        taken for it."""
        self._taken.pop(pid, None)
        leader = self.following.get(pid)
        if pid not in self.led and leader is None:
            return
        log.info("vnode %d of database %s: no longer led or followed here, its database was dropped", pid.vgroup,
                 pid.db_id)
        await self._resign(pid)
        key = self._key_of(pid)
        if key is not None:
            self._unfollow(pid, key)
        self.following.pop(pid, None)  # (its fetcher no longer holds it: nothing to stop)

    def _key_of(self, pid: PartitionId) -> VnodeKey | None:
        """The vnode (database name, vgroup) that ``pid`` is led or followed as here, None when it is neither. A
        name's database made again has another id: its vnode is the old one's key under another ``pid``."""
        led = self.led.get(pid)
        if led is not None:
            return led.key
        leader = self.following.get(pid)
        followed = {} if leader is None else self.fetching[leader].fetcher.followed
        return next((k for k, v in followed.items() if PartitionId(v.db_id, v.vgroup) == pid), None)

    async def _resign(self, pid: PartitionId) -> None:
        """Stop leading ``pid``: first its WAL takes no write (a lane call: a write appended before it was noted
        under the epoch led, one after it is refused, :class:`~walgate.storage.errors.NotLedNow`), then WalFetch no
        longer finds its view and its waiting acks=all writes, and any write of its epoch that begins to wait later,
        are answered NOT_LEADER_OR_FOLLOWER, so no write appended by a deposed leader is acknowledged. The caller
        then gives the vnode's WAL its next high watermark (followed or frozen)."""
        led = self.led.get(pid)
        if led is None:
            return
        with contextlib.suppress(StorageError):  # (a vnode closed meanwhile: it takes no write)
            await self.storage.call_on(frozenset([led.key]), lambda: _step_down(_wal(self.engine, led.key)))
        if self.led.get(pid) is not led:
            return
        del self.led[pid]
        self._changed(pid)
        if led.proposer is not None and led.proposer is not asyncio.current_task():
            led.proposer.cancel()
        self.purgatory.fail(led.key, ErrorCode.not_leader_or_follower)
        for told in self.leadership:
            told(led.key, None)

    def _unfollow(self, pid: PartitionId, key: VnodeKey) -> None:
        leader = self.following.pop(pid, None)
        if leader is None:
            return
        fetching = self.fetching[leader]
        fetching.fetcher.unfollow(key)
        if not fetching.fetcher.followed:
            del self.fetching[leader]
            fetching.task.cancel()
            fetching.links.close()

    # ------------------------------------------------------------ ISR changes (KIP-497)

    async def _propose(self, pid: PartitionId, led: _Led) -> None:
        """Every ``lag_max_ms / 2`` a round (:meth:`_propose_round`), until one ends this leadership. A round that
        failed otherwise is a bug, logged with its traceback; it ends as refused and the next round proposes again:
        a proposer gone would leave the ISR as it is for as long as this node leads (members out of sync never
        removed, caught-up followers never added)."""
        while True:
            await asyncio.sleep(self.lag_max_ms / 2000)
            try:
                if not await self._propose_round(pid, led):
                    return
            except Exception:
                log.exception("vnode %d of database %s: ISR round failed, proposed again in %.1f s", led.key[1],
                              led.key[0], self.lag_max_ms / 2000)
                with contextlib.suppress(StorageError):
                    await self.storage.call_on(frozenset([led.key]), led.view.on_refused)

    async def _propose_round(self, pid: PartitionId, led: _Led) -> bool:
        """The view's ISR proposal, if any, written (the module docstring); whether this node still leads. One the
        control plane could not take (ControlPlaneUnavailable, ControlPlaneRefused: maybe written, maybe not) ends
        as refused (the view proposes again next round, from the state it has or the one etcd then reports), logged
        at WARNING once per outage, as Kafka's ``AlterPartitionManager`` retries."""
        registered, eligible = dict(self.registered()), dict(self.eligible())
        proposal, known = await self.storage.call_on(frozenset([led.key]), lambda: (
            led.view.propose(self.clock(), eligible), led.view.state))
        if proposal is None:
            return True
        try:
            outcome = await self.states.alter_isr(known, pid, proposal, registered)
        except ControlPlaneUnavailable as e:
            if not led.outage:
                log.warning("vnode %d of database %s: ISR change not written, retried every %.1f s while the "
                            "control plane is unavailable: %s: %s", led.key[1], led.key[0],
                            self.lag_max_ms / 2000, type(e).__name__, e)
            led.outage = True
            await self.storage.call_on(frozenset([led.key]), led.view.on_refused)
            return True
        if led.outage:
            log.info("vnode %d of database %s: the control plane answers ISR changes again", led.key[1], led.key[0])
            led.outage = False
        if outcome.error in (ErrorCode.fenced_leader_epoch, ErrorCode.stale_broker_epoch):
            log.warning("vnode %d of database %s: ISR change refused (%s): no longer leading", led.key[1],
                        led.key[0], outcome.error.name)
            await self.storage.call_on(frozenset([led.key]), functools.partial(self._freeze, led.key))
            await self._resign(pid)
            if outcome.error is ErrorCode.stale_broker_epoch:
                task = self._loop.create_task(self._relead(pid), name=f"walgate-relead-{pid.db_id}-{pid.vgroup}")
                self._releads.add(task)
                task.add_done_callback(self._releads.discard)
            return False
        log.info("vnode %d of database %s: ISR %s %s", led.key[1], led.key[0],
                 [m.replica for m in proposal.isr], "written" if outcome.error is None else
                 f"refused ({outcome.error.name}), state read again")
        await self.storage.call_on(frozenset([led.key]), functools.partial(self._altered, led, outcome.state,
                                                                           outcome.error is not None))
        self._changed(pid)
        return True

    async def _relead(self, pid: PartitionId) -> None:
        """After this node stopped leading ``pid`` because its ISR change found it fenced (STALE_BROKER_EPOCH: its
        registration was gone or changed when the change was checked, its lease lapsed under load): once it holds
        its lease again, ``pid``'s state is read from etcd and, when it is the very state the watch reported last,
        applied again. The controller elects another leader only if it saw the registration lapse; one that read
        the membership only after the node registered again (a broker epoch names the process, so it is the same)
        leaves the state naming this node, and no later change would end the partition's leaderlessness: it then
        leads again in that epoch, as after a restart. A state read that differs from the watch's means the watch
        has a newer change to deliver (another leader elected meanwhile, say), which is applied as it comes: the
        state cached then is never applied, as it may name this node leader of an epoch another node leads now.
        Until the read succeeds (etcd unavailable), it is retried every ``backoff_s``; a change the watch applies
        meanwhile (this node leads or follows ``pid`` again) ends it."""
        while True:
            await asyncio.sleep(self.backoff_s)
            if pid in self.led or pid in self.following:
                return
            if not self.lease_held():
                continue
            try:
                now = await self.states.read(pid)
            except ControlPlaneUnavailable:
                continue
            if now is not None and now == self.states.states.get(pid):
                log.info("vnode %d of database %s: the state etcd holds still names leader %d in epoch %d: applied "
                         "again", pid.vgroup, pid.db_id, now.leader, now.leader_epoch)
                self._changes.put_nowait((pid, now))
            return

    def _altered(self, led: _Led, state: PartitionState | None, refused: bool) -> None:
        if refused:
            led.view.on_refused()
        if state is not None:
            self._restate(led, state)

    async def close(self) -> None:
        """Stop every fetcher and proposer; the waiting acks=all writes answered NOT_LEADER_OR_FOLLOWER; every vnode
        led or followed since the start keeps the visible version it has now, written as its high watermark
        checkpoint: also one whose leadership a controlled shutdown just moved while it was not followed yet (its
        :meth:`_follow` cancelled with this manager), which a node that ran less than ``checkpoint_s`` would
        otherwise leave with no checkpoint at all (a vnode let go since is skipped)."""
        keys = sorted({led.key for led in self.led.values()} | {
            key for f in self.fetching.values() for key in f.fetcher.followed} | set(self._taken.values()))
        for task in self._releads:
            task.cancel()
        for pid in list(self.led):
            await self._resign(pid)
        tasks = [f.task for f in self.fetching.values()]
        for fetching in self.fetching.values():
            fetching.task.cancel()
            fetching.links.close()
        self.fetching.clear()
        self.following.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        for key in keys:
            with contextlib.suppress(Exception):  # (a vnode closed meanwhile: nothing to freeze)
                await self.storage.call_on(frozenset([key]), functools.partial(self._freeze, key))
        await self.write_checkpoints(keys)
