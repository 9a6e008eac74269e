"""The mnode catalog: databases, supertables, topics and users, persisted as a replayed log.

Users' records (``put_user`` / ``drop_user``) are defined and applied by :mod:`walgate.storage.users`, which writes
them through :meth:`Catalog.commit`; everything below holds for them too.

Every change is one record appended to ``catalog.log`` (a checksummed JSON line, :mod:`walgate.storage.lines`)
and fsynced before the statement returns; opening the catalog replays the file through the same
:meth:`Catalog.apply` that live changes use, so live and recovered state cannot drift.

Crash and damage rules:

* a change is applied in memory only once its record is durable: when the disk refuses the append, the file is
  cut back (:func:`walgate.storage.fileio.append_file`), memory is as before and the caller gets
  :class:`~walgate.storage.errors.StorageUnavailable` (the next record then starts with a ``\\n``, so it never
  joins a torn tail the cut could not remove);
* a torn last record (a crash while appending: at most one partial record without its ``\\n``,
  :func:`walgate.storage.lines.scan`) is dropped silently and cut off; nothing else is ever dropped unreported;
* a last record whose ``\\n`` is damaged is replayed and reported (the rewrite below restores the ``\\n``);
* a complete record that fails its checksum, bytes after the last ``\\n`` that are no torn record (zeros,
  garbage: e.g. a zero-filled file), or a record that verifies but cannot be applied (unknown op, missing or
  mistyped keys, a drop or change of something unknown, a reference to an unknown database), is reported to the
  :class:`~walgate.storage.damage.DamageLog` (its bytes kept in ``quarantine/``) and skipped; every other record is
  replayed, and the file is then rewritten (atomically) from the replayed state, so the damage is reported once.
  The engine also reports ``db/<id>`` directories that no record names (a lost ``catalog.log``, or a crash between
  creating a database's directory and recording it): never deleted, not served.

Databases have an internal ``id`` (32 hex digits, :func:`walgate.storage.names.new_db_id`): their directory is
``db/<id>/``, never a name. Names are validated when created (:mod:`walgate.storage.names`), never on replay.
The partitions of all databases (the sum of their VGROUPS, one vnode each) are capped by ``max_partitions``:
a change that would exceed it raises :class:`~walgate.storage.errors.LimitExceeded` before anything is written;
the cap is not checked on replay, so a data dir that was accepted always opens again.

Kafka ACL bindings (and the TDengine grants that are ACLs too) are records of this log as well, handled by
:mod:`walgate.storage.acls` under the same rules; so are client quotas (:mod:`walgate.storage.quotas`) and the
dynamic configs of brokers and groups (:mod:`walgate.storage.resource_configs`).

Cluster mode (``Catalog(cluster=True)``, docs/cluster.md): the records of :data:`SHARED_OPS` (users, ACLs, client
quotas, broker and group configs), of Kafka-native topics and of the cluster's SQL databases, supertables and
TDengine topics (:meth:`Catalog.is_shared`: a database whose record places its vgroups; one a data dir held as a
single node stays the node's own) are the cluster's, not the node's. A change made on the node is *staged*
(:meth:`Catalog.stage` .. :meth:`Catalog.unstage`): validated and applied in memory for the rest of the call, then
undone and handed to the gateway, which has the controller append it to the cluster's record stream; every node,
this one too, then applies the stream's records in sequence order with :meth:`Catalog.apply_shared` (durable in
``catalog.log`` like any record, with its sequence number: ``shared_seq`` is what a restart resumes from) or a
snapshot of them with :meth:`Catalog.restore_shared`. A shared record committed outside a staged call is refused
(it would change this node alone).

Tables (subtables and normal tables) are not here: they live in the vnode their name hashes to, created by meta
entries of that vnode's WAL (see vnode.py), as in TDengine.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from walgate.cluster.partition_codec import CatalogVnodes, PartitionId, ReplicatedVnode
from walgate.cluster.placement import (
    PLACE_VGROUP_OP,
    InvalidReplicationFactor,
    Replicas,
    check_replication_factor,
    place,
    place_vgroup_record,
)
from walgate.replication.partition import moves_valid
from walgate.security.acl import AclBinding, AclSet
from walgate.storage import acls, fileio, lines, quotas, resource_configs
from walgate.storage.damage import DamageLog
from walgate.storage.errors import (
    AlreadyExists,
    InvalidValue,
    LimitExceeded,
    NotFound,
    StorageUnavailable,
    TopicCollision,
)
from walgate.storage.fileio import SyncLatency
from walgate.storage.lanes import check_exclusive
from walgate.storage.names import (
    collision_key,
    is_db_id,
    is_topic_id,
    new_db_id,
    validate_column_name,
    validate_database_name,
    validate_sql_topic_name,
    validate_table_name,
)
from walgate.storage.schema import Column, ColumnType
from walgate.storage.topic_configs import TOPIC_CONFIGS, check_value, validate_topic_name
from walgate.storage.users import USER_OPS, User, apply_user_record, user_records

__all__ = ["Catalog", "SHARED_OPS", "DatabaseDef", "StableDef", "TopicDef", "DB_DEFAULTS", "MAX_PARTITIONS", "REPAIR_HINT", "column_to_json",
           "column_from_json", "stable_meta"]

log = logging.getLogger("walgate.catalog")

MAX_PARTITIONS = 10_000
"""Default cap on the vnodes (partitions) of all databases together: each holds descriptors and memory."""

DB_DEFAULTS: dict[str, int | str] = {
    "VGROUPS": 2,
    "PRECISION": "ms",
    "WAL_LEVEL": 1,
    "WAL_FSYNC_PERIOD": 3000,
    "WAL_RETENTION_PERIOD": 604800,
    "WAL_RETENTION_SIZE": -1,
    "WAL_SEGMENT_SIZE": 64,
}
_LIMITS: dict[str, tuple[int, int]] = {
    "VGROUPS": (1, 1024),
    "WAL_LEVEL": (1, 2),
    "WAL_FSYNC_PERIOD": (0, 180000),
    "WAL_RETENTION_PERIOD": (-1, 2**31 - 1),
    "WAL_RETENTION_SIZE": (-1, 2**31 - 1),
    "WAL_SEGMENT_SIZE": (0, 2**20),
    "MIN_INSYNC": (1, 1024),
}
KAFKA_DB_PREFIX = "kafka_"
"""Every Kafka-native topic's database is named so (walgate.storage.topic_configs.backing_database); in cluster mode
an SQL database may not be, so that a node's own databases never take the name of the cluster's."""
_TOPIC_KINDS = ("database", "stable", "select")
SHARED_OPS = frozenset((*acls.OPS, quotas.QUOTA_OP, *USER_OPS, resource_configs.RESOURCE_OP))
"""The record kinds that are the cluster's in cluster mode (module docstring), besides Kafka-native topics'."""
KAFKA_TOPIC_OPS = frozenset(("create_kafka_topic", "alter_kafka_topic"))
"""Kafka-native topics' records: the cluster's in cluster mode, as is the ``drop_db`` of a Kafka-native topic's
database (:meth:`Catalog.is_shared`)."""
STABLE_CHANGES_OP = "stable_changes"
"""Cluster mode: the meta entries of every ALTER/DROP STABLE record applied to a replicated database (``changes``:
``[[seq, meta entry], ...]`` in the stream's order), which a new leader of its vgroups writes when its WAL lacks them
(:meth:`SqlObjects.take_over <walgate.storage.sql_objects.SqlObjects.take_over>`); in :meth:`Catalog.records` and
snapshots, as the records it is made of are folded there."""
_SNAPSHOT_OPS = frozenset(("create_kafka_topic", "create_db", "create_stable", "create_topic", STABLE_CHANGES_OP,
                           PLACE_VGROUP_OP))
"""Besides :data:`SHARED_OPS`, the record kinds a snapshot of the cluster's stream holds (cluster mode)."""
STABLE_METAS_OP = "stable_metas"
"""A node's own record (cluster mode): where the meta entries of the cluster's ALTER/DROP STABLE record ``of`` go
in this node's vnodes (``next``: vnode index -> the WAL version it is appended at), written before them
(walgate.storage.sql_objects)."""
_SEQ_OP = "cluster_seq"  # {"op": "cluster_seq", "seq": N}: shared records up to N applied (a rewrite, a skipped one)
# (with "shadowed": {name: db id}, the new Catalog.shadowed, when a skipped record or a rewrite sets it)
_NOT_MIXED = ("a change of the cluster's databases, supertables or topics goes through the cluster alone: not in the"
              " same call as a change of this node's own catalog")
REPAIR_HINT = "stop the server and run walgate repair --data-dir DIR to bring back what it held (docs/data-dir.md)"
"""Named by every report of a skipped catalog record or an unnamed database directory (walgate.storage.repair)."""


@dataclass(frozen=True)
class DatabaseDef:
    name: str
    options: dict[str, int | str]
    created_ms: int
    id: str  # the name of its directory, db/<id>/ (never the database's name)
    # the node ids holding each vgroup's replicas, distinct, the first the preferred leader, the same count for every
    # vgroup (cluster mode, walgate.cluster.placement); None: every vgroup is on the node whose data dir this is, one
    # copy (a single node's database, or one made before placement was recorded)
    replicas: tuple[Replicas, ...] | None = None
    # the vgroups a replica move placed anew (``place_vgroup`` records, issue 26): vgroup -> the node ids holding it
    # now, in place of its entry of ``replicas``, which keeps the placement the database was made or grown with (a
    # database of one copy keeps the entry of a vgroup moved back where it was made: it marks the vgroup replicated,
    # :meth:`replicated`)
    placed_anew: Mapping[int, Replicas] = field(default_factory=dict)
    # the vgroups being moved (the latest ``place_vgroup`` record of each named a move, KIP-455): vgroup -> (the
    # replicas the move adds, those it removes), both among the vgroup's replicas now (:meth:`replicas_of`)
    moves: Mapping[int, tuple[Replicas, Replicas]] = field(default_factory=dict)
    # every vgroup has a partition state whatever its replicas (a replicated cluster's ``__consumer_offsets``, whose
    # leaders are the group coordinators, also at ``offsets.topic.replication.factor`` 1, as Kafka's): the
    # ``create_kafka_topic`` record's ``states``
    states: bool = False

    @property
    def vgroups(self) -> int:
        return int(self.options["VGROUPS"])

    @property
    def nodes(self) -> tuple[int, ...] | None:
        """The first replica of each vgroup as placed now (:meth:`replicas_of`); None as :attr:`replicas`."""
        return None if self.replicas is None else tuple(self.replicas_of(i, 0)[0] for i in range(len(self.replicas)))

    @property
    def replication_factor(self) -> int:
        """The replicas of each vgroup as the database was made (1 without placement); a move may since have placed
        a vgroup on another count (:meth:`replicas_of`)."""
        return 1 if not self.replicas else len(self.replicas[0])

    def replicated(self, vgroup: int) -> bool:
        """Whether ``vgroup`` has a partition state (issue 25: its leader, leader epoch and ISR are the state's, its
        WAL commits in groups): every vgroup of a placed database made with more than one replica or with
        :attr:`states`, and a vgroup of a database of one copy once a replica move placed it anew (issue 26: its move
        made it a state, which lives on after the move completed, so that its leader epochs never go back:
        docs/cluster.md "Moving replicas")."""
        return self.any_replicated and (self.replication_factor > 1 or self.states or vgroup in self.placed_anew)

    @property
    def any_replicated(self) -> bool:
        """Whether some vgroup of the database is :meth:`replicated`."""
        return self.replicas is not None and (self.replication_factor > 1 or self.states or bool(self.placed_anew))

    def node_of(self, vgroup: int, local: int) -> int:
        """The node id holding ``vgroup`` (its first replica); ``local``: this data dir's node id."""
        return self.replicas_of(vgroup, local)[0]

    def replicas_of(self, vgroup: int, local: int) -> Replicas:
        """The node ids holding ``vgroup``'s replicas now (placed anew by a move, else as made); ``local``: this data
        dir's node id."""
        if self.replicas is None:
            return (local,)
        return self.placed_anew.get(vgroup, self.replicas[vgroup])

    @property
    def precision(self) -> str:
        return str(self.options["PRECISION"])


@dataclass(frozen=True)
class StableDef:
    db: str
    name: str
    columns: tuple[Column, ...]
    tags: tuple[Column, ...]
    created_ms: int

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def tag(self, name: str) -> Column | None:
        return next((c for c in self.tags if c.name == name), None)


@dataclass(frozen=True)
class TopicDef:
    """A topic as created; ``sql`` is re-parsed to get the select list / condition."""

    name: str
    kind: str  # database | stable | select | kafka (Kafka-native: produced batches, in a database of its own)
    db: str
    source: str  # stable / table name ("" for database and Kafka-native topics)
    with_meta: bool
    sql: str
    topic_id: str  # stable UUID (Kafka topic id); names the topic's index files
    created_ms: int
    configs: dict[str, str] = field(default_factory=dict)  # Kafka topic configs as set (Kafka-native topics)
    # the supertable of the subtable a topic of one table selects from ("" otherwise): known where the table is (at
    # CREATE TOPIC), recorded so that every cluster node checks an ALTER of it against the topic from the catalog alone
    stable: str = ""


def stable_meta(record: dict[str, Any], seq: int) -> dict[str, Any]:
    """The vnode meta entry of ALTER or DROP STABLE catalog record ``record`` (as :class:`~walgate.storage.ddl.Ddl`
    writes it on a single node), naming its cluster catalog record ``seq`` (``of``)."""
    if record["op"] == "drop_stable":
        return {"op": "drop_stable", "stable": record["name"], "of": seq}
    change = record.get("change") or {}
    return {"op": "alter_stable", "stable": record["name"], "action": str(change.get("action", "")),
            "column": str(change.get("column", "")), "of": seq}


def column_to_json(c: Column) -> list[Any]:
    return [c.name, c.type.name, c.type.length]


def column_from_json(raw: list[Any]) -> Column:
    return Column(raw[0], ColumnType(raw[1], raw[2]))


class _Invalid(ValueError):
    """A catalog record that cannot be applied."""


def _get(r: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = r.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise _Invalid(f"{key!r} is {value!r}")
    return value


def _options(r: dict[str, Any]) -> dict[str, int | str]:
    options: dict[str, int | str] = _get(r, "options", dict)
    for key in DB_DEFAULTS:
        value = options.get(key)
        if key == "PRECISION":
            if value not in ("ms", "us", "ns"):
                raise _Invalid(f"option PRECISION is {value!r}")
        elif not isinstance(value, int) or isinstance(value, bool) or (key == "VGROUPS" and value < 1):
            raise _Invalid(f"option {key} is {value!r}")
    return options


def _replicas(r: dict[str, Any], options: dict[str, int | str]) -> tuple[Replicas, ...] | None:
    """A record's placement: absent; ``replicas``, a list of distinct node ids per vgroup of ``options``, as many for
    each (with ``nodes`` beside it, the first of each, which a release before replicas reads); or, in an older
    record, ``nodes`` alone: one node id per vgroup, one replica each."""
    nodes, raw = r.get("nodes"), r.get("replicas")
    if nodes is None and raw is None:
        return None
    if nodes is not None and (not isinstance(nodes, list) or len(nodes) != options["VGROUPS"]
                              or not all(_node_id(n) for n in nodes)):
        raise _Invalid(f"'nodes' is {nodes!r}: expected one node id per vgroup")
    if raw is None:
        return tuple((n,) for n in nodes or ())  # nodes alone: an older record
    if (not isinstance(raw, list) or len(raw) != options["VGROUPS"]
            or not all(isinstance(v, list) and v and all(_node_id(n) for n in v) and len(set(v)) == len(v)
                       and len(v) == len(raw[0]) for v in raw)
            or (nodes is not None and nodes != [v[0] for v in raw])):
        raise _Invalid(f"'replicas' is {raw!r}: expected as many distinct node ids per vgroup for each vgroup, the "
                       f"first of each as 'nodes' names it")
    return tuple(tuple(v) for v in raw)


def _min_insync_checked(db: DatabaseDef) -> DatabaseDef:
    """``db``, unless its ``MIN_INSYNC`` (an SQL database's) is not an integer in 1..its replication factor, as
    :meth:`Catalog.new_database` writes it: the controller builds each vgroup's partition state from it."""
    value = db.options.get("MIN_INSYNC", 1)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= db.replication_factor:
        raise _Invalid(f"option MIN_INSYNC is {value!r}: expected an integer in 1..the replicas of each vgroup")
    return db


_REPLICATION_CONFIGS = ("min.insync.replicas", "unclean.leader.election.enable")
"""The topic configs the controller builds a vgroup's partition state from (:meth:`Catalog.replicated_vnodes`)."""


def _topic_configs(r: dict[str, Any]) -> dict[str, str]:
    """A Kafka-native topic record's ``configs``, its :data:`_REPLICATION_CONFIGS` checked as Kafka checks them
    (written so by CreateTopics and AlterConfigs)."""
    configs: dict[str, str] = _get(r, "configs", dict)
    for key in _REPLICATION_CONFIGS:
        if key not in configs:
            continue
        value = configs[key]
        if not isinstance(value, str):
            raise _Invalid(f"config {key} is {value!r}")
        try:
            check_value(key, value, TOPIC_CONFIGS[key])
        except InvalidValue as exc:
            raise _Invalid(str(exc)) from None
    return configs


def _node_id(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


def _placed(record: dict[str, Any], replicas: tuple[Replicas, ...] | None) -> dict[str, Any]:
    """``record`` with the placement ``replicas`` when there is one: ``replicas`` and, for a release before
    replicas, ``nodes`` (the first of each)."""
    if replicas is None:
        return record
    return {**record, "nodes": [r[0] for r in replicas], "replicas": [list(r) for r in replicas]}


def _db_record(d: DatabaseDef) -> dict[str, Any]:
    """The ``create_db`` record of ``d``, with its placement when it has one."""
    return _placed({"op": "create_db", "name": d.name, "id": d.id, "options": d.options,
                    "created_ms": d.created_ms}, d.replicas)


def _kafka_topic_record(d: DatabaseDef, t: TopicDef) -> dict[str, Any]:
    """The ``create_kafka_topic`` record of ``t`` and its database ``d``, with its placement when it has one."""
    return _placed({"op": "create_kafka_topic", "name": t.name, "db": d.name, "db_id": d.id, "options": d.options,
                    "configs": t.configs, "topic_id": t.topic_id, "created_ms": t.created_ms,
                    **({"states": True} if d.states else {})}, d.replicas)


def _columns(r: dict[str, Any], key: str) -> tuple[Column, ...]:
    raw = _get(r, key, list)
    try:
        return tuple(column_from_json(c) for c in raw)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise _Invalid(f"{key!r}: {exc}") from None


def _check_columns(columns: tuple[Column, ...], old: tuple[Column, ...] = ()) -> None:
    """Validate the names of ``columns`` that are new (not in ``old``): names already stored are never re-checked."""
    for c in columns:
        if c not in old:
            validate_column_name(c.name)


@dataclass(frozen=True)
class _State:
    databases: dict[str, DatabaseDef]
    stables: dict[tuple[str, str], StableDef]
    topics: dict[str, TopicDef]
    client_quotas: dict[quotas.Entity, quotas.QuotaValues]
    users: dict[str, User]
    acls: AclSet
    resource_configs: resource_configs.ResourceConfigs
    shared_seq: int
    stable_metas: dict[str, Any] | None
    stable_changes: dict[str, tuple[tuple[int, dict[str, Any]], ...]]
    shadowed: dict[str, str]


@dataclass
class _Taken:
    """What a new record may not reuse, derived from the catalog's dicts so that a check is O(1), not a scan of every
    topic and database (a CreateTopics of thousands of topics made each creation, and the replay at start, quadratic):
    topic ids, database ids, the partitions in use, the topic names by :func:`collision_key`. Valid while ``key`` is
    the catalog's :meth:`Catalog._taken_key`."""

    key: tuple[int, ...]
    topic_ids: set[str]
    db_ids: set[str]
    partitions: int
    colliding: dict[str, set[str]]  # collision key -> the topic names that have it

    @classmethod
    def of(cls, key: tuple[int, ...], databases: dict[str, DatabaseDef], topics: dict[str, TopicDef]) -> _Taken:
        colliding: dict[str, set[str]] = {}
        for name in topics:
            collision = collision_key(name)
            if collision is not None:
                colliding.setdefault(collision, set()).add(name)
        return cls(key, {t.topic_id for t in topics.values()}, {d.id for d in databases.values()},
                   sum(d.vgroups for d in databases.values()), colliding)

    def add_topic(self, topic: TopicDef) -> None:
        self.topic_ids.add(topic.topic_id)
        collision = collision_key(topic.name)
        if collision is not None:
            self.colliding.setdefault(collision, set()).add(topic.name)


@dataclass
class _TopicsByDb:
    """Each database's topics' names, in the catalog's order (that of its ``topics`` dict), so that the topics of a
    vnode's database are found without a scan of every topic (the WalFetch answer and a follower's append looked them
    up per vnode and call). Valid while ``key`` is the catalog's :meth:`Catalog._taken_key`; :meth:`Catalog.apply`
    keeps a valid one valid, anything else that changes the topics changes the key (derived again when read)."""

    key: tuple[int, ...]
    names: dict[str, dict[str, None]]  # database -> its topics' names (a dict: ordered, O(1) removal)

    @classmethod
    def of(cls, key: tuple[int, ...], topics: dict[str, TopicDef]) -> _TopicsByDb:
        names: dict[str, dict[str, None]] = {}
        for name, topic in topics.items():
            names.setdefault(topic.db, {})[name] = None
        return cls(key, names)

    def add(self, topic: TopicDef) -> None:
        self.names.setdefault(topic.db, {})[topic.name] = None

    def drop(self, topic: TopicDef) -> None:
        names = self.names.get(topic.db, {})
        names.pop(topic.name, None)
        if not names:
            self.names.pop(topic.db, None)


@dataclass
class Catalog:
    path: Path
    damage: DamageLog | None = None
    max_partitions: int = MAX_PARTITIONS
    databases: dict[str, DatabaseDef] = field(default_factory=dict)
    stables: dict[tuple[str, str], StableDef] = field(default_factory=dict)
    topics: dict[str, TopicDef] = field(default_factory=dict)
    acls: acls.AclStore = field(default_factory=acls.AclStore)  # Kafka ACLs / TDengine grants (storage/acls.py)
    client_quotas: dict[quotas.Entity, quotas.QuotaValues] = field(default_factory=dict)  # storage/quotas.py
    users: dict[str, User] = field(default_factory=dict)  # their records: walgate.storage.users
    resource_configs: resource_configs.ResourceConfigs = field(default_factory=dict)  # storage/resource_configs.py
    _pad: bytes = b""  # b"\n" while the file may end in a torn record
    generation: int = 0  # +1 per committed change: an equal generation means an unchanged catalog (for snapshots)
    # topics whose last record is a drop (a drop_topic, or the drop_db of their database): the start deletes their
    # committed offsets if a stop came before the drop did (issue 23); a topic whose record was damaged is not here.
    # A rewrite (damage, repair) keeps no drop records: offsets a stop left before one stay (checked against the
    # topics on every commit and fetch, so unseen unless a topic of the same name is created again)
    dropped: set[str] = field(default_factory=set)
    syncs: SyncLatency = field(default_factory=SyncLatency)  # its engine's fsync times (a catalog of its own: its own)
    node_id: int = 0  # this data dir's node (node.id): where vgroups of a database without placement are
    cluster: bool = False  # cluster mode: SHARED_OPS records come from the cluster's record stream (module docstring)
    replication: bool = False  # cluster mode: new databases may have more than one replica (replication.enable)
    shared_seq: int = 0  # cluster mode: the sequence number of the last shared record applied
    _staged: list[dict[str, Any]] | None = None  # during a staged call: the shared records it made
    _staged_from: _State | None = None  # during a staged call: the state before its first shared record
    _staged_local: bool = False  # during a staged call: it wrote a record of the node's own
    # cluster mode: the live nodes (id -> broker.rack) Kafka-native topics' partitions are placed over (set by the
    # gateway from the membership; empty: this node alone)
    live_nodes: dict[int, str | None] = field(default_factory=dict)
    # cluster mode: the last STABLE_METAS_OP record (walgate.storage.sql_objects); None: none since the file began
    stable_metas: dict[str, Any] | None = None
    # cluster mode, by replicated database: (seq, meta entry) of each ALTER/DROP STABLE record applied (STABLE_CHANGES_OP)
    stable_changes: dict[str, tuple[tuple[int, dict[str, Any]], ...]] = field(default_factory=dict)
    # cluster mode: the cluster's databases whose records are passed over here because a database of this node's own
    # holds the name (name -> the cluster database's id), until the cluster drops it: the controller never takes
    # their partition states for a dropped database's (:meth:`controller_vnodes`)
    shadowed: dict[str, str] = field(default_factory=dict)
    # +1 per record applied, per restore and per topic forgotten: with the dicts' identities and sizes, the caches' key
    _changes: int = 0
    _taken_cache: _Taken | None = None
    _by_db_cache: _TopicsByDb | None = None

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None, *, max_partitions: int = MAX_PARTITIONS,
             syncs: SyncLatency | None = None, cluster: bool = False) -> Catalog:
        """Replay ``path`` (see the module docstring): never refuses to open, whatever the file holds; its fsyncs are
        timed into ``syncs`` (the engine's)."""
        cat = cls(path, damage, max_partitions, syncs=SyncLatency() if syncs is None else syncs, cluster=cluster)
        data = path.read_bytes() if path.exists() else b""
        scan = lines.scan(data)
        damaged = False
        for bad in scan.bad:
            cat._report(bad.start, bad.end, f"catalog record: {bad.reason}", data,
                        "newline restored" if bad.repaired else "skipped")
            damaged = True
        for start, end, record in scan.records:
            try:
                cat.apply(record)
            except (_Invalid, KeyError, TypeError, ValueError, AttributeError) as exc:
                cat._report(start, end, f"catalog record cannot be applied: {exc}", data)
                damaged = True
        if damaged:
            try:
                cat.rewrite()
            except OSError as exc:
                log.error("%s: could not rewrite the catalog without its damaged records: %s", path, exc)
                cat._pad = b"\n"
        elif scan.complete < len(data):
            log.info("%s: dropping a torn last record (%d bytes)", path, len(data) - scan.complete)
            cat._cut(scan.complete)
        return cat

    def _report(self, start: int, end: int, reason: str, data: bytes, action: str = "skipped") -> None:
        if action == "skipped":
            reason += f"; {REPAIR_HINT}"
        if self.damage is None:
            log.warning("%s bytes [%d, %d): %s; %s", self.path, start, end, reason, action)
        else:
            self.damage.report(self.path, start, end, reason, action, data[start:end])

    def _cut(self, size: int) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                fileio.truncate(fd, size)
                fileio.fsync(fd, syncs=self.syncs)
            finally:
                os.close(fd)
        except OSError as exc:
            log.error("%s: could not cut a torn record off: %s", self.path, exc)
            self._pad = b"\n"

    def _state(self) -> _State:
        """What a failed or staged change is undone to (every collection is replaced, never changed in place)."""
        return _State(dict(self.databases), dict(self.stables), dict(self.topics), dict(self.client_quotas),
                      dict(self.users), self.acls.current, dict(self.resource_configs), self.shared_seq,
                      self.stable_metas, self.stable_changes, dict(self.shadowed))

    def _restore(self, state: _State, *, shared_only: bool = False) -> None:
        """Back to ``state``; ``shared_only``: only its shared parts (a staged call's changes of the node's own
        records are written and stay; it has none once it staged a Kafka-native topic's record, :meth:`_commit`)."""
        if not shared_only or self._staged_topics():
            self.databases, self.stables, self.topics = state.databases, state.stables, state.topics
        self._changes += 1
        self.client_quotas, self.users, self.acls.current = state.client_quotas, state.users, state.acls
        self.resource_configs, self.shared_seq = state.resource_configs, state.shared_seq
        self.stable_metas, self.stable_changes, self.shadowed = state.stable_metas, state.stable_changes, state.shadowed

    def _commit(self, record: dict[str, Any]) -> None:
        """Apply one change and persist it (fsynced before returning); nothing changes when the write fails. In
        cluster mode a shared record is staged instead (module docstring). Only an exclusive storage call changes the
        catalog (:func:`~walgate.storage.lanes.check_exclusive`: calls on vnode lanes read it at once)."""
        check_exclusive("the catalog")
        if self.cluster and "seq" not in record and self.is_shared(record):
            if self._staged is None:
                raise StorageUnavailable("in cluster mode users, ACLs, quotas, configs, databases, supertables and "
                                         "topics are changed through the cluster's controller: this change did not go"
                                         " through it, nothing changed")
            if self._staged_local and record.get("op") not in SHARED_OPS:
                raise InvalidValue(_NOT_MIXED)
            if self._staged_from is None:
                self._staged_from = self._state()
            self.apply(record)
            self._staged.append(record)
            return
        if self._staged_topics():
            raise InvalidValue(_NOT_MIXED)
        if self._staged is not None:
            self._staged_local = True
        saved = self._state()
        self.apply(record)
        try:
            fileio.append_file(self.path, self._pad + lines.encode(record), syncs=self.syncs)
        except OSError as exc:
            self._restore(saved)
            self._pad = b"\n"
            raise StorageUnavailable(f"The catalog could not be written ({exc.strerror or exc}): nothing was changed") from None
        self._pad = b""
        self.generation += 1

    # ----------------------------------------------------- cluster mode (shared records)

    def is_shared(self, record: dict[str, Any]) -> bool:
        """Whether ``record`` is the cluster's in cluster mode: users, ACLs, quotas, configs (:data:`SHARED_OPS`),
        Kafka-native topics (:data:`KAFKA_TOPIC_OPS`, and the ``drop_db`` of a Kafka-native topic's database, which
        drops the topic with it) and the SQL objects of the cluster's databases (:meth:`is_cluster_db`): their
        ``create_db`` (which places them), ``drop_db``, supertables' and TDengine topics' records."""
        op = record.get("op")
        if op in SHARED_OPS or op in KAFKA_TOPIC_OPS or op == PLACE_VGROUP_OP:
            return True
        if op == "create_db":
            return "nodes" in record
        if op == "drop_db":
            name = record.get("name")
            return self.is_cluster_db(name) or any(t.db == name and t.kind == "kafka" for t in self.topics.values())
        if op in ("create_stable", "alter_stable", "drop_stable", "create_topic"):
            return self.is_cluster_db(record.get("db"))
        if op == "drop_topic":
            topic = self.topics.get(record.get("name"))  # type: ignore[arg-type]
            return topic is not None and self.is_cluster_db(topic.db)
        return False

    def is_cluster_db(self, name: object) -> bool:
        """Whether database ``name`` is the cluster's: its record places its vgroups (cluster mode; a database a data
        dir held as a single node, whose record does not, stays that node's own)."""
        db = self.databases.get(name) if isinstance(name, str) else None
        return self.cluster and db is not None and db.nodes is not None

    def _staged_topics(self) -> bool:
        """During a staged call: whether it staged a record of a database, supertable or topic (the cluster's)."""
        return any(r.get("op") not in SHARED_OPS for r in self._staged or ())

    def stage(self) -> None:
        """Start a staged call: shared changes from here on are validated and applied in memory, not written."""
        self._staged, self._staged_from, self._staged_local = [], None, False

    def unstage(self) -> list[dict[str, Any]]:
        """End a staged call: undo its shared changes and return their records, in order."""
        records = self._staged or []
        if self._staged_from is not None:
            self._restore(self._staged_from, shared_only=True)
            self._staged_from = None
        self._staged = None
        return records

    def validate_shared(self, records: list[dict[str, Any]]) -> None:
        """Raise :class:`InvalidValue` unless ``records`` (shared ones) apply in order to the current state;
        nothing changes either way."""
        saved = self._state()
        try:
            for record in records:
                if not isinstance(record, dict) or "seq" in record or not self.is_shared(record):
                    raise _Invalid(f"not a shared catalog record: {str(record)[:200]}")
                self.apply(record)
        except (_Invalid, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidValue(f"The change does not apply to the cluster's catalog (changed meanwhile?): {exc}") from None
        finally:
            self._restore(saved)

    def apply_shared(self, seq: int, record: dict[str, Any]) -> bool:
        """Apply shared record ``seq`` of the cluster's stream, durably (like :meth:`_commit`); False when it was
        applied already. A record that cannot be applied (the controller validated it against the same state, so
        every node refuses it alike) is logged and passed over, its sequence number recorded. Raises
        :class:`StorageUnavailable` (nothing changed) when the disk refuses the write."""
        if seq <= self.shared_seq:
            return False
        try:
            self.validate_shared([record])
            self._commit({**record, "seq": seq})
        except InvalidValue as exc:
            log.error("%s: cluster catalog record %d passed over: %s", self.path, seq, exc)
            shadowed = self._shadowed_after(record)
            self._commit({"op": _SEQ_OP, "seq": seq, **({} if shadowed == self.shadowed else {"shadowed": shadowed})})
        return True

    def _shadowed_after(self, record: dict[str, Any]) -> dict[str, str]:
        """:attr:`shadowed` once ``record``, a cluster record passed over, is: with the database a ``create_db``
        places (its name a database of this node's own holds), without the one a ``drop_db`` names."""
        name, op = record.get("name"), record.get("op")
        if op == "create_db" and "nodes" in record and isinstance(name, str) and is_db_id(record.get("id")) and (
                name in self.databases and not self.is_cluster_db(name)):
            return {**self.shadowed, name: record["id"]}
        if op == "drop_db" and name in self.shadowed and not self.is_cluster_db(name):
            return {k: v for k, v in self.shadowed.items() if k != name}
        return self.shadowed

    def _shadowed_record(self, record: dict[str, Any]) -> bool:
        """Whether a snapshot's ``record`` is of a database :attr:`shadowed` (its ``create_db``, supertables, TDengine
        topics, ALTER/DROP STABLE entries and ``place_vgroup`` records), passed over as the stream's are."""
        name = record.get("name") if record.get("op") == "create_db" else record.get("db")
        return (name in self.shadowed and not self.is_cluster_db(name)) or (
            record.get("op") == PLACE_VGROUP_OP and record.get("db_id") in self.shadowed.values())

    def single_node_objects(self) -> list[str]:
        """What this data dir holds as a single node, named for a person ("database power", "topic orders", "users: 2"):
        its databases and topics whose records place nothing, its users, ACLs, client quotas and configs; empty when
        it has applied a cluster record (a cluster node's data dir) or holds nothing. These are what
        :meth:`take_into_cluster` makes the cluster's (docs/cluster.md, "A single node's data dir into a cluster")."""
        if self.shared_seq:
            return []
        kafka_dbs = {t.db for t in self.topics.values() if t.kind == "kafka"}
        out = [f"database {d.name}" for d in self.databases.values() if d.replicas is None and d.name not in kafka_dbs]
        out += [f"topic {t.name}" for t in self.topics.values() if self.databases[t.db].replicas is None]
        counts = (("users", len(self.users)), ("ACLs", len(self.acls.records())),
                  ("client quotas", len(self.client_quotas)), ("configs", len(self.resource_configs)))
        return out + [f"{what}: {n}" for what, n in counts if n]

    def taken_into_cluster(self) -> list[dict[str, Any]]:
        """The cluster's catalog this data dir's single-node catalog becomes (:meth:`take_into_cluster`), as a snapshot
        of the cluster's record stream (:meth:`shared_records`); nothing changes here."""
        saved, cluster = self._state(), self.cluster
        try:
            self._place_own()
            self.cluster = True
            return self.shared_records()
        finally:
            self._restore(saved)
            self.cluster = cluster

    def take_into_cluster(self, seq: int) -> None:
        """Make this data dir's single-node catalog the cluster's up to record ``seq`` (the snapshot
        :meth:`taken_into_cluster` gave, which the gateway wrote to etcd first): every database placed on this node,
        one replica per vgroup, as the vnodes already are; ``shared_seq`` = ``seq``. The file is rewritten atomically;
        raises :class:`StorageUnavailable` when it cannot be (nothing changed)."""
        check_exclusive("the catalog")
        saved = self._state()
        self._place_own()
        self.shared_seq = seq
        try:
            self.rewrite()
        except OSError as exc:
            self._restore(saved)
            raise StorageUnavailable(f"The catalog could not be written ({exc.strerror or exc}): nothing was changed"
                                     ) from None
        self.generation += 1

    def _place_own(self) -> None:
        """Place every database whose record places nothing on this node, one replica per vgroup (where its vnodes
        are)."""
        self.databases = {name: d if d.replicas is not None else replace(d, replicas=((self.node_id,),) * d.vgroups)
                          for name, d in self.databases.items()}
        self._changes += 1

    def shared_records(self) -> list[dict[str, Any]]:
        """Records that rebuild the shared state (a snapshot of the cluster's stream): in cluster mode with the
        Kafka-native topics and the cluster's SQL databases, supertables and TDengine topics."""
        return ((self._kafka_topic_records(placed=True) + self._sql_records(shared=True) + self._placed_anew_records()
                 if self.cluster else [])
                + self.acls.records() + quotas.records(self.client_quotas) + user_records(self.users)
                + resource_configs.records(self.resource_configs))

    def _sql_records(self, *, shared: bool) -> list[dict[str, Any]]:
        """The records of the SQL databases (not a Kafka-native topic's), their supertables and TDengine topics that
        are the cluster's (``shared``: :meth:`is_cluster_db`) or not, in the order they apply."""
        kafka_dbs = {t.db for t in self.topics.values() if t.kind == "kafka"}
        out = [_db_record(d) for d in self.databases.values()
               if d.name not in kafka_dbs and self.is_cluster_db(d.name) == shared]
        out += [self._stable_record("create_stable", st, st.columns, st.tags) for st in self.stables.values()
                if self.is_cluster_db(st.db) == shared]
        out += [{"op": STABLE_CHANGES_OP, "db": db, "changes": [[seq, meta] for seq, meta in changes]}
                for db, changes in self.stable_changes.items() if self.is_cluster_db(db) == shared]
        return out + [{"op": "create_topic", "name": t.name, "kind": t.kind, "db": t.db, "source": t.source,
                       "with_meta": t.with_meta, "sql": t.sql, "topic_id": t.topic_id, "created_ms": t.created_ms,
                       **({"stable": t.stable} if t.stable else {})}
                      for t in self.topics.values() if t.kind != "kafka" and self.is_cluster_db(t.db) == shared]

    def _placed_anew_records(self) -> list[dict[str, Any]]:
        """The ``place_vgroup`` records of the vgroups replica moves placed anew or are moving (after their
        databases' records)."""
        return [place_vgroup_record(d.id, vgroup, d.replicas_of(vgroup, self.node_id), *d.moves.get(vgroup, ((), ())))
                for d in self.databases.values() for vgroup in sorted(d.placed_anew.keys() | d.moves.keys())]

    def _kafka_topic_records(self, placed: bool | None = None) -> list[dict[str, Any]]:
        """The Kafka-native topics' records; ``placed``: only those whose record places their partitions (True: the
        cluster's, made through its stream) or only those whose record does not (False: made by this data dir as a
        single node, which stay its own)."""
        return [_kafka_topic_record(self.databases[t.db], t) for t in self.topics.values()
                if t.kind == "kafka" and (placed is None or (self.databases[t.db].nodes is not None) == placed)]

    def restore_shared(self, seq: int, records: list[dict[str, Any]]) -> None:
        """Replace the shared state by ``records`` (a snapshot of the stream up to ``seq``) and rewrite the file
        (atomically); nothing changes when a record does not apply or the write fails."""
        saved = self._state()
        self.client_quotas, self.users, self.acls.current, self.resource_configs = {}, {}, AclSet(), {}
        if self.cluster:  # the cluster's databases and topics are the snapshot's (a single node's old ones stay)
            placed = {d.name for d in self.databases.values() if d.nodes is not None}
            self.shadowed = {}
            self.databases = {k: v for k, v in self.databases.items() if k not in placed}
            self.stables = {k: v for k, v in self.stables.items() if k[0] not in placed}
            self.topics = {k: v for k, v in self.topics.items() if v.db not in placed}
            self.stable_changes = {k: v for k, v in self.stable_changes.items() if k not in placed}
        try:
            for record in records:
                if not isinstance(record, dict) or not (record.get("op") in SHARED_OPS
                                                        or (self.cluster and record.get("op") in _SNAPSHOT_OPS)):
                    raise _Invalid(f"not a shared catalog record: {str(record)[:200]}")
                self.shadowed = self._shadowed_after(record) if record.get("op") == "create_db" else self.shadowed
                if not self._shadowed_record(record):
                    self.apply(record)
            self.shared_seq = seq
            self.rewrite()
        except (_Invalid, KeyError, TypeError, ValueError, AttributeError) as exc:
            self._restore(saved)
            raise InvalidValue(f"the cluster catalog's snapshot up to {seq} does not apply: {exc}") from None
        except OSError as exc:
            self._restore(saved)
            raise StorageUnavailable(f"The catalog could not be written ({exc.strerror or exc}): nothing was changed") from None
        self.generation += 1

    def commit(self, record: dict[str, Any]) -> None:
        """:meth:`_commit` for the record kinds other modules own (users: :mod:`walgate.storage.users`)."""
        self._commit(record)

    def records(self) -> list[dict[str, Any]]:
        """Records that rebuild the current state (for :meth:`rewrite` and the data dir migration)."""
        out = self._sql_records(shared=False)  # the others: shared_records
        out[:0] = self._kafka_topic_records(placed=False if self.cluster else None)
        out += self.shared_records()
        out += [] if self.stable_metas is None else [self.stable_metas]
        shadowed = {"shadowed": self.shadowed} if self.shadowed else {}
        return out + ([{"op": _SEQ_OP, "seq": self.shared_seq, **shadowed}] if self.shared_seq else [])

    def rewrite(self) -> None:
        """Replace the file by the records of the current state (atomically: the old file or the new one)."""
        fileio.replace_file(self.path, b"".join(lines.encode(r) for r in self.records()), syncs=self.syncs)
        self._pad = b""

    def apply(self, r: dict[str, Any]) -> None:
        """Apply one change record: the only way catalog state changes. Raises (changing nothing) when the record
        cannot be applied."""
        if not isinstance(r, dict):
            raise _Invalid(f"not an object: {r!r}")
        op = r.get("op")
        kept: _Taken | None = None  # what stays valid after this record (updated here): not derived again
        by_db = self._by_db_cache  # the same for the topics by database, when it is valid now
        by_db = by_db if by_db is not None and by_db.key == self._taken_key() else None
        if op == "create_db":
            name, db_id = _get(r, "name", str), r.get("id")
            if name in self.databases:
                raise _Invalid(f"database {name} exists")
            if not is_db_id(db_id) or db_id in self._taken().db_ids:
                raise _Invalid(f"bad or duplicate database id {db_id!r}")
            options = _options(r)
            self.databases[name] = _min_insync_checked(DatabaseDef(name, options, _get(r, "created_ms", int), db_id,
                                                                   _replicas(r, options)))
        elif op == "drop_db":
            name = self._known_db(r, "name")
            self.databases.pop(name)
            self.stables = {k: v for k, v in self.stables.items() if k[0] != name}
            self.dropped.update(k for k, v in self.topics.items() if v.db == name)
            self.topics = {k: v for k, v in self.topics.items() if v.db != name}
            self.stable_changes = {k: v for k, v in self.stable_changes.items() if k != name}
            if by_db is not None:
                by_db.names.pop(name, None)
        elif op in ("create_stable", "alter_stable"):
            db, name = self._known_db(r, "db"), _get(r, "name", str)
            if (op == "alter_stable") != ((db, name) in self.stables):
                raise _Invalid(f"{op} of {'an unknown' if op == 'alter_stable' else 'an existing'} supertable {db}.{name}")
            cols, tags = _columns(r, "columns"), _columns(r, "tags")
            was = r.get("was")  # a cluster ALTER's: the definition it was made from (two nodes' ALTERs never both apply,
            if was is not None:  # nor one made before a DROP and re-CREATE of the name: its created_ms is the record's)
                now = self.stables[(db, name)]
                if (_columns(_get(r, "was", dict), "columns"), _columns(was, "tags"), _get(r, "created_ms", int)) != (
                        now.columns, now.tags, now.created_ms):
                    raise _Invalid(f"alter_stable of supertable {db}.{name}: it changed since the ALTER was made")
            self.stables[(db, name)] = StableDef(db, name, cols, tags, _get(r, "created_ms", int))
            if op == "alter_stable":
                self._stable_changed(db, r)
        elif op == "drop_stable":
            key = (self._known_db(r, "db"), _get(r, "name", str))
            if key not in self.stables:
                raise _Invalid(f"drop of an unknown supertable {key[0]}.{key[1]}")
            del self.stables[key]
            self._stable_changed(key[0], r)
        elif op == STABLE_CHANGES_OP:
            db = self._known_db(r, "db")
            changes = _get(r, "changes", list)
            if not all(isinstance(c, list) and len(c) == 2 and type(c[0]) is int and isinstance(c[1], dict)
                       and c[1].get("of") == c[0] and c[1].get("op") in ("alter_stable", "drop_stable")
                       and isinstance(c[1].get("stable"), str) for c in changes) or [c[0] for c in changes] != sorted(
                    {c[0] for c in changes}):
                raise _Invalid(f"'changes' is {str(changes)[:200]}")
            self.stable_changes = {**self.stable_changes, db: tuple((c[0], c[1]) for c in changes)}
        elif op == "create_topic":
            name, kind = _get(r, "name", str), r.get("kind")
            if name in self.topics or kind not in _TOPIC_KINDS or not self._new_topic_id(r):
                raise _Invalid(f"topic {name}: exists, or bad kind {kind!r} or topic id")
            made = self.topics[name] = TopicDef(name, kind, self._known_db(r, "db"), _get(r, "source", str),
                                                _get(r, "with_meta", bool), _get(r, "sql", str), r["topic_id"],
                                                _get(r, "created_ms", int), stable=str(r.get("stable", "")))
            self.dropped.discard(name)
            if by_db is not None:
                by_db.add(made)
        elif op == "drop_topic":
            gone = self.topics.pop(_get(r, "name", str), None)
            if gone is None:
                raise _Invalid(f"drop of an unknown topic {r['name']}")
            self.dropped.add(r["name"])
            if by_db is not None:
                by_db.drop(gone)
        elif op == "alter_kafka_topic":
            topic = self.topics.get(_get(r, "name", str))
            if topic is None or topic.kind != "kafka":
                raise _Invalid(f"alter of an unknown Kafka-native topic {r['name']}")
            options, configs = _options(r), _topic_configs(r)
            old = self.databases[topic.db]
            replicas = _replicas(r, options) if "nodes" in r or "replicas" in r else old.replicas
            if replicas is not None and len(replicas) != options["VGROUPS"]:
                raise _Invalid(f"alter of {topic.name} to {options['VGROUPS']} vgroups does not place them")
            altered = _min_insync_checked(replace(old, options=options, replicas=replicas))
            if altered.replication_factor != old.replication_factor:  # one copy without placement, as it reads
                raise _Invalid(f"alter of {topic.name} changes its replication factor")
            self.topics[topic.name] = replace(topic, configs=configs)
            self.databases[topic.db] = altered
        elif op == "create_kafka_topic":  # one record: the topic and its database appear together
            name, db, db_id = _get(r, "name", str), _get(r, "db", str), r.get("db_id")
            if name in self.topics or db in self.databases or not self._new_topic_id(r):
                raise _Invalid(f"Kafka-native topic {name}: it or its database {db} exists, or bad topic id")
            kept = self._taken()
            if not is_db_id(db_id) or db_id in kept.db_ids:
                raise _Invalid(f"bad or duplicate database id {db_id!r}")
            options, configs, created = _options(r), _topic_configs(r), _get(r, "created_ms", int)
            states = r.get("states", False)
            if not isinstance(states, bool):
                raise _Invalid(f"'states' is {states!r}: expected true or false")
            database = self.databases[db] = _min_insync_checked(DatabaseDef(db, options, created, db_id,
                                                                            _replicas(r, options), states=states))
            topic = self.topics[name] = TopicDef(name, "kafka", db, "", False, "", r["topic_id"], created, configs)
            self.dropped.discard(name)
            kept.add_topic(topic)
            if by_db is not None:
                by_db.add(topic)
            kept.db_ids.add(db_id)
            kept.partitions += database.vgroups
        elif op == PLACE_VGROUP_OP:
            self._place_anew(r)
        elif op == _SEQ_OP:  # its sequence number (below), and the databases shadowed when it says
            shadowed = r.get("shadowed", self.shadowed)
            if not isinstance(shadowed, dict) or not all(isinstance(k, str) and is_db_id(v) for k, v in shadowed.items()):
                raise _Invalid(f"'shadowed' is {shadowed!r}: expected database names and ids")
            self.shadowed = dict(shadowed)
        elif op == STABLE_METAS_OP:
            _get(r, "of", int), _get(r, "db", str), _get(r, "meta", dict)
            if not all(k.isdigit() and isinstance(v, int) for k, v in _get(r, "next", dict).items()):
                raise _Invalid(f"'next' is {r['next']!r}")
            self.stable_metas = r
        elif op in acls.OPS:
            self.acls.apply(r)
        elif op == quotas.QUOTA_OP:
            quotas.apply_record(self.client_quotas, r)
        elif op in USER_OPS:
            apply_user_record(self.users, r)
        elif op == resource_configs.RESOURCE_OP:
            resource_configs.apply_record(self.resource_configs, r)
        else:
            raise _Invalid(f"unknown catalog record {op!r}")
        if "seq" in r:  # a shared record of the cluster's stream (cluster mode)
            self.shared_seq = _get(r, "seq", int)
        self._changes += 1
        if kept is not None:
            kept.key = self._taken_key()
        if by_db is not None:
            by_db.key = self._taken_key()

    def _place_anew(self, r: dict[str, Any]) -> None:
        """Apply a ``place_vgroup`` record: its vgroup of a placed database is held by its ``replicas`` from now on
        (distinct node ids, at least the database's ``MIN_INSYNC``); the database's own placement when they are it,
        unless the database has one copy (the vgroup, which has a partition state since its first move, stays
        :meth:`DatabaseDef.replicated`).
        Its ``adding`` and ``removing`` (optional, both lists: a move in progress) must be a move of those replicas
        (``partition.moves_valid``); a record without them ends the vgroup's move."""
        db_id, vgroup, raw = r.get("db_id"), _get(r, "vgroup", int), _get(r, "replicas", list)
        adding, removing = r.get("adding", []), r.get("removing", [])
        db = next((d for d in self.databases.values() if d.id == db_id), None)
        if db is None or db.replicas is None or not 0 <= vgroup < db.vgroups:
            raise _Invalid(f"place_vgroup of vgroup {vgroup} of database id {db_id!r}: no such placed vgroup")
        if not raw or not all(_node_id(n) for n in raw) or len(set(raw)) != len(raw) or len(raw) < int(
                db.options.get("MIN_INSYNC", 1)):
            raise _Invalid(f"'replicas' is {raw!r}: expected distinct node ids, at least MIN_INSYNC of them")
        if not isinstance(adding, list) or not isinstance(removing, list) or not all(
                _node_id(n) for n in adding + removing) or not moves_valid(tuple(raw), tuple(adding), tuple(removing)):
            raise _Invalid(f"'adding' {adding!r} and 'removing' {removing!r}: not a move of replicas {raw!r}")
        placed = {**db.placed_anew, vgroup: tuple(raw)}
        if placed[vgroup] == db.replicas[vgroup] and db.replication_factor > 1:  # (one copy: it stays replicated)
            del placed[vgroup]
        moves = {v: m for v, m in db.moves.items() if v != vgroup}
        if adding or removing:
            moves[vgroup] = (tuple(adding), tuple(removing))
        self.databases[db.name] = replace(db, placed_anew=placed, moves=moves)

    def _stable_changed(self, db: str, r: dict[str, Any]) -> None:
        """Note the meta entry of ALTER/DROP STABLE record ``r`` of ``db`` in :attr:`stable_changes` when it is a
        shared record (its ``seq``) of a database with a replicated vgroup."""
        if "seq" in r and self.databases[db].any_replicated:
            seq = _get(r, "seq", int)
            self.stable_changes = {**self.stable_changes,
                                   db: (*self.stable_changes.get(db, ()), (seq, stable_meta(r, seq)))}

    def _taken_key(self) -> tuple[int, ...]:
        """Changes when the topics or databases may have: a record applied, a restore, a dict replaced or resized."""
        return self._changes, id(self.topics), len(self.topics), id(self.databases), len(self.databases)

    def topics_of(self, db: str) -> list[TopicDef]:
        """The topics over database ``db``, in the order of :attr:`topics`: what a scan of every topic for those of
        ``db`` finds, in O(its topics) (:class:`_TopicsByDb`, derived again only when the topics changed otherwise
        than by a record applied)."""
        key = self._taken_key()
        if self._by_db_cache is None or self._by_db_cache.key != key:
            self._by_db_cache = _TopicsByDb.of(key, self.topics)
        return [self.topics[name] for name in self._by_db_cache.names.get(db, ())]

    def forget_topic(self, name: str) -> None:
        """Topic ``name`` is not served (it cannot be opened): gone from :attr:`topics` in memory, its record kept
        (the next start opens it again)."""
        del self.topics[name]
        self._changes += 1

    def has_db_id(self, db_id: str) -> bool:
        """Whether a database has the id ``db_id`` (the name of its directory)."""
        return db_id in self._taken().db_ids

    def _taken(self) -> _Taken:
        """The ids, partitions and names new records may not reuse (:class:`_Taken`), derived again only when the
        topics or databases changed otherwise than by a Kafka-native topic's creation."""
        key = self._taken_key()
        if self._taken_cache is None or self._taken_cache.key != key:
            self._taken_cache = _Taken.of(key, self.databases, self.topics)
        return self._taken_cache

    def _new_topic_id(self, r: dict[str, Any]) -> bool:
        """The record's topic id is valid and no other topic's (it names the topic's files)."""
        topic_id = r.get("topic_id")
        return is_topic_id(topic_id) and topic_id not in self._taken().topic_ids

    def _known_db(self, r: dict[str, Any], key: str) -> str:
        name: str = _get(r, key, str)
        if name not in self.databases:
            raise _Invalid(f"unknown database {name}")
        return name

    # ------------------------------------------------------------- partitions

    def _placement(self, count: int, replicas: int = 1) -> tuple[Replicas, ...] | None:
        """The replicas of ``count`` new vgroups (walgate.cluster.placement) over the live nodes (this node alone
        while it knows none), balanced by the replicas and leaderships each node holds; None on a single node
        (every vgroup is its own). Raises :class:`InvalidReplicationFactor` when ``replicas`` cannot be placed."""
        if not self.cluster:
            check_replication_factor(replicas, len(self.placeable()))
            return None
        held: Counter[int] = Counter()
        led: Counter[int] = Counter()
        for d in self.databases.values():
            for i in range(d.vgroups):
                held.update(d.replicas_of(i, self.node_id))
                led[d.node_of(i, self.node_id)] += 1
        return place(count, self.placeable(), held, replicas, led)

    def replicated_vnodes(self, min_isr_default: int = 1) -> dict[PartitionId, ReplicatedVnode]:
        """Each :meth:`DatabaseDef.replicated` vgroup (of more than one replica, or of one copy moved once), by
        ``(database id, vgroup)``, as the controller creates its partition state
        (walgate.cluster.partition_states.Reconciler): its replicas, ``min.insync.replicas`` (an SQL database's
        ``MIN_INSYNC``; a Kafka-native topic's config, else the cluster-wide dynamic broker default (Kafka's
        ``min.insync.replicas`` broker config, which its controller reads; this node's own broker resource is not the
        cluster's), else ``min_isr_default`` (the controller's static setting), at most its replicas, as Kafka's
        effective min ISR (``Partition.effectiveMinIsr``): the partition state holds no more), the topic's
        ``unclean.leader.election.enable`` (defaulted alike, else false) and the move in progress, if any (its adding
        and removing replicas, as its ``place_vgroup`` record named them)."""
        defaults = {"min.insync.replicas": str(min_isr_default),
                    **resource_configs.topic_defaults(self.resource_configs, "")}
        native = {t.db: {**defaults, **t.configs} for t in self.topics.values() if t.kind == "kafka"}
        out: dict[PartitionId, ReplicatedVnode] = {}
        for db in self.databases.values():
            if not db.any_replicated:
                continue
            configs = native.get(db.name)
            if configs is None:
                min_isr, unclean = int(db.options.get("MIN_INSYNC", 1)), False
            else:
                min_isr = min(int(configs.get("min.insync.replicas", "1")), db.replication_factor)
                unclean = configs.get("unclean.leader.election.enable", "false").strip().lower() == "true"
            for vgroup in (v for v in range(db.vgroups) if db.replicated(v)):
                replicas = db.replicas_of(vgroup, self.node_id)
                out[PartitionId(db.id, vgroup)] = ReplicatedVnode(replicas, min(min_isr, len(replicas)), unclean,
                                                                  *db.moves.get(vgroup, ((), ())))
        return out

    def controller_vnodes(self, min_isr_default: int = 1) -> CatalogVnodes:
        """What the controller makes and deletes partition states from: :meth:`replicated_vnodes`, and the ids of
        the cluster's databases :attr:`shadowed` here, whose states it leaves alone; with :attr:`replication`, the
        vgroups of one copy with no state (:meth:`one_copy_vnodes`), which a replica move gives one."""
        return CatalogVnodes(self.replicated_vnodes(min_isr_default), frozenset(self.shadowed.values()),
                             self.one_copy_vnodes() if self.replication else {})

    def one_copy_vnodes(self) -> dict[PartitionId, ReplicatedVnode]:
        """Each vgroup of a placed database of one copy that is not :meth:`DatabaseDef.replicated` (it has no
        partition state), by ``(database id, vgroup)``: its one replica, ``min.insync.replicas`` 1, unclean election
        off, as a replica move's first state is made from it (issue 26, ``partition.initial_state``)."""
        return {PartitionId(db.id, v): ReplicatedVnode(db.replicas_of(v, self.node_id), 1)
                for db in self.databases.values() if db.replicas is not None and db.replication_factor == 1
                for v in range(db.vgroups) if not db.replicated(v)}

    def placeable(self) -> Mapping[int, str | None]:
        """The nodes (id -> ``broker.rack``) new vgroups may be placed on or manually assigned to: the live nodes in
        cluster mode (this node alone while it knows none), this node alone on a single node."""
        return (self.live_nodes if self.cluster else {}) or {self.node_id: None}

    def partitions(self) -> int:
        """Vnodes (partitions) of all databases together."""
        return self._taken().partitions

    def check_partitions(self, more: int, what: str) -> None:
        """Raise :class:`LimitExceeded` if ``more`` partitions (for ``what``) would exceed ``max_partitions``."""
        used = self.partitions()
        if more > 0 and used + more > self.max_partitions:
            raise LimitExceeded(f"Too many partitions: {what} needs {more} more, {used} of at most "
                                f"{self.max_partitions} are in use (max_partitions)")

    # -------------------------------------------------------------- databases

    def database(self, name: str) -> DatabaseDef:
        try:
            return self.databases[name]
        except KeyError:
            raise NotFound(f"Database not exist: {name}") from None

    def create_database(self, name: str, options: dict[str, int | str], now_ms: int) -> DatabaseDef:
        db = self.new_database(name, options, now_ms)
        self.add_database(db)
        return db

    def new_database(self, name: str, options: dict[str, int | str], now_ms: int) -> DatabaseDef:
        """A new database, validated (name, options, partition limit) and given an id; nothing is written (the
        engine creates its vnodes first, then :meth:`add_database` records it)."""
        validate_database_name(name)
        if self.cluster and name.startswith(KAFKA_DB_PREFIX):
            raise InvalidValue(f"Database name {name}: in a cluster the names {KAFKA_DB_PREFIX}* are the databases of"
                               " Kafka-native topics, which are the cluster's (docs/cluster.md)")
        merged = dict(DB_DEFAULTS)
        replicas = options.get("REPLICA", 1)
        for key, value in options.items():
            if key == "REPLICA":
                continue
            if key == "PRECISION":
                if value not in ("ms", "us", "ns"):
                    raise InvalidValue(f"Invalid option PRECISION {value!r}: expected 'ms', 'us' or 'ns'")
            else:
                lo, hi = _LIMITS[key]
                if not isinstance(value, int) or not lo <= value <= hi:
                    raise InvalidValue(f"Invalid option {key} {value!r}: expected an integer in [{lo}, {hi}]")
            merged[key] = value
        if not isinstance(replicas, int) or replicas < 1:
            raise InvalidValue(f"Invalid option REPLICA {replicas!r}: expected an integer of at least 1")
        if "MIN_INSYNC" in options or replicas > 1:
            merged["MIN_INSYNC"] = options.get("MIN_INSYNC", replicas // 2 + 1)  # TDengine's majority by default
            if not isinstance(merged["MIN_INSYNC"], int) or not 1 <= merged["MIN_INSYNC"] <= replicas:
                raise InvalidValue(f"Invalid option MIN_INSYNC {merged['MIN_INSYNC']!r}: expected an integer in "
                                   f"[1, {replicas}] (REPLICA {replicas})")
        self.check_partitions(int(merged["VGROUPS"]), f"database {name}")
        try:
            placed = self._placement(int(merged["VGROUPS"]), replicas)
        except InvalidReplicationFactor as exc:  # TSDB_CODE_MND_NO_ENOUGH_DNODES
            raise InvalidValue(f"Out of dnodes: REPLICA {replicas} of database {name}: {exc}") from None
        return DatabaseDef(name, merged, now_ms, new_db_id(), placed)

    def add_database(self, db: DatabaseDef) -> None:
        self._commit(_db_record(db))

    def drop_database(self, name: str) -> None:
        self._commit({"op": "drop_db", "name": name})

    # ---------------------------------------------------------------- stables

    def stable(self, db: str, name: str) -> StableDef:
        try:
            return self.stables[(db, name)]
        except KeyError:
            raise NotFound(f"STable not exist: {db}.{name}") from None

    @staticmethod
    def _stable_record(op: str, st: StableDef, columns: tuple[Column, ...], tags: tuple[Column, ...]) -> dict[str, Any]:
        return {"op": op, "db": st.db, "name": st.name, "columns": [column_to_json(c) for c in columns],
                "tags": [column_to_json(c) for c in tags], "created_ms": st.created_ms}

    def create_stable(self, st: StableDef) -> None:
        validate_table_name(st.name)
        _check_columns(st.columns + st.tags)
        self._commit(self._stable_record("create_stable", st, st.columns, st.tags))

    def alter_stable(self, st: StableDef, columns: tuple[Column, ...], tags: tuple[Column, ...],
                     change: dict[str, str] | None = None) -> StableDef:
        """``change`` (the ALTER's ``action`` and ``column``) goes into the record of a cluster database's supertable,
        whose vnodes' meta entries every node writes when it applies it (walgate.storage.sql_objects), with the
        definition ``st`` it was made from (``was``, and the record's ``created_ms``, st's): a record whose supertable
        changed meanwhile, or was dropped and made again, does not apply."""
        _check_columns(columns + tags, st.columns + st.tags)
        record = self._stable_record("alter_stable", st, columns, tags)
        if change is not None and self.is_cluster_db(st.db):  # applied only to the definition it was made from
            was = {"columns": [column_to_json(c) for c in st.columns], "tags": [column_to_json(c) for c in st.tags]}
            record = {**record, "change": change, "was": was}
        self._commit(record)
        return self.stables[(st.db, st.name)]

    def drop_stable(self, db: str, name: str) -> None:
        self._commit({"op": "drop_stable", "db": db, "name": name})

    # ----------------------------------------------------------------- topics

    def create_topic(
        self, name: str, kind: str, db: str, source: str, with_meta: bool, sql: str, now_ms: int, stable: str = ""
    ) -> TopicDef:
        validate_sql_topic_name(name)
        if name in self.topics:
            raise AlreadyExists(f"Topic already exists: {name}")
        self.check_collision(name)
        self._commit(
            {
                "op": "create_topic",
                "name": name,
                "kind": kind,
                "db": db,
                "source": source,
                "with_meta": with_meta,
                "sql": sql,
                "topic_id": str(uuid.uuid4()),
                "created_ms": now_ms,
                **({"stable": stable} if stable else {}),
            }
        )
        return self.topics[name]

    def check_collision(self, name: str) -> None:
        """Refuse (:class:`TopicCollision`, Kafka's message) a new topic ``name`` that collides with an existing
        topic (:func:`~walgate.storage.names.collision_key`); the least such name is named."""
        key = collision_key(name)
        if key is None:
            return
        colliding = sorted(t for t in self._taken().colliding.get(key, ()) if t != name)
        if colliding:
            raise TopicCollision(f"Topic '{name}' collides with existing topic: {colliding[0]}")

    def create_kafka_topic(
        self, name: str, db: str, options: dict[str, int | str], configs: dict[str, str], now_ms: int
    ) -> TopicDef:
        """A Kafka-native topic and the database holding its partitions (one per vgroup), atomically."""
        database, topic = self.new_kafka_topic(name, db, options, configs, now_ms)
        self.add_kafka_topic(database, topic)
        return topic

    def new_kafka_topic(
        self, name: str, db: str, options: dict[str, int | str], configs: dict[str, str], now_ms: int,
        nodes: tuple[Replicas, ...] | None = None, db_id: str | None = None, replication_factor: int = 1,
        states: bool = False,
    ) -> tuple[DatabaseDef, TopicDef]:
        """A new Kafka-native topic and its database, validated and given ids; nothing is written (see
        :meth:`new_database`; :meth:`add_kafka_topic` records them). ``nodes``: the replicas of each vgroup as a
        manual assignment names them (checked against :meth:`placeable` by the caller, :func:`assigned`; cluster
        mode only: a single node holds every vgroup itself), else None: ``replication_factor`` replicas of each
        placed (:meth:`_placement`, raising :class:`InvalidReplicationFactor`). ``db_id``: the database's, whose
        directory was prepared for it, unless a database has it; None: a new one. ``states``: every vgroup has a
        partition state, also of one copy (:attr:`DatabaseDef.states`; placed topics only)."""
        validate_topic_name(name)
        validate_database_name(db)
        if name in self.topics:
            raise AlreadyExists(f"Topic already exists: {name}")
        self.check_collision(name)
        if db in self.databases:
            raise AlreadyExists(f"Database already exists: {db}")
        merged = {**DB_DEFAULTS, **options}
        self.check_partitions(int(merged["VGROUPS"]), f"topic {name}")
        if db_id is not None and (not is_db_id(db_id) or self.has_db_id(db_id)):
            raise InvalidValue(f"database id {db_id!r} is not new")
        placed = (self._placement(int(merged["VGROUPS"]), replication_factor) if nodes is None or not self.cluster
                  else nodes)
        return (DatabaseDef(db, merged, now_ms, db_id or new_db_id(), placed, states=states and placed is not None),
                TopicDef(name, "kafka", db, "", False, "", str(uuid.uuid4()), now_ms, configs))

    def add_kafka_topic(self, db: DatabaseDef, topic: TopicDef) -> None:
        self._commit(_kafka_topic_record(db, topic))

    def grown(self, db: DatabaseDef, count: int, assigned: tuple[Replicas, ...] | None = None) -> DatabaseDef:
        """``db`` with ``count`` vgroups, the new ones placed with as many replicas as its others
        (:meth:`_placement`), or on the replicas ``assigned`` names (one list per new vgroup, cluster mode: as
        :meth:`new_kafka_topic`'s ``nodes``); nothing is written (the engine opens the new vnodes placed here, then
        :meth:`alter_kafka_topic` records it)."""
        placed = (self._placement(count - db.vgroups, db.replication_factor) if assigned is None or not self.cluster
                  else assigned)
        replicas = None if placed is None else (db.replicas or ((self.node_id,),) * db.vgroups) + placed
        return replace(db, options={**db.options, "VGROUPS": count}, replicas=replicas)

    def alter_kafka_topic(self, name: str, options: dict[str, int | str], configs: dict[str, str],
                          replicas: tuple[Replicas, ...] | None = None) -> None:
        """New configs of a Kafka-native topic and options (VGROUPS, WAL settings) of its database; ``replicas``:
        the placement of its vgroups when their count changes (:meth:`grown`), else None: as it was."""
        db = self.database(self.topics[name].db)
        self.check_partitions(int(options["VGROUPS"]) - db.vgroups, f"topic {name}")
        self._commit(_placed({"op": "alter_kafka_topic", "name": name, "options": options, "configs": configs},
                             replicas))

    def drop_topic(self, name: str) -> None:
        self._commit({"op": "drop_topic", "name": name})

    # ------------------------------------------------------------------- ACLs

    def change_acls(self, op: str, bindings: list[AclBinding]) -> None:
        """Store (``create_acls``) or remove (``delete_acls``) ``bindings`` as one durable record (storage/acls.py)."""
        self._commit(acls.acl_record(op, bindings))

    # ---------------------------------------------------------- client quotas

    def set_client_quota(self, entity: quotas.Entity, values: quotas.QuotaValues) -> None:
        """Persist ``entity``'s whole set of quota values (none: the entity goes); see :mod:`.quotas`."""
        self._commit(quotas.record(entity, values))

    # ------------------------------------------------- broker and group configs

    def set_resource_configs(self, kind: str, name: str, configs: dict[str, str]) -> None:
        """Persist a broker's or group's whole set of dynamic configs (none: it goes); see :mod:`.resource_configs`."""
        self._commit(resource_configs.record(kind, name, configs))
