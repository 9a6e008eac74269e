"""One walgate node: the engine on its storage thread, the coordinators on theirs, the listeners, WAL syncing.

Start-up: open the engine (on the storage thread, with ``max_partitions`` and its observers: the Fetch
wake-ups the broker uses and the group members the group service fills, and the real clock,
:data:`~walgate.storage.clock.SYSTEM_CLOCK`, which the sync task and the cleaner read their ``now`` from), start the HTTP API (HTTPS with
``http_ssl_enabled``) and every Kafka listener (TLS contexts from :mod:`.tls` for SSL and SASL_SSL listeners),
start the WAL sync task, then log exactly one
``walgate ready http=HOST:PORT kafka=HOST:PORT listeners=NAME://HOST:PORT,...`` line (``kafka=`` is the first
listener; ports as actually bound, so port 0 works; Kafka clients are told the advertised address of the
listener they connected through, which defaults to its bound one). Shutdown (SIGTERM / SIGINT, or leaving
``async with Gateway(...)``) runs in reverse: stop the sync task, stop the
listeners (in-flight requests get ``HTTP_SHUTDOWN_TIMEOUT`` seconds), stop group commit, then
``engine.close()`` on the storage thread, which fsyncs and closes every vnode.

Cluster mode (``cluster.etcd.endpoints``, :mod:`.cluster_member`, :mod:`.shared_catalog`, docs/cluster.md): before
the engine opens, the node reads the cluster's Kafka cluster id and its number of group coordinator partitions
from etcd (etcd not answering stops the start, and so does a data dir made with another number); the
engine's catalog is put in cluster mode (users, ACLs, quotas and configs are the cluster's); once its Kafka
listeners are bound (their ports known, not yet accepting connections) the node registers and stands for
controller, then reads the cluster's catalog stream, starts its replica manager and waits until that read the
partition states and its membership read names the node (as Kafka's broker serves only once it caught up with the
cluster metadata: Metadata names every led partition's leader from its first answer) and makes ``root`` through
the stream when needed; only then do the listeners accept connections and the ready line is logged (a refused
registration, or a stream, states or membership not read within ``CHANGE_TIMEOUT_S``, stops the start). Shutdown
stops following the stream and deregisters first, so the node leaves before its listeners close. With replicas
(issue 25) it is a controlled shutdown, as Kafka's (``controlled.shutdown.enable``, KIP-631): a node leading
replicated vgroups marks its registration shutting down before anything else stops; it stays registered (every
node's Metadata names it while it leads), and the controller elects another in-sync replica of each vgroup it leads
and fences it out of the ISRs at once, not after its lease runs out; it keeps serving (its followers' fetches too)
until its replica manager leads nothing, at most ``HAND_OVER_S`` seconds, then deregisters (a vgroup it is the last
in-sync replica of has no leader then, as after any stop).

Two lanes (:mod:`.storage_thread`, issue 23): ``walgate-storage`` owns the engine's catalog, vnodes and topics;
``walgate-coordinator`` owns the group and transaction coordinators and the coordinator log. At the end of every
storage-lane call the topics snapshot is published when the catalog changed (the coordinator lane reads topics only
from it), and storage-lane code reaches the coordinator log through a :class:`~.storage_thread.LaneBridge`. Each
lane's calls and queue are counted under its ``lane`` label (``storage``, ``coordinator``: docs/metrics.md), and
``/readyz`` asks both lanes.

Group commit (:mod:`.group_commit`): the engine is opened with it, so ``WAL_LEVEL 2`` appends and consumer-group
commits return before their fdatasync, and every call of either lane returns once what it wrote is durable (each lane
takes its own notes); the fdatasyncs run on the group-commit threads, one per file at a time, each covering
every write made while the previous one ran.

The WAL sync task asks the engine to fsync the ``WAL_LEVEL 1`` vnodes whose
``WAL_FSYNC_PERIOD`` elapsed and sleeps for the delay it returns, bounded to
``SYNC_MIN_DELAY .. SYNC_MAX_DELAY``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from types import TracebackType

from aiohttp import web

from walgate.cluster.model import ControlPlaneUnavailable
from walgate.cluster.partition_codec import CatalogVnodes
from walgate.cluster.partition_states import PartitionStates, Reconciler
from walgate.coordinator.classic import ClassicGroups
from walgate.coordinator.consumer_group import ConsumerGroups
from walgate.coordinator.coordinator import CLEANUP_INTERVAL_MS, GroupCoordinator
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.coordinator.transactions import TransactionCoordinator
from walgate.gateway import gc_policy
from walgate.gateway.cluster_member import ClusterMember, ClusterStartError, dnodes, stop_tasks
from walgate.gateway.config import Config, ConfigError, kafka_settings
from walgate.gateway.etcd_access import etcd_access
from walgate.gateway.group_commit import GroupCommit
from walgate.gateway.http_api import make_app
from walgate.gateway.http_auth import BasicAuth
from walgate.gateway.http_log import ServerLog
from walgate.gateway.http_origin import parse_origins
from walgate.gateway.ingest_workers import IngestWorkers
from walgate.gateway.jwks import oauthbearer_exchanges
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.coordinator_replicas import CoordinatorReplicas
from walgate.gateway.kafka.group_coordinators import GroupCoordinators, cluster_partitions
from walgate.gateway.kafka.groups import GroupMembers, GroupService, now_ms
from walgate.gateway.kafka.handlers import advertised
from walgate.gateway.kafka.led_vnodes import LedVnodes
from walgate.gateway.kafka.node_links import NodeLinks
from walgate.gateway.kafka.offsets_import import import_offsets
from walgate.gateway.kafka.sasl import OAUTHBEARER, SaslSettings
from walgate.gateway.kafka.server import KafkaServer
from walgate.gateway.kafka.share_persister import SharePersister
from walgate.gateway.kafka.shares import ShareService
from walgate.gateway.kafka.transactions import TransactionService
from walgate.gateway.kafka.wakeups import FetchWakeups
from walgate.gateway.metrics import COORDINATOR_LANE, SCRAPE_TIMEOUT, STORAGE_LANE, Metrics
from walgate.gateway.passwords import PasswordChecker, password_credential
from walgate.gateway.principal_mapping import PrincipalMapper
from walgate.gateway.query_workers import QueryWorkers
from walgate.gateway.replica_status import ReplicationCollector
from walgate.gateway.replicas import ReplicaManager
from walgate.gateway.root_user import ROOT_PASSWORD_ENV, ROOT_PASSWORD_FILE_ENV, bootstrap_root
from walgate.gateway.shared_catalog import CHANGE_TIMEOUT_S, SharedCatalog
from walgate.gateway.single_node_upgrade import take_in
from walgate.gateway.storage_thread import LaneBridge, StorageThread
from walgate.gateway.tls import node_client_context, server_context
from walgate.security.authorizer import Authorizer
from walgate.security.principals import super_principals
from walgate.storage import datadir, offsets_import
from walgate.storage.cleaner import MAP_LOAD_FACTOR, CleanStats, map_entries
from walgate.storage.clock import SYSTEM_CLOCK
from walgate.storage.durability import Need
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError
from walgate.storage.lanes import Relane, held
from walgate.storage.quotas import QUOTA_OP
from walgate.storage.replicated_coordinator_log import not_led
from walgate.storage.resource_configs import RESOURCE_OP
from walgate.storage.show import Dnode
from walgate.storage.wal import PendingSync

__all__ = ["Gateway", "run_server", "SYNC_MIN_DELAY", "SYNC_MAX_DELAY", "HTTP_SHUTDOWN_TIMEOUT"]

log = logging.getLogger(__name__)

"""The coordinator lane's ``lane`` label in the metrics."""
SYNC_MIN_DELAY = 0.001
SYNC_MAX_DELAY = 1.0
HTTP_SHUTDOWN_TIMEOUT = 5.0
VNODE_THREADS = 4
"""Threads running the storage lane's calls that hold only some vnodes (:meth:`StorageThread.call_on`): how many
such calls (on disjoint vnodes) run at once beside each other."""
HAND_OVER_S = 10.0
"""A controlled shutdown's longest wait for the vgroups this node leads to be led elsewhere."""


class Gateway:
    """A running node; use ``async with Gateway(config) as gw`` or :meth:`start` / :meth:`stop`."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.metrics = Metrics()
        self._storage = StorageThread(self.metrics.lane_calls(STORAGE_LANE), vnode_threads=VNODE_THREADS)
        self._coordinator = StorageThread(self.metrics.lane_calls(COORDINATOR_LANE),
                                          name="walgate-coordinator")  # the coordinators' lane (see the docstring)
        self._queries = QueryWorkers(config.sql_workers, config.sql_timeout_ms, config.sql_max_bytes,
                                     self.metrics.query, config.sql_answers_max_bytes)
        self._ingest = IngestWorkers()  # large write bodies are planned there, never on the storage thread
        self._group_commit = GroupCommit(self._storage)
        self._engine: Engine | None = None
        self._lock: int | None = None  # the data dir lock's descriptor (datadir.lock) while started
        self._http: web.AppRunner | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self._clean_task: asyncio.Task[None] | None = None
        self._meta_task: asyncio.Task[None] | None = None
        self._dnodes_task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()  # set by stop(): a meta store's check in its thread ends early
        self._kafka: KafkaServer | None = None
        self._authorizer: Authorizer | None = None  # Kafka and SQL checks share it (authorizer_class_name)
        self._transactions: TransactionService | None = None
        self._cluster: ClusterMember | None = None  # cluster mode: this node's membership (cluster_member.py)
        self._shared: SharedCatalog | None = None  # cluster mode: the shared catalog (shared_catalog.py)
        # cluster mode: which node coordinates each group (kafka/group_coordinators.py)
        self._group_coordinators: GroupCoordinators | None = None
        # cluster mode (issue 25): the replica manager
        self._replicas: ReplicaManager | None = None
        self._replication_tasks: list[asyncio.Task[None]] = []
        self._offsets_to_import: offsets_import.OffsetsOf | None = None  # storage/offsets_import.py: pending ones
        self.kafka_address: tuple[str, int] = ("", 0)  # the first listener's bound address
        self.kafka_addresses: dict[str, tuple[str, int]] = {}  # listener name -> bound (host, port)

    @property
    def http_address(self) -> tuple[str, int]:
        """(host, port) the HTTP API is bound to."""
        if self._http is None:
            raise RuntimeError("the gateway is not running")
        host, port = self._http.addresses[0][:2]
        return host, port

    async def start(self) -> None:
        """Open the engine and start serving; on failure, undo what was started and raise."""
        cfg = self.config
        log.debug("starting with %r", cfg)
        tls = self._tls_contexts()  # first: a certificate that cannot be loaded stops the start before anything opens
        access = etcd_access(cfg) if cfg.cluster_etcd_endpoints is not None else None  # its files, likewise
        wakeups, members = FetchWakeups(asyncio.get_running_loop()), GroupMembers()  # the engine's observers
        bridge = LaneBridge(self._coordinator)  # the engine's way to the coordinator lane
        try:
            self._lock = datadir.lock(cfg.data_dir)  # one process per data dir (walgate repair waits for none)
            if cfg.cluster_etcd_endpoints is not None:  # etcd answers before anything opens, or the start stops
                self._cluster = ClusterMember(cfg.cluster_etcd_endpoints, cfg.cluster_name, cfg.node_id, cfg.data_dir,
                                              cfg.broker_session_timeout_ms, access)
                cluster_id = await self._cluster.kafka_cluster_id(Broker.existing_cluster_id(cfg.data_dir))
                made = datadir.coordinator_partitions_made(cfg.data_dir)  # a single node's data dir: its own N
                partitions = await cluster_partitions(self._cluster, made or cfg.offsets_topic_num_partitions)
            else:
                cluster_id = Broker.load_cluster_id(cfg.data_dir)
                partitions = cfg.offsets_topic_num_partitions
            self._engine = await self._storage.call(
                Engine.open, cfg.data_dir, max_request_bytes=cfg.max_request_bytes, max_partitions=cfg.max_partitions,
                max_tables=cfg.max_tables_per_database, listener=wakeups, consumers=members, group_commit=True,
                clock=SYSTEM_CLOCK, coordinator_partitions=partitions,
                batch_cache_bytes=cfg.batch_cache_bytes, whole_stores=False, coordinator_lane=bridge,
                node_id=cfg.node_id,
            )
            engine = self._engine
            if self._cluster is not None:
                self._group_coordinators = await self._coordinator_partitions(engine, self._cluster, partitions)
            if self._cluster is not None and cfg.replication_enable:  # __consumer_offsets' partitions: none led yet
                if offsets_import.pending(cfg.data_dir):  # a single node's offsets, read before they are put aside
                    self._offsets_to_import = offsets_import.by_group(
                        await self._coordinator.call(lambda: list(engine.store.coordinator.items())))
                await self._coordinator.call(_coordinators_not_led, engine)

            def end_of_storage_call() -> list[Need]:
                engine.publish_topics()
                return engine.take_unsynced() + bridge.take_needs()

            self._storage.group_commit(end_of_storage_call, self._group_commit)
            self._coordinator.group_commit(engine.take_coordinator_unsynced, self._group_commit)
            self._group_commit.own(self._coordinator, await self._coordinator.call(engine.coordinator_logs))
            if self._cluster is not None:  # users, ACLs, quotas and configs are the cluster's (shared_catalog.py)
                await self._storage.call(engine.cluster_mode, cfg.replication_enable)
            elif self._needs_root:
                await bootstrap_root(self._storage.call, engine, os.environ)
            passwords = PasswordChecker(lambda user: self._storage.call(password_credential, engine, user))
            for topic in await self._storage.call(engine.delete_dropped_offsets):
                log.warning("topic %r was dropped before its committed offsets were deleted (a stop came in between): "
                            "they are deleted now", topic)
            groups = self._group_service(self._engine, members, bridge)
            await groups.load()  # the recorded groups, before any request
            self._authorizer = (Authorizer(self._engine.catalog.acls, super_principals(cfg.super_users),
                                           cfg.allow_everyone_if_no_acl_found) if cfg.authorizer_class_name else None)
            damage = await self._storage.call(lambda: engine.damage_log)  # /healthz reads it on the loop
            self._http = web.AppRunner(
                make_app(self._engine, self._storage, self._queries, damage, max_request_bytes=cfg.max_request_bytes,
                         groups=groups, coordinator=self._coordinator,
                         metrics=self.metrics, listeners=self._listeners, authorizer=self._authorizer,
                         allowed_origins=parse_origins(cfg.http_allowed_origins),
                         basic_auth=BasicAuth(passwords) if cfg.http_auth == "basic" else None,
                         ingest=self._ingest,
                         shares=self._share_coordinator,
                         cluster=self._cluster_check if cfg.cluster_etcd_endpoints is not None else None,
                         shared=lambda: self._shared,
                         node_tls=node_client_context(cfg) if cfg.http_ssl_enabled and self._cluster else None,
                         replicas=lambda: self._replicas, member=lambda: self._cluster),
                shutdown_timeout=HTTP_SHUTDOWN_TIMEOUT, logger=ServerLog(),
            )
            await self._http.setup()
            await web.TCPSite(self._http, cfg.host, cfg.http_port, ssl_context=tls.get(None)).start()
            self._kafka = await self._start_kafka(self._engine, groups, wakeups, tls, passwords, cluster_id)
            await self._join_cluster(self._kafka.broker)
            await self._kafka.serve()
            self._sync_task = asyncio.create_task(self._sync_loop(), name="walgate-wal-sync")
            self._meta_task = asyncio.create_task(self._check_meta_stores(self._engine), name="walgate-meta-checks")
            if cfg.log_cleaner_enable:
                self._clean_task = asyncio.create_task(self._clean_loop(self._engine), name="walgate-log-cleaner")
        except BaseException:
            await self.stop()
            raise
        host, port = self.http_address
        listeners = ",".join(f"{name}://{h}:{p}" for name, (h, p) in self.kafka_addresses.items())
        log.info("walgate ready http=%s:%d kafka=%s:%d listeners=%s", host, port, *self.kafka_address, listeners)

    def _group_service(self, engine: Engine, members: GroupMembers, bridge: LaneBridge) -> GroupService:
        """The node's consumer-group coordinator (Kafka's group APIs and the web console share it)."""
        cfg = self.config
        classic = ClassicGroups(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
        )
        return GroupService(engine, self._coordinator, GroupCoordinator(
            classic,
            ConsumerGroups(
                heartbeat_interval_ms=cfg.group_consumer_heartbeat_interval_ms,
                session_timeout_ms=cfg.group_consumer_session_timeout_ms,
                is_classic_group_in_use=classic.has_members,
                group_configs=lambda group_id: engine.topics().group_configs(group_id),  # on the coordinator lane
            ),
            now_ms=now_ms(),
        ), members, bridge)

    async def _transaction_service(self, engine: Engine, links: NodeLinks | None,
                                   led: Callable[[], LedVnodes | None]) -> TransactionService:
        """The node's transaction coordinator, its durable state loaded and its decided transactions finished;
        ``links``: this node's connections to the other nodes (cluster mode); ``led``: its replica manager (None until
        it runs: replicated partitions' markers)."""
        cfg = self.config
        self._transactions = TransactionService(
            engine, self._coordinator, self._storage,
            TransactionCoordinator(cfg.transaction_max_timeout_ms, cfg.transactional_id_expiration_ms,
                                   cfg.transaction_version),
            cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            self._group_coordinators, links, led, replicated=self._group_coordinators is not None and cfg.replication_enable,
        )
        await self._transactions.open()
        return self._transactions

    def _node_links(self, member: ClusterMember) -> NodeLinks:
        """This node's Kafka connections to the other nodes: through the listener named ``inter.broker.listener.name``
        (checked to name one), else its first one, over TLS when that is SSL or SASL_SSL."""
        cfg = self.config
        listeners = [lt.info for lt in cfg.kafka_listeners()]
        wanted = (cfg.inter_broker_listener_name or listeners[0].name).upper()
        info = next(i for i in listeners if i.name == wanted)
        return NodeLinks(member, info.name, node_client_context(cfg.for_listener(info.name)) if info.tls else None)

    def _tls_contexts(self) -> dict[str | None, ssl.SSLContext]:
        """The TLS context of each SSL/SASL_SSL listener (by name) and of the HTTP API (None), from the
        configuration; raises :class:`ConfigError` naming the one whose files cannot be loaded."""
        cfg = self.config
        contexts: dict[str | None, ssl.SSLContext] = {}
        if cfg.http_ssl_enabled:
            contexts[None] = server_context(cfg, "http")
        for listener in cfg.kafka_listeners():
            if listener.info.tls:
                contexts[listener.name] = server_context(cfg.for_listener(listener.name), f"listener {listener.name}",
                                                         cfg.client_auth(listener))
        return contexts

    def _http_url(self, broker: Broker) -> str:
        """The base URL other nodes reach this node's HTTP API at (SQL writes forwarded to it): the host of its
        first advertised Kafka listener, the HTTP API's bound port."""
        host = next(iter(broker.advertised.values()), (broker.host, broker.port))[0]
        scheme = "https" if self.config.http_ssl_enabled else "http"
        return f"{scheme}://{host}:{self.http_address[1]}"

    async def _coordinator_partitions(self, engine: Engine, member: ClusterMember, partitions: int) -> GroupCoordinators:
        """The cluster's group coordinators over its ``partitions`` coordinator partitions, once the data dir is
        known to hold that many (a data dir made with another number stops the start: its groups are in other
        partitions than the cluster's, kafka/group_coordinators.py) and, when it is a single node's, taken into the
        cluster (:mod:`.single_node_upgrade`: refused, the start stopped, when it cannot be)."""
        made = await self._coordinator.call(lambda: engine.coordinator_partitions)
        if made != partitions:
            raise ClusterStartError(
                f"data dir {self.config.data_dir} holds {made} group coordinator partitions "
                f"(offsets.topic.num.partitions when it was made), cluster {member.keys.cluster_id!r} has {partitions}:"
                " its groups would be in other partitions than the cluster's; start this node on a new data dir")
        await take_in(member, self._storage, self._coordinator, engine, self.config.data_dir, partitions,
                      self.config.replication_enable)  # a single node's data dir as a new cluster's first node
        coordinators = GroupCoordinators(member, partitions)
        await coordinators.load()
        return coordinators

    async def _join_cluster(self, broker: Broker) -> None:
        """Tell ``SHOW DNODES`` and DescribeCluster who is in the cluster: on a single node, the node itself. In cluster
        mode, register with the node's advertised listeners (refused: :class:`~.cluster_member.ClusterStartError`),
        follow the membership, start the shared catalog and wait until it read the stream (then every
        ``Broker.call`` runs through it), and make ``root`` through it when needed (module docstring)."""
        engine = self._engine
        assert engine is not None
        member = self._cluster
        if member is None:
            own = Dnode(broker.node_id, f"{broker.host}:{broker.port}", "ready")
            await self._storage.call(engine.set_dnodes, (own,))
            return
        advertised = tuple(f"{name}://{h}:{p}" for name, (h, p) in broker.advertised.items())
        await member.join(advertised, self._http_url(broker), self.config.broker_rack)
        broker.cluster = member
        self._dnodes_task = asyncio.create_task(self._publish_dnodes(member, engine), name="walgate-dnodes")
        applied = await self._storage.call(lambda: engine.catalog.shared_seq)
        shared = self._shared = SharedCatalog(member, self._storage, engine, applied,
                                              functools.partial(self._catalog_applied, broker, engine))
        shared.start()
        try:
            async with asyncio.timeout(CHANGE_TIMEOUT_S):
                while not shared.caught_up:
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise ClusterStartError(f"the cluster's catalog could not be read within {CHANGE_TIMEOUT_S:g} s") from None
        broker.shared = shared
        await self._start_replication(member, broker, engine)
        await _caught_up(member, self._replicas)
        if self._needs_root:
            await bootstrap_root(shared.run, engine, os.environ)

    async def _start_replication(self, member: ClusterMember, broker: Broker, engine: Engine) -> None:
        """Issue 25 (docs/plans/replication-wiring.md, steps 3 and 5): every node runs a :class:`ReplicaManager`
        (leading, following or stopping each replicated vnode it holds as its partition state says; the registered
        nodes' broker epochs from the membership it reads; a fetcher's links of its own) and is WalFetch's
        :attr:`Broker.led`; every node runs the controller's :class:`Reconciler`, which writes only while the node
        holds the controller election, over the catalog's replicated vnodes (and, with ``auto.leader.rebalance.enable``,
        moves leadership back to preferred replicas); ``/metrics`` reports both with Kafka's
        replication metrics (:mod:`walgate.gateway.replica_status`). Started once the catalog was read
        (the vnodes are open and the partition states name databases this node knows)."""
        registration = member.registration
        assert registration is not None and registration.epoch is not None and member.election is not None
        assert self._shared is not None
        cfg = self.config
        rebalance = ((cfg.leader_imbalance_check_interval_seconds, cfg.leader_imbalance_per_broker_percentage)
                     if cfg.auto_leader_rebalance_enable else None)
        reconciler = Reconciler(PartitionStates(member.session, member.keys), member.election,
                                catalog=functools.partial(_replicated_vnodes, self._shared, self._storage, engine,
                                                          cfg.min_insync_replicas),
                                rebalance_every=rebalance)
        manager = self._replicas = ReplicaManager(
            broker.node_id, registration.epoch, engine, self._storage, PartitionStates(member.session, member.keys),
            lambda: member.broker_epochs, functools.partial(self._node_links, member),
            lag_max_ms=self.config.replica_lag_time_max_ms, lease_held=lambda: member.registered,
            eligible=lambda: member.eligible_epochs)
        broker.led, broker.replication_traffic = manager, manager.traffic
        await self._storage.call(engine.set_leaders, manager.leader_of)
        if self._group_coordinators is not None and self.config.replication_enable:  # __consumer_offsets' leaders
            replicated = CoordinatorReplicas(broker, engine, self._storage, self._coordinator, self._group_commit,
                                             lambda: self._replicas, self._group_coordinators.partitions,
                                             self.config.offsets_topic_replication_factor)
            manager.leadership.append(replicated.leadership)
            self._group_coordinators.replicated = replicated
            if broker.shares is not None:  # share-partitions whose leadership changed here are read again
                manager.leadership.append(broker.shares.leadership)
        self.metrics.registry.register(ReplicationCollector(  # Kafka's replication metrics (replica_status.py)
            lambda: self._replicas, reconciler, asyncio.get_running_loop(), SCRAPE_TIMEOUT))
        self._replication_tasks = [asyncio.create_task(manager.run(), name="walgate-replicas"),
                                   asyncio.create_task(reconciler.run(), name="walgate-reconciler")]
        replicated_groups = None if self._group_coordinators is None else self._group_coordinators.replicated
        if self._offsets_to_import is not None and replicated_groups is not None and broker.links is not None:
            self._replication_tasks.append(asyncio.create_task(import_offsets(
                self._offsets_to_import, replicated_groups, broker.links, functools.partial(
                    self._storage.call, functools.partial(offsets_import.done, cfg.data_dir, syncs=engine.syncs))),
                name="walgate-offsets-import"))

    @property
    def _needs_root(self) -> bool:
        """Whether ``root`` is made at start (root_user.py): some listener or the HTTP API authenticates, or its
        password is given."""
        return bool(self._sasl or self.config.http_auth == "basic" or os.environ.get(ROOT_PASSWORD_ENV)
                    or os.environ.get(ROOT_PASSWORD_FILE_ENV))

    async def _catalog_applied(self, broker: Broker, engine: Engine, op: str) -> None:
        """After a shared catalog record (``op``; "" for a snapshot) was applied: the quotas in force and the
        topics' broker defaults follow it, as after a change made on this node."""
        if op in (QUOTA_OP, ""):
            broker.quotas.configure(await self._storage.call(lambda: dict(engine.catalog.client_quotas)))
        if op in (RESOURCE_OP, ""):
            await self._storage.call(engine.apply_topic_defaults, broker.node_id)
        if self._replicas is not None:  # the states of databases new here, and the vnodes of those dropped
            self._replicas.catalog_changed()

    async def _publish_dnodes(self, member: ClusterMember, engine: Engine) -> None:
        """Hand each new membership ``member`` reads to ``SHOW DNODES`` and to placement (on the storage lane)."""
        published = None
        while True:
            view = member.view
            if view is not published:
                await self._storage.call(engine.set_dnodes, dnodes(view), {n.node_id: n.rack for n in view.nodes})
                published = view
            await member.changed()

    async def _start_kafka(self, engine: Engine, groups: GroupService, wakeups: FetchWakeups,
                           tls: dict[str | None, ssl.SSLContext], passwords: PasswordChecker,
                           cluster_id: str) -> KafkaServer:
        """Start the Kafka listeners (TLS ones with their context in ``tls``; SASL ones checking PLAIN passwords
        with ``passwords``, each with its own mechanisms and re-authentication time); each advertises its
        configured address (the bound port when 0)."""
        cfg = self.config
        broker = Broker(
            engine=engine,
            storage=self._storage,
            node_id=cfg.node_id,
            host="",  # the first listener's advertised address, set once it is bound
            port=0,
            cluster_id=cluster_id,
            versions=advertised(),
            groups=groups,
            wakeups=wakeups,
        )
        broker.configs = {  # DescribeConfigs' STATIC_BROKER_CONFIG: every Kafka setting walgate runs with
            **kafka_settings(cfg),
            "broker.id": str(cfg.node_id),
            "num.partitions": str(max(cfg.auto_create_topic_partitions, 1)),
            "auto.create.topics.enable": str(cfg.auto_create_topic_partitions > 0).lower(),
            "offsets.retention.check.interval.ms": str(CLEANUP_INTERVAL_MS),
            # the data dir's, fixed when it was made (the setting only makes a new one)
            "offsets.topic.num.partitions": str(await self._coordinator.call(lambda: engine.coordinator_partitions)),
        }
        broker.auto_create_partitions = cfg.auto_create_topic_partitions
        broker.replica_selector = cfg.replica_selector_class
        broker.coordinators = self._group_coordinators  # from the first request: no group is taken before the node joined
        broker.links = None if self._cluster is None else self._node_links(self._cluster)
        broker.transactions = await self._transaction_service(engine, broker.links, lambda: broker.led)
        persister = None  # a replicated cluster's share-partition states are in __consumer_offsets (share_persister)
        if self._group_coordinators is not None and self.config.replication_enable:
            persister = SharePersister(broker, self._coordinator, self._group_coordinators.partitions)
        broker.shares = ShareService(
            engine, self._coordinator, self._storage, lock_ms=cfg.group_share_record_lock_duration_ms,
            delivery_limit=cfg.group_share_delivery_count_limit,
            heartbeat_interval_ms=cfg.group_share_heartbeat_interval_ms,
            session_timeout_ms=cfg.group_share_session_timeout_ms,
            max_in_flight=cfg.group_share_partition_max_record_locks,
            lock_bounds=(cfg.group_share_min_record_lock_duration_ms, cfg.group_share_max_record_lock_duration_ms),
            delivery_bounds=(cfg.group_share_min_delivery_count_limit, cfg.group_share_max_delivery_count_limit),
            wake=wakeups.records_appended, persister=persister)
        # share_groups.log (or the persister's log), before any request; its group-commit syncs are the coordinator
        # lane's
        self._group_commit.own(self._coordinator, await broker.shares.open(),
                               None if persister is None else persister.write_round)
        broker.authorizer = self._authorizer
        broker.quotas.configure(await self._storage.call(lambda: dict(engine.catalog.client_quotas)))
        await self._storage.call(engine.apply_topic_defaults, cfg.node_id)  # finishes a change a crash cut short
        self.metrics.track({STORAGE_LANE: self._storage, COORDINATOR_LANE: self._coordinator}, engine, groups.groups,
                           broker.shares.coordinator.stats)
        assert cfg.queued_max_request_bytes is not None  # Config fills it in
        server = KafkaServer(
            broker,
            cfg.max_request_bytes,
            cfg.connections_max_idle_ms,
            metrics=self.metrics,
            queued_max_request_bytes=cfg.queued_max_request_bytes,
            request_read_timeout_ms=cfg.request_read_timeout_ms,
            listen_backlog=cfg.listen_backlog,
        )
        self._kafka = server  # stopped by stop() if a later listener fails to start
        addresses = cfg.advertised_addresses()
        for listener in cfg.kafka_listeners():
            own = cfg.for_listener(listener.name)
            mapper = PrincipalMapper(own.ssl_principal_mapping_rules) if listener.info.tls else None
            sasl = None
            if listener.info.sasl:
                oauthbearer = oauthbearer_exchanges(own) if OAUTHBEARER in own.sasl_enabled_mechanisms else None
                try:
                    sasl = SaslSettings(passwords, own.sasl_enabled_mechanisms, own.connections_max_reauth_ms,
                                        oauthbearer)
                except ValueError as e:  # an unknown mechanism (GSSAPI)
                    raise ConfigError(f"listener {listener.name}: {e}") from None
            bound = await server.start(listener.host, listener.port, listener.info, tls.get(listener.name), mapper,
                                       sasl, serving=False)  # (until the node caught up: start())
            self.kafka_addresses[listener.name] = bound
            host, port = addresses.get(listener.name, (listener.host or socket.getfqdn(), 0))
            broker.advertised[listener.name] = (host, port or bound[1])
        self.kafka_address = next(iter(self.kafka_addresses.values()))
        broker.host, broker.port = next(iter(broker.advertised.values()))
        broker.configs["listeners"] = ",".join(f"{name}://{h}:{p}" for name, (h, p) in self.kafka_addresses.items())
        broker.configs["advertised.listeners"] = ",".join(
            f"{name}://{h}:{p}" for name, (h, p) in broker.advertised.items())
        return server

    @property
    def _sasl(self) -> bool:
        """Whether a Kafka listener authenticates clients with SASL."""
        return any(listener.info.sasl for listener in self.config.kafka_listeners())

    def _share_coordinator(self) -> ShareCoordinator | None:
        """The share coordinator once the Kafka listeners run (the web console shows its groups)."""
        shares = self._kafka.broker.shares if self._kafka is not None else None
        return shares.coordinator if shares is not None else None

    def _listeners(self) -> dict[str, bool]:
        """Whether each listener besides HTTP accepts connections (``/readyz``)."""
        return {"kafka": self._kafka is not None and self._kafka.serving}

    def _cluster_check(self) -> str | None:
        """``/readyz``'s ``cluster`` check in cluster mode: why the node is not a registered member (None: it is)."""
        if self._cluster is None or not self._cluster.registered:
            return "not registered in the cluster (etcd unreachable, or the registration was refused or lost)"
        if self._shared is None or not self._shared.caught_up:
            return "not caught up with the cluster's catalog yet"
        return None

    async def stop(self) -> None:
        """Stop the sync task and the listeners, then close the engine (fsync) and the storage thread."""
        self._stopping.set()
        await _cancelled(self._meta_task)
        self._meta_task = None
        await _cancelled(self._clean_task)
        self._clean_task = None
        await _cancelled(self._sync_task)
        self._sync_task = None
        await _cancelled(self._dnodes_task)
        self._dnodes_task = None
        if self._cluster is not None and self._replicas is not None and self._replicas.led:
            await _hand_over(self._cluster, self._replicas)
        await stop_tasks(self._replication_tasks)  # the manager's fetchers and ISR proposals with it
        self._replication_tasks = []
        self._replicas = None
        if self._shared is not None:
            await self._shared.stop()
            self._shared = None
        if self._cluster is not None:  # leaves before the listeners close: clients are not sent to a closed node
            await self._cluster.leave()
            self._cluster = None
        if self._kafka is not None:
            await self._kafka.stop()
            self._kafka = None
        if self._transactions is not None:
            self._transactions.close()
            self._transactions = None
        self._queries.cancel_all()  # before the HTTP server waits for its requests: they end at once
        if self._http is not None:
            await self._http.cleanup()
            self._http = None
        await self._queries.close()
        await self._ingest.close()
        await self._group_commit.close()
        self._coordinator.shutdown()  # its queued calls run first; nothing calls it from here on
        if self._engine is not None:
            await self._storage.call(self._engine.close)
            self._engine = None
        self._storage.shutdown()
        if self._lock is not None:
            os.close(self._lock)  # releases the data dir's lock
            self._lock = None

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def _clean_loop(self, engine: Engine) -> None:
        """The log cleaner (``log.cleaner.enable``, :mod:`walgate.storage.cleaner`): one bounded step of a partition's
        pass at a time on the storage lane (requests are served in between): the step that chooses the partition
        and starts a pass is exclusive, the pass's next steps hold only that partition's vnode (other partitions'
        Produce and Fetch run beside them; background calls, which never pass an exclusive one, so even a slow step
        delays no other vnode's); the fsyncs a step left (staged bytes, a commit's file and directory)
        on a thread of its own, the next step at once while a pass is in progress; after a pass, or when none is
        due, the next after ``log.cleaner.backoff.ms``."""
        backoff = self.config.log_cleaner_backoff_ms / 1000
        max_keys = map_entries(self.config.log_cleaner_dedupe_buffer_size, MAP_LOAD_FACTOR)
        node_id = self.config.node_id
        cleaning: tuple[str, int] | None = None  # the vnode of the pass in progress, as the last step left it
        while True:
            try:
                if cleaning is None:
                    stats, sync, cleaning = await self._storage.call(_clean_now, engine, node_id, max_keys)
                else:
                    stats, sync, cleaning = await self._storage.call_on(
                        frozenset({cleaning}), functools.partial(_clean_now, engine, node_id, max_keys, cleaning),
                        background=True)
                if sync is not None:  # the fsyncs the step left, off the storage thread
                    await asyncio.to_thread(sync)
            except OSError as exc:  # a full or failing disk: the old segments stand, the pass is tried again
                log.error("log cleaner failed: %s; retrying in %.1f s", exc, backoff)
                stats, cleaning = None, None
            except Exception:  # a bug: its traceback is logged, the server and the next pass go on
                log.exception("log cleaner failed; retrying in %.1f s", backoff)
                stats, cleaning = None, None
            if stats is not None and stats.finished and stats.segments:
                log.info("log cleaner: %s-%d: %d segments, %d -> %d bytes, %d records and %d batches removed",
                         stats.topic, stats.partition, stats.segments, stats.bytes_before, stats.bytes_after,
                         stats.records_removed, stats.batches_removed)
            await asyncio.sleep(0 if stats is not None and not stats.finished else backoff)

    async def _check_meta_stores(self, engine: Engine) -> None:
        """The meta stores' whole-file checks the engine's open left (:mod:`walgate.storage.meta_checks`), one
        store at a time on a thread of its own while the node serves; a damaged store is reported and rebuilt on
        the storage thread."""
        start = SYSTEM_CLOCK.monotonic()
        checks = await self._storage.call(engine.meta_checks)
        for check in checks:
            where = f"{check.vnode.db.name} vnode {check.vnode.index}"
            try:
                problem = await asyncio.to_thread(check.run, self._stopping.is_set)
                await self._storage.call(engine.meta_checked, check, problem)
            except (StorageError, OSError) as exc:  # unreadable, a full disk, or the node stopping
                log.warning("meta store of %s not checked: %s", where, getattr(exc, "message", exc))
            except Exception:  # a bug: its traceback is logged, the other stores are still checked
                log.exception("meta store of %s not checked", where)
        if checks:
            log.info("meta stores checked: %d in %.1f s", len(checks), SYSTEM_CLOCK.monotonic() - start)

    async def _sync_loop(self) -> None:
        """Periodic fsyncs (WAL_LEVEL 1) and retention. The fsyncs run on a thread of their own, not the storage
        thread: appends and fetches go on while the disk flushes."""
        engine = self._engine
        assert engine is not None
        while True:
            try:
                delay, pending = await self._storage.call(_sync_now, engine)
                if pending:
                    await asyncio.to_thread(_run_all, pending)
                    await self._storage.call(_done_all, pending)
            except OSError as exc:
                log.error("WAL fsync failed: %s; retrying in %.0f s", exc, SYNC_MAX_DELAY)
                delay = SYNC_MAX_DELAY
            except Exception:  # a bug: its traceback is logged, the server and the next sync go on
                log.exception("WAL fsync failed; retrying in %.0f s", SYNC_MAX_DELAY)
                delay = SYNC_MAX_DELAY
            await asyncio.sleep(min(max(delay, SYNC_MIN_DELAY), SYNC_MAX_DELAY))


async def _caught_up(member: ClusterMember, manager: ReplicaManager | None) -> None:
    """Return once a starting node may answer Kafka requests (as Kafka's broker serves only once it caught up with
    the cluster metadata): its replica manager read the partition states (at a revision no older than the node's
    start) and its membership read names the node itself (a read made after its registration: the other nodes
    Metadata names are those registered then); the catalog was read before. Raises :class:`ClusterStartError` when that takes over
    ``CHANGE_TIMEOUT_S``."""
    def read() -> bool:
        return (manager is not None and manager.states.revision > 0
                and any(n.node_id == member.node_id for n in member.view.nodes))

    try:
        async with asyncio.timeout(CHANGE_TIMEOUT_S):
            while not read():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise ClusterStartError(f"the cluster's partition states and membership could not be read within "
                                f"{CHANGE_TIMEOUT_S:g} s") from None


async def _hand_over(member: ClusterMember, manager: ReplicaManager) -> None:
    """A controlled shutdown's hand-over (the module docstring; KIP-631): the registration marked shutting down
    (:meth:`ClusterMember.shut_down`: still registered, so every node's Metadata keeps naming this node while it
    leads), then a wait until ``manager`` leads no vgroup (the controller elected other leaders and fenced this
    node out of the ISRs), at most ``HAND_OVER_S`` seconds, then deregistered. No wait when no other node is
    registered (none could lead, nor be the controller that elects) or the mark was not written (then it
    deregisters at once: the controller elects when it reads the registration gone)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    led = len(manager.led)
    others = any(n.node_id != member.node_id for n in member.view.nodes)
    if not others or not await member.shut_down():
        await member.deregister()
        return
    while manager.led and loop.time() - started < HAND_OVER_S:
        await asyncio.sleep(0.05)
    took = loop.time() - started
    if manager.led:
        log.warning("controlled shutdown: still leading %d of %d vgroups after %.1f s; stopping anyway", len(manager.led),
                    led, took)
    else:
        log.info("controlled shutdown: leadership of %d vgroups moved to other replicas in %.2f s", led, took)
    await member.deregister()


async def _cancelled(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` (if any) and wait until it ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _replicated_vnodes(shared: SharedCatalog, storage: StorageThread, engine: Engine, min_isr: int, seq: int
                             ) -> CatalogVnodes:
    """The controller's Reconciler's catalog: the replicated vnodes (and the cluster databases this node's catalog
    passes over) once this node applied record ``seq``, its ``min.insync.replicas`` setting the last default of a
    topic's (:class:`ControlPlaneUnavailable` when it does not apply the record within the time
    :meth:`SharedCatalog.applied` allows)."""
    try:
        await shared.applied(seq)
    except StorageError as e:
        raise ControlPlaneUnavailable(e.message) from None
    return await storage.call(engine.catalog.controller_vnodes, min_isr)


def _coordinators_not_led(engine: Engine) -> None:
    """On the coordinator lane: every coordinator partition is one this node does not lead (a replicated cluster's
    are ``__consumer_offsets``' partitions, loaded as this node leads them: coordinator_replicas.py); the data dir's
    coordinator logs are not read."""
    for p in range(engine.coordinator_partitions):
        engine.install_coordinator_log(p, not_led(p))


def _clean_now(engine: Engine, node_id: int, max_keys: int, holding: tuple[str, int] | None = None
               ) -> tuple[CleanStats | None, Callable[[], None] | None, tuple[str, int] | None]:
    """Runs on the storage lane, so ``now`` (the engine's clock) is read when the step runs: the step's stats, the
    fsyncs it left for another thread, and the vnode of the pass in progress after it (its next step's key). An
    exclusive call may start a pass; one holding only the vnode ``holding`` goes on with the pass in progress, and
    raises Relane (before changing anything) when that is no longer the pass's vnode (it then runs again,
    exclusive)."""
    exclusive = held() is None
    if not exclusive and engine.cleaning() != holding:
        raise Relane(f"the cleaner's pass is no longer on vnode {holding}")
    return engine.clean(engine.clock.time(), node_id, max_keys, exclusive), engine.clean_sync(), engine.cleaning()


def _sync_now(engine: Engine) -> tuple[float, list[PendingSync]]:
    """Runs on the storage thread, so ``now`` (the engine's clock) is read when the sync is taken."""
    return engine.sync_due(engine.clock.monotonic())


def _run_all(pending: list[PendingSync]) -> None:
    """fdatasync each (on a worker thread); every descriptor is closed even when one fails."""
    errors = []
    for sync in pending:
        try:
            sync.run()
        except OSError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _done_all(pending: list[PendingSync]) -> None:
    for sync in pending:
        sync.done()


async def run_server(config: Config) -> None:
    """Serve ``config`` until SIGTERM or SIGINT, then shut down cleanly and return; the collector's full collections
    kept rare and small meanwhile (:mod:`~walgate.gateway.gc_policy`)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        log.info("received %s, shutting down", sig.name)
        stop.set()

    signals = (signal.SIGTERM, signal.SIGINT)
    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig)
    gc_policy.tune()
    try:
        async with Gateway(config):
            gc_policy.settle()
            await stop.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    log.info("walgate stopped")
