"""What the web console's cluster page shows (issue 26, "Seeing it"): every node and every vgroup of a cluster, as
the node asked last read them.

The nodes and the replicated vgroups are :func:`walgate.admin.cluster_status.assembled`'s view, the one
``walgate cluster nodes|partitions`` prints, made here from what the node holds instead of one etcd read: its
membership (:class:`~walgate.gateway.cluster_member.ClusterMember`: live nodes, the ids that ever registered, the
controller; re-read every third of ``broker.session.timeout.ms``), the registered nodes' broker epochs read with it,
and the partition states its replica manager follows (a watch: every change within moments). Besides them the page
lists the vgroups the catalog places with one copy (no partition state: led by their node while it is registered,
offline while it is not) and those of a replicated database whose state this node has not read (none yet: the
controller creates it within a second of the ``CREATE``), and says of each node whether it is caught up: in the ISR,
under the broker epoch it is registered with now (KIP-903), of every vgroup whose state names it a replica
(:func:`~walgate.gateway.replica_status.out_of_isr`, what ``/readyz``'s ``replicas`` check asks of the node itself).

:func:`placed_vgroups` runs on the storage thread (the catalog); :func:`cluster_page` is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from walgate.admin.cluster_status import PartitionView, assembled, partition_name
from walgate.cluster.model import Membership
from walgate.cluster.partition_codec import PartitionId
from walgate.gateway.replica_status import out_of_isr
from walgate.replication.partition import PartitionState
from walgate.storage.engine import Engine

__all__ = ["NO_STATE_EPOCH", "Placed", "cluster_page", "placed_vgroups"]

NO_STATE_EPOCH = -1
"""The leader epoch shown for a replicated vgroup whose partition state was not read (Kafka's unknown epoch)."""


@dataclass(frozen=True)
class Placed:
    """A vgroup as the catalog places it: database ``db_id`` named ``database`` (the Kafka-native ``topic``'s, if
    any), and the nodes holding its ``replicas`` (the preferred leader first)."""

    db_id: str
    database: str
    topic: str | None
    vgroup: int
    replicas: tuple[int, ...]


def placed_vgroups(engine: Engine) -> list[Placed]:
    """Every vgroup of every database of ``engine``'s catalog (on the storage thread)."""
    catalog = engine.catalog
    topics = {t.db: name for name, t in catalog.topics.items() if t.kind == "kafka"}
    return [Placed(db.id, db.name, topics.get(db.name), v, tuple(db.replicas_of(v, catalog.node_id)))
            for db in catalog.databases.values() for v in range(db.vgroups)]


def _unstated(p: Placed, registered: Mapping[int, int]) -> PartitionView:
    """``p`` with no partition state: one copy, led by its node while that node is registered; or replicated, its
    state not read, shown with no leader."""
    if len(p.replicas) == 1:
        live = p.replicas[0] in registered
        return PartitionView(p.database, p.topic, p.db_id, p.vgroup, p.replicas[0] if live else None, 0, p.replicas,
                             p.replicas, (), 1, False, False, not live)
    return PartitionView(p.database, p.topic, p.db_id, p.vgroup, None, NO_STATE_EPOCH, p.replicas, (), (), 1, True,
                         True, True)


def cluster_page(cluster: str, node_id: int, view: Membership, epochs: Mapping[int, int],
                 states: Mapping[PartitionId, PartitionState], placed: Sequence[Placed]) -> dict[str, Any]:
    """The cluster page's JSON of cluster ``cluster`` as node ``node_id`` holds it: its membership ``view``, the
    registered nodes' broker ``epochs``, the partition ``states`` and the catalog's ``placed`` vgroups.

    ``nodes``: :class:`~walgate.admin.cluster_status.NodeView`'s fields, ``caught_up`` and ``catching_up`` (the
    vgroups, ``database/vgroup`` or ``topic/vgroup``, whose state names it a replica outside its ISR); a node down is
    not caught up. ``partitions``: :class:`~walgate.admin.cluster_status.PartitionView`'s fields and ``kind``:
    ``replicated`` (from its state), ``one-copy`` or ``no-state`` (replicated, its state not read here)."""
    shown = assembled(cluster, view, epochs, states, {p.db_id: (p.database, p.topic) for p in placed})
    stated = {(p.db_id, p.vgroup) for p in shown.partitions}
    partitions = [{**asdict(p), "kind": "replicated"} for p in shown.partitions]
    partitions += [{**asdict(_unstated(p, epochs)), "kind": "one-copy" if len(p.replicas) == 1 else "no-state"}
                   for p in placed if (p.db_id, p.vgroup) not in stated]
    partitions.sort(key=lambda p: (p["topic"] or p["database"] or p["db_id"], p["db_id"], p["vgroup"]))
    names = {PartitionId(p.db_id, p.vgroup): partition_name(p) for p in shown.partitions}
    nodes = []
    for n in shown.nodes:
        lagging = [] if n.broker_epoch is None else [names[pid] for pid in out_of_isr(states, n.node_id, n.broker_epoch)]
        nodes.append({**asdict(n), "caught_up": n.live and not lagging, "catching_up": lagging})
    return {"cluster": cluster, "node_id": node_id, "controller": shown.controller, "nodes": nodes,
            "partitions": partitions}
