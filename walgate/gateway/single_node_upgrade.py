"""A single node's data dir taken into a cluster (issue 26; docs/cluster.md, "A single node's data dir into a cluster").

A data dir ``walgate serve`` used without ``--cluster`` holds a catalog of its own: databases and Kafka-native topics
whose records place nothing (their vgroups are the data dir's), supertables, TDengine topics, users, ACLs, quotas and
configs (:meth:`~walgate.storage.catalog.Catalog.single_node_objects` names them), and its groups' committed offsets
in its group coordinator partitions. When such a data dir first starts as a cluster node, :func:`take_in` runs before
the node registers:

* **The first node of a new cluster** (etcd holds no ``catalog/seq``, no ``catalog/snapshot`` and no
  ``coordinators/placement``): its catalog becomes the cluster's, once. One etcd transaction, on the condition that
  the three keys are still absent, puts ``catalog/snapshot`` at record :data:`TAKEN_SEQ` (every database and topic
  placed on this node, one replica per vgroup, as its vnodes are, and its users, ACLs, quotas and configs:
  :meth:`~walgate.storage.catalog.Catalog.taken_into_cluster`), ``catalog/seq`` and ``coordinators/placement`` (every
  group coordinator partition on this node, so its groups and committed offsets are served where they are); then the
  data dir's catalog is rewritten to say the same (:meth:`~walgate.storage.catalog.Catalog.take_into_cluster`). Other
  nodes read the snapshot as they read any (:class:`~walgate.cluster.records.RecordFollower`). A start that stopped
  between the two steps finds its own snapshot in etcd (byte for byte what it would write) and does the second.
  With ``replication.enable`` (a replicated cluster's group coordinators are ``__consumer_offsets``' leaders, which
  do not read the data dir's coordinator logs), a data dir holding committed offsets is marked between the two
  steps for their import into ``__consumer_offsets`` (:mod:`walgate.storage.offsets_import`).
* **Anything else stops the start** (:class:`ClusterStartError`: exit code 1), before the node registers and with
  nothing written: a cluster that already has a catalog or decided its coordinators (a second single-node data dir
  is not merged into a running cluster: its names may clash, and its groups are in partitions placed elsewhere).

A new data dir, or one that has applied a cluster record (a cluster node's), is not concerned.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from walgate.cluster.coordinators import CoordinatorPlacement
from walgate.cluster.etcd import tx
from walgate.cluster.model import ControlPlaneError, encode_snapshot
from walgate.gateway.cluster_member import ClusterMember, ClusterStartError
from walgate.gateway.shared_catalog import encode_state
from walgate.gateway.storage_thread import StorageThread
from walgate.storage import offsets_import
from walgate.storage.engine import Engine

__all__ = ["TAKEN_SEQ", "take_in"]

log = logging.getLogger("walgate.cluster")

TAKEN_SEQ = 1
"""The record a taken-in catalog's snapshot stands for: the cluster's first appended record is the next."""
_NAMED = 12  # objects named in a message; the rest counted


async def take_in(member: ClusterMember, storage: StorageThread, coordinator: StorageThread, engine: Engine,
                  data_dir: Path, partitions: int, replication: bool) -> None:
    """Take this single node's data dir into the cluster as its first node (module docstring); nothing to do for a
    data dir that holds nothing of its own. Raises :class:`ClusterStartError` when it cannot be (nothing changed) or
    when etcd does not answer (its transaction may have been applied: the next start finds its own snapshot) or the
    import mark cannot be written (the next start writes it);
    ``StorageError`` when the catalog cannot be rewritten (etcd then holds the snapshot, and the next start does the
    rewrite)."""
    objects = await storage.call(engine.catalog.single_node_objects)
    if not objects:
        return
    held = f"data dir {data_dir} holds a single node's catalog ({_named(objects)})"
    groups = await coordinator.call(_committed_groups, engine) if replication else []
    records = await storage.call(engine.catalog.taken_into_cluster)
    snapshot = encode_snapshot(TAKEN_SEQ, encode_state(records))
    keys, session = member.keys, member.session
    placement = CoordinatorPlacement((member.node_id,) * partitions).encode()
    try:
        taken, _ = await session.txn(
            [tx.Version(keys.seq) == 0, tx.Version(keys.snapshot) == 0, tx.Version(keys.coordinator_placement) == 0],
            [tx.Put(keys.snapshot, snapshot), tx.Put(keys.seq, str(TAKEN_SEQ).encode()),
             tx.Put(keys.coordinator_placement, placement)])
        if not taken:  # this data dir's own, by a start that stopped before the catalog below was rewritten?
            kv = await session.get(keys.snapshot)
            taken = kv is not None and bytes(kv.value) == snapshot
    except ControlPlaneError as e:
        raise ClusterStartError(f"cannot reach the cluster's etcd: {e}") from None
    if not taken:
        raise ClusterStartError(
            f"{held}, and cluster {keys.cluster_id!r} has a catalog or group coordinators of its own already: a single "
            "node's data dir is taken into a cluster only as the first node of a new one (docs/cluster.md, \"A single "
            "node's data dir into a cluster\"). Nothing was changed. Start this node on a new data dir, or start this "
            "data dir as the first node of a cluster of its own (another cluster.name, or another etcd)")
    if groups:  # before the rewrite: a start stopped in between finds its snapshot and marks them again
        try:
            await storage.call(functools.partial(offsets_import.mark, data_dir, syncs=engine.syncs))
        except OSError as e:
            raise ClusterStartError(f"{held}: the mark that its committed offsets are to be imported cannot be written "
                                    f"({e}); etcd holds its catalog, the next start writes it") from None
        log.warning("%s: the committed offsets of groups %s are imported into __consumer_offsets once their "
                    "coordinators answer", held, _named(groups))
    await storage.call(engine.catalog.take_into_cluster, TAKEN_SEQ)
    coordinators = ("its groups coordinated by the leaders of __consumer_offsets" if replication
                    else f"its group coordinator partitions on node {member.node_id}")
    log.warning("%s: now the catalog of cluster %r (its databases and topics on node %d, one replica of each vgroup; "
                "%s)", held, keys.cluster_id, member.node_id, coordinators)


def _committed_groups(engine: Engine) -> list[str]:
    """On the coordinator lane: the groups the data dir holds committed offsets of."""
    return sorted({group for group, *_ in engine.store.coordinator.items()})


def _named(items: list[str]) -> str:
    return ", ".join(items[:_NAMED]) + (f" and {len(items) - _NAMED} more" if len(items) > _NAMED else "")
