"""``walgate cluster status``, ``walgate cluster nodes`` and ``walgate cluster partitions`` (issue 26, "Seeing it"):
a cluster as its etcd holds it, as ``rpk cluster health`` and ``kafka-topics --describe`` show theirs.

It reads the keys the nodes themselves read (docs/cluster.md, "Keys"), in one etcd transaction (one revision): the
live registrations ``nodes/<id>`` (address, rack, broker epoch), the node ids that ever registered
(``incarnations/``: a known node that is not live is down), the controller candidates (the elected controller), the
partition states ``partitions/<db id>/<vgroup>`` (leader, leader epoch, replicas, ISR) and the catalog's snapshot and
records, from which only the names of databases and Kafka-native topics are taken (``create_db`` and
``create_kafka_topic``: a state names its database by id). Nothing is written, and no node is asked.

:func:`cluster_view` is the pure core (the values read in, a :class:`ClusterView` out); :func:`health`,
:func:`node_rows` and :func:`partition_rows` make what is printed, a table for people or, with ``--json``, one JSON
document; :func:`read_cluster` is the etcd shell. A vgroup is **under-replicated** when its ISR is smaller than its
replicas (``kafka-topics --under-replicated-partitions``) and **offline** (``leaderless`` in ``rpk cluster health``)
when it has no leader or its leader is not registered under the broker epoch its ISR entry names
(:func:`walgate.replication.partition.leader_live`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from walgate.admin.client import AdminError, UsageError
from walgate.admin.output import guarded, print_json, print_table
from walgate.cluster.model import (
    ControlPlaneError,
    Keys,
    Membership,
    NodeInfo,
    decode_record,
    decode_snapshot,
    membership,
)
from walgate.cluster.partition_codec import (
    PartitionId,
    PartitionStateDamaged,
    decode_state,
    partition_id,
    partitions_prefix,
)
from walgate.cluster.registry import broker_epoch
from walgate.replication.partition import NO_LEADER, PartitionState, leader_live

__all__ = ["COMMANDS", "ClusterView", "NodeView", "PartitionView", "Read", "assembled", "catalog_names", "cluster_view",
           "health", "node_rows", "partition_name", "partition_rows", "read_cluster", "status_lines"]

PASSWORD_ENV = "WALGATE_CLUSTER_ETCD_PASSWORD"


@dataclass(frozen=True)
class NodeView:
    """One node: live (registered now, with its ``address``, first Kafka endpoint, HTTP API, rack and broker epoch)
    or down (it registered once: only its id is known)."""

    node_id: int
    live: bool
    address: str | None
    http: str | None
    rack: str | None
    broker_epoch: int | None
    controller: bool


@dataclass(frozen=True)
class PartitionView:
    """One replicated vgroup's partition state. ``database`` is None when no catalog record names its id; ``topic``
    is the Kafka-native topic whose database it is, if any. ``leader`` is None for no leader. ``adding_replicas`` and
    ``removing_replicas`` are a replica move's in progress (KIP-455; Kafka's ``PartitionRegistration``), empty
    otherwise; ``under_replicated`` counts the ISR against the replicas without the adding ones, as Kafka's
    ``Partition.isUnderReplicated`` does during a move."""

    database: str | None
    topic: str | None
    db_id: str
    vgroup: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    min_isr: int
    under_replicated: bool
    under_min_isr: bool
    offline: bool
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClusterView:
    """A cluster as read at one etcd revision; ``damaged`` names the keys whose values are not walgate's."""

    cluster: str
    controller: int | None
    nodes: tuple[NodeView, ...]
    partitions: tuple[PartitionView, ...]
    damaged: tuple[str, ...]


@dataclass(frozen=True)
class Read:
    """What :func:`read_cluster` read: each ``(key, value, create_revision, mod_revision)`` under ``nodes/``,
    ``incarnations/``, ``controller/``, ``partitions/`` and ``catalog/records/``, and ``catalog/snapshot``'s value."""

    nodes: list[tuple[bytes, bytes, int, int]]
    incarnations: list[tuple[bytes, bytes, int, int]]
    candidates: list[tuple[bytes, bytes, int, int]]
    partitions: list[tuple[bytes, bytes, int, int]]
    records: list[tuple[bytes, bytes, int, int]]
    snapshot: bytes | None


def catalog_names(snapshot: bytes | None, records: Sequence[bytes]) -> dict[str, tuple[str, str | None]]:
    """Database id -> (database name, Kafka-native topic name or None), from ``catalog/snapshot``'s value and the
    ``catalog/records/`` values after it (each id is given once: a database made again under its name has another).
    A record that is not JSON names nothing."""
    payloads: list[bytes] = []
    if snapshot is not None:
        payloads += decode_snapshot(snapshot)[1].splitlines()
    payloads += [decode_record(value)[1] for value in records]
    names: dict[str, tuple[str, str | None]] = {}
    for payload in payloads:
        try:
            record = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("op") == "create_db" and isinstance(record.get("id"), str):
            names[record["id"]] = (str(record.get("name")), None)
        elif record.get("op") == "create_kafka_topic" and isinstance(record.get("db_id"), str):
            names[record["db_id"]] = (str(record.get("db")), str(record.get("name")))
    return names


def cluster_view(keys: Keys, read: Read) -> ClusterView:
    """The cluster ``read`` holds (pure). Raises :class:`ControlPlaneError` when a registration or a controller
    candidate is not walgate's; a damaged partition state or catalog record is named in ``damaged`` instead."""
    known = [int(k[len(keys.incarnations):]) for k, *_ in read.incarnations if k[len(keys.incarnations):].isdigit()]
    view = membership([v for _, v, _, _ in read.nodes], known, [(k, c, v) for k, v, c, _ in read.candidates])
    epochs = {NodeInfo.decode(v).node_id: broker_epoch(v, c) for _, v, c, _ in read.nodes}
    damaged: list[str] = []
    try:
        names = catalog_names(read.snapshot, [v for _, v, _, _ in read.records])
    except ControlPlaneError as e:
        names = {}
        damaged.append(str(e))
    states: dict[PartitionId, PartitionState] = {}
    for key, value, _, mod_revision in read.partitions:
        try:
            states[partition_id(keys, key)] = decode_state(value, mod_revision)
        except PartitionStateDamaged as e:
            damaged.append(str(e))
    return assembled(keys.cluster_id, view, epochs, states, names, tuple(damaged))


def assembled(cluster: str, view: Membership, epochs: Mapping[int, int], states: Mapping[PartitionId, PartitionState],
              names: Mapping[str, tuple[str, str | None]], damaged: tuple[str, ...] = ()) -> ClusterView:
    """The :class:`ClusterView` of a membership ``view``, the registered nodes' broker ``epochs``, the partition
    ``states`` and the database ids' ``names`` (database, Kafka-native topic), wherever they were read: from etcd at
    one revision (:func:`cluster_view`) or as a node last read them (the web console's cluster page)."""
    live = {n.node_id: n for n in view.nodes}
    nodes = []
    for node_id in view.known:
        info = live.get(node_id)
        address = None if info is None or not info.endpoints else info.endpoints[0].partition("://")[2]
        nodes.append(NodeView(node_id, info is not None, address, None if info is None else info.http,
                              None if info is None else info.rack, epochs.get(node_id), node_id == view.controller))
    partitions = []
    for pid, state in states.items():
        database, topic = names.get(pid.db_id, (None, None))
        partitions.append(PartitionView(
            database, topic, pid.db_id, pid.vgroup, None if state.leader == NO_LEADER else state.leader,
            state.leader_epoch, state.replicas, tuple(m.replica for m in state.isr), state.elr, state.min_isr,
            len(state.isr) < len(state.original), len(state.isr) < state.min_isr, not leader_live(state, epochs),
            state.adding, state.removing))
    partitions.sort(key=lambda p: (p.topic or p.database or p.db_id, p.db_id, p.vgroup))
    return ClusterView(cluster, view.controller, tuple(nodes), tuple(partitions), damaged)


def health(view: ClusterView) -> dict[str, Any]:
    """``walgate cluster status``, as ``rpk cluster health`` reports: healthy when a controller is elected, every
    known node is live and no vgroup is offline or under-replicated."""
    down = [n.node_id for n in view.nodes if not n.live]
    offline = [partition_name(p) for p in view.partitions if p.offline]
    under = [partition_name(p) for p in view.partitions if p.under_replicated]
    return {"cluster": view.cluster, "healthy": view.controller is not None and not down and not offline and not under,
            "controller": view.controller, "nodes": [n.node_id for n in view.nodes], "nodes_down": down,
            "partitions": len(view.partitions), "offline_partitions": offline, "under_replicated_partitions": under,
            "under_min_isr_partitions": [partition_name(p) for p in view.partitions if p.under_min_isr],
            "damaged": list(view.damaged)}


def partition_name(p: PartitionView) -> str:
    """``topic/vgroup`` for a Kafka-native topic's vgroup, ``database/vgroup`` for an SQL database's (its id when
    no catalog record names it)."""
    return f"{p.topic or p.database or p.db_id}/{p.vgroup}"


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids)) or "-"


NODE_COLUMNS = ("ID", "ADDRESS", "HTTP", "RACK", "LIVE", "BROKER EPOCH", "CONTROLLER")


def node_rows(view: ClusterView) -> list[tuple[Any, ...]]:
    return [(n.node_id, n.address, n.http, n.rack, "yes" if n.live else "no", n.broker_epoch,
             "yes" if n.controller else "") for n in view.nodes]


PARTITION_COLUMNS = ("DATABASE/TOPIC", "VGROUP", "LEADER", "EPOCH", "REPLICAS", "ISR", "UNDER-REPLICATED", "OFFLINE")


def partition_rows(view: ClusterView, under_replicated: bool = False) -> list[tuple[Any, ...]]:
    """A row per vgroup (only the under-replicated ones with ``under_replicated``); a Kafka-native topic's vgroup is
    shown as ``topic:<name>``."""
    return [(f"topic:{p.topic}" if p.topic else p.database or p.db_id, p.vgroup, p.leader, p.leader_epoch,
             _ids(p.replicas), _ids(p.isr), "yes" if p.under_replicated else "no", "yes" if p.offline else "no")
            for p in view.partitions if p.under_replicated or not under_replicated]


# ------------------------------------------------------------------ the shell


def _kvs(response: Any) -> list[tuple[bytes, bytes, int, int]]:
    return [(bytes(kv.key), bytes(kv.value), kv.create_revision, kv.mod_revision) for _, kv in response]


async def read_cluster(endpoints: str, keys: Keys, access: Any, timeout_s: float) -> Read:
    """Every key :class:`Read` holds, in one etcd transaction; :class:`AdminError` when etcd does not answer."""
    from aetcd.utils import prefix_range_end

    from walgate.cluster.etcd import EtcdSession, tx
    from walgate.cluster.model import parse_endpoints

    session = EtcdSession(parse_endpoints(endpoints), timeout=timeout_s, access=access)
    prefixes = (keys.nodes, keys.incarnations, keys.candidates, partitions_prefix(keys), keys.records)
    try:
        responses = await session.read_at_once([*(tx.Get(p, prefix_range_end(p)) for p in prefixes),
                                                 tx.Get(keys.snapshot)])
    except ControlPlaneError as e:
        raise AdminError(f"cannot read the cluster from etcd ({session.describe()}): {e}") from None
    finally:
        await session.close()
    nodes, incarnations, candidates, partitions, records, snapshot = map(_kvs, responses)
    return Read(nodes, incarnations, candidates, partitions, records, snapshot[0][1] if snapshot else None)


def _access(args: argparse.Namespace) -> Any:
    """The :class:`~walgate.cluster.etcd.EtcdAccess` of the command's flags (as ``walgate serve`` takes them)."""
    from walgate.gateway.config import Config, ConfigError
    from walgate.gateway.etcd_access import etcd_access

    password = os.environ.get(PASSWORD_ENV) if args.cluster_etcd_password_file is None else None
    try:
        config = Config(data_dir=Path(), cluster_etcd_endpoints=args.cluster_etcd_endpoints,
                        cluster_name=args.cluster_name, cluster_etcd_ssl_cafile=args.cluster_etcd_ssl_cafile,
                        cluster_etcd_ssl_certfile=args.cluster_etcd_ssl_certfile,
                        cluster_etcd_ssl_keyfile=args.cluster_etcd_ssl_keyfile, cluster_etcd_user=args.cluster_etcd_user,
                        cluster_etcd_password=password if args.cluster_etcd_user is not None else None,
                        cluster_etcd_password_file=args.cluster_etcd_password_file)
        return etcd_access(config)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def _view(args: argparse.Namespace) -> ClusterView:
    keys = Keys(args.cluster_name)
    read = asyncio.run(read_cluster(args.cluster_etcd_endpoints, keys, _access(args), args.timeout))
    try:
        return cluster_view(keys, read)
    except ControlPlaneError as e:
        raise AdminError(str(e)) from None


def status_lines(report: dict[str, Any]) -> list[str]:
    """:func:`health`'s report for people: one ``FIELD: value`` line per field, lists comma-separated, ``-`` for
    none."""
    lines = []
    for field, value in report.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        lines.append(f"{field.replace('_', ' ').upper() + ':':<29} {'-' if shown in ('', None) else shown}")
    return lines


def _status(args: argparse.Namespace) -> None:
    report = health(_view(args))
    if args.json:
        print_json(report)
    else:
        print("\n".join(status_lines(report)))


def _nodes(args: argparse.Namespace) -> None:
    view = _view(args)
    if args.json:
        print_json([asdict(n) for n in view.nodes])
    else:
        print_table(NODE_COLUMNS, node_rows(view))


def _partitions(args: argparse.Namespace) -> None:
    view = _view(args)
    if args.json:
        print_json([asdict(p) for p in view.partitions if p.under_replicated or not args.under_replicated])
    else:
        print_table(PARTITION_COLUMNS, partition_rows(view, args.under_replicated))


COMMANDS = {"status": guarded(_status), "nodes": guarded(_nodes), "partitions": guarded(_partitions)}
"""Each command by name, as ``walgate cluster`` runs it (its flags: :func:`walgate.gateway.cluster_up.add_command`)."""
