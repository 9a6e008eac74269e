"""A single node's committed offsets still to be carried into a replicated cluster's ``__consumer_offsets`` (issue 26;
docs/cluster.md, "A single node's data dir into a cluster").

A replicated cluster's group coordinators are ``__consumer_offsets``' leaders, which never read a data dir's
coordinator logs. When a single node's data dir holding committed offsets becomes the first node of such a cluster
(:mod:`walgate.gateway.single_node_upgrade`), its coordinator logs are kept as they are and this marker is written;
while it is there, each start of the node reads the logs' committed offsets before they are put aside and commits
those of partitions the cluster holds no commit of, through each group's coordinator
(:mod:`walgate.gateway.kafka.offsets_import`), then removes the marker. :func:`to_import` is that rule.

File: ``offsets-import`` in the data dir, one checksummed line (:mod:`walgate.storage.lines`) ``{"import":
"pending"}``, written atomically (:func:`fileio.replace_file <walgate.storage.fileio.replace_file>`). Its presence is
the whole of its meaning: a file whose bytes do not verify still says the import is pending (an import is repeated
harmlessly: it never replaces a commit the cluster holds), so damage cannot lose the import nor stop the start.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from walgate.storage import fileio, lines
from walgate.storage.coordinator_log import Committed
from walgate.storage.fileio import SyncLatency

__all__ = ["IMPORT_FILE", "done", "mark", "pending", "to_import"]

IMPORT_FILE = "offsets-import"

OffsetsOf = dict[str, dict[tuple[str, int], Committed]]
"""Committed offsets by group: (topic, partition) -> the commit."""


def mark(data_dir: Path, *, syncs: SyncLatency) -> None:
    """Record, durably, that the data dir's committed offsets are to be imported; OSError when the disk refuses (the
    marker is then absent or whole)."""
    fileio.replace_file(data_dir / IMPORT_FILE, lines.encode({"import": "pending"}), syncs=syncs)


def pending(data_dir: Path) -> bool:
    """Whether the import is still to be done (the marker exists, whatever its bytes)."""
    return (data_dir / IMPORT_FILE).exists()


def done(data_dir: Path, *, syncs: SyncLatency) -> None:
    """Remove the marker, durably (its directory fsynced); OSError when the disk refuses (it is then repeated at the
    next start)."""
    fileio.unlink(data_dir / IMPORT_FILE, missing_ok=True)
    fileio.fsync_dir(data_dir, syncs=syncs)


def by_group(items: Iterable[tuple[str, str, int, Committed]]) -> OffsetsOf:
    """The coordinator logs' committed offsets (:meth:`CoordinatorPartitions.items
    <walgate.storage.coordinator_partitions.CoordinatorPartitions.items>`) by group."""
    out: OffsetsOf = {}
    for group, topic, partition, committed in items:
        out.setdefault(group, {})[(topic, partition)] = committed
    return out


def to_import(old: Mapping[tuple[str, int], Committed],
              now: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], Committed]:
    """Of a group's ``old`` commits, those to commit now: each of a partition the cluster holds no commit of
    (``now``: its committed offset per partition as the group's coordinator answers, -1 for none, absent for a
    partition it did not answer for): a commit the cluster holds is newer than the single node's (made by a consumer
    since), and one a previous start imported is not made twice."""
    return {tp: c for tp, c in old.items() if now.get(tp) == -1}
