"""What every Kafka handler shares: the engine (via the storage thread), fetch wake-ups; who sent a request is not
here but in the handler's :class:`~walgate.gateway.kafka.context.RequestContext`.

The engine is only reachable on the storage thread: the broker keeps it
private and hands it to the functions handlers run there
(:meth:`Broker.call`); coordinator calls that need topics get the snapshot the
storage lane published (:meth:`Broker.group_call`, on the coordinator lane).
A handler cannot read engine state on the event loop, where a concurrent
CreateTopics/DeleteTopics would change it under it.

Push, not polling: the engine was opened with the broker's :class:`FetchWakeups`
as its records listener, which wakes the Fetches waiting on a topic-partition
as soon as an append gives it new records (see :mod:`.wakeups`).

Handlers reach topic-partitions through the engine's narrow partition
interface (``engine.partitions``, :mod:`walgate.storage.partitions`) in the
functions they run there.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import uuid
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from walgate.coordinator.classic import Completion
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.kafka.group_coordinators import GroupCoordinators
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.kafka.held_snapshots import HeldSnapshots
from walgate.gateway.kafka.led_vnodes import LedVnodes
from walgate.gateway.kafka.node_links import NodeLinks
from walgate.gateway.kafka.shares import ShareService
from walgate.gateway.kafka.transactions import TransactionService
from walgate.gateway.kafka.wakeups import FetchWakeups
from walgate.gateway.listeners import ListenerInfo
from walgate.gateway.quotas import ClientQuotas
from walgate.gateway.replication_traffic import ReplicationTraffic
from walgate.gateway.shared_catalog import SharedCatalog
from walgate.gateway.storage_thread import StorageThread
from walgate.security.authorizer import Authorizer
from walgate.storage.engine import Engine
from walgate.storage.lanes import Relane, TopicLookup, VnodeKey, covers, held
from walgate.storage.topics_snapshot import TopicsSnapshot

__all__ = ["Broker", "CLUSTER_ID_FILE"]

CLUSTER_ID_FILE = "cluster.id"
"""A single node's Kafka cluster id, in its data dir (a cluster's is in etcd)."""

P = ParamSpec("P")
T = TypeVar("T")



@dataclass
class Broker:
    engine: InitVar[Engine]  # kept private: see the module docstring
    storage: StorageThread
    node_id: int
    host: str
    port: int
    cluster_id: str
    versions: dict[int, tuple[int, int]]  # what ApiVersions advertises
    groups: GroupService
    wakeups: FetchWakeups  # the records listener the engine was opened with
    configs: dict[str, str] = field(default_factory=dict)  # broker configs DescribeConfigs answers
    auto_create_partitions: int = 0  # Metadata creates unknown topics with this many partitions (0: never)
    authorizer: Authorizer | None = None  # ACLs enforced (authorizer.class.name set); None: everything allowed
    quotas: ClientQuotas = field(default_factory=ClientQuotas)  # client quotas in force (gateway/quotas.py)
    # listener name -> the (host, port) told to clients connected through it; others are told (host, port)
    advertised: dict[str, tuple[str, int]] = field(default_factory=dict)
    transactions: TransactionService | None = None  # the transaction coordinator (None: transactions refused)
    shares: ShareService | None = None  # share groups (KIP-932; None: refused)
    cluster: ClusterMember | None = None  # cluster mode: the membership DescribeCluster lists (None: one node)
    shared: SharedCatalog | None = None  # cluster mode: every call is staged, its shared catalog changes published
    coordinators: GroupCoordinators | None = None  # cluster mode: which node coordinates each group (None: this one)
    led: LedVnodes | None = None  # the vnodes this node leads with followers (WalFetch; None: none)
    # what WalFetch answers are throttled by and counted in (KIP-73; None: no throttle, nothing counted)
    replication_traffic: ReplicationTraffic | None = None
    links: NodeLinks | None = None  # cluster mode: Kafka requests to the other nodes (node_links)
    # the vnode snapshots followers page from this node as their leader (VnodeSnapshot)
    held_snapshots: HeldSnapshots = field(default_factory=HeldSnapshots)
    # replica.selector.class (KIP-392): where a replicated partition's leader sends consumers to read (None: none)
    replica_selector: str | None = None

    def __post_init__(self, engine: Engine) -> None:
        self._engine = engine

    def address(self, listener: ListenerInfo) -> tuple[str, int]:
        """The (host, port) this node is named by to a client connected through ``listener``: that listener's
        advertised address."""
        return self.advertised.get(listener.name, (self.host, self.port))

    async def call(self, fn: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(engine, *args, **kwargs)`` on the storage thread: the one way handlers reach the engine. In cluster
        mode the users, ACLs, quotas and configs it changes are the cluster's (:mod:`~walgate.gateway.shared_catalog`):
        it returns once they are applied on this node."""
        if self.shared is not None:
            return await self.shared.run(functools.partial(fn, self._engine, *args, **kwargs))
        return await self.storage.call(fn, self._engine, *args, **kwargs)

    async def call_on(self, keys_of: Callable[[TopicLookup], frozenset[VnodeKey] | None],
                      fn: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(engine, *args, **kwargs)`` holding only the vnodes ``keys_of(topics)`` names (the Kafka-native
        partitions a Produce, Fetch or ListOffsets touches: :func:`~walgate.storage.lanes.partition_keys`), so it
        runs beside calls holding other vnodes (a large write into another database). The keys are computed here
        from the published topics and checked again on the lane against the catalog before ``fn`` runs; when they no
        longer cover it (a topic created or dropped since) ``fn`` runs with the whole lane instead, as it does when
        ``keys_of`` answers None or fails: then through :meth:`call` (in cluster mode a staged call, so what it
        changes in the catalog is the cluster's). Held to vnodes, ``fn`` must not change the catalog."""
        try:
            keys = keys_of(self._engine.topics())
        except Exception:  # noqa: BLE001 - not named: the whole lane, where ``fn`` meets (and answers) the failure
            keys = None
        if keys is None:
            return await self.call(fn, *args, **kwargs)
        call = functools.partial(fn, self._engine, *args, **kwargs)
        return await self.storage.call_on(keys, functools.partial(_on_vnodes, self._engine, keys_of, call),
                                          lambda: self.call(fn, *args, **kwargs))

    def topics(self) -> TopicsSnapshot:
        """The topics as the storage lane last published them (any thread)."""
        return self._engine.topics()

    def beside(self, fn: Callable[Concatenate[Engine, P], T], *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
        """``fn(engine, *args, **kwargs)`` submitted at once to the loop's default executor, holding no lane: only for
        what the engine documents as safe beside its lanes' calls (:meth:`Engine.prepare_kafka_topic` makes files no
        catalog names yet). The future may be awaited, or not (it runs all the same)."""
        return asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, self._engine, *args, **kwargs))

    async def group_call(self, fn: Callable[[TopicsSnapshot], tuple[T, list[Completion]]]) -> T:
        """A coordinator call that needs topic names, ids or partition counts: ``fn(topics)`` through
        :meth:`GroupService.run` (on the coordinator lane), ``topics`` the snapshot published when it runs."""
        engine = self._engine
        return await self.groups.run(lambda: fn(engine.topics()))

    @staticmethod
    def existing_cluster_id(data_dir: Path) -> str | None:
        """The cluster id a single node made for this data directory (:meth:`load_cluster_id`), if it made one."""
        try:
            raw = (data_dir / CLUSTER_ID_FILE).read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return raw if re.fullmatch(r"[A-Za-z0-9_-]{22}", raw) else None

    @staticmethod
    def load_cluster_id(data_dir: Path) -> str:
        """A stable cluster id for this data directory (Kafka's 22-character base64 UUID form)."""
        path = data_dir / CLUSTER_ID_FILE
        if not path.exists():
            raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            tmp = path.with_suffix(".tmp")
            tmp.write_text(raw)
            tmp.replace(path)
        return path.read_text().strip()

    def watch(self, keys: list[tuple[str, int]]) -> asyncio.Event:
        """An event set as soon as any of ``keys`` gets new records."""
        return self.wakeups.watch(keys)

    def unwatch(self, keys: list[tuple[str, int]], event: asyncio.Event) -> None:
        self.wakeups.unwatch(keys, event)


def _on_vnodes(engine: Engine, keys_of: Callable[[TopicLookup], frozenset[VnodeKey] | None], fn: Callable[[], T]) -> T:
    """On the lane: ``fn()`` once the vnodes the call holds cover what ``keys_of`` names now (an exclusive call holds
    them all); :class:`~walgate.storage.lanes.Relane`, before anything ran, when they do not."""
    if held() is not None and not covers(keys_of(engine)):
        raise Relane
    return fn()
