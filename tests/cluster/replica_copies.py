"""Each replica's copy of a replicated database's vgroups, read offline from the data dirs of stopped nodes, as
:class:`history.Replica` operations for the checker's replica-divergence rule (issue 25: "after every run, every
replica's WAL and offset index are compared entry by entry")."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Mapping
from pathlib import Path

from history import Op, Replica

from walgate.storage import hw_checkpoint
from walgate.storage.offsets import OffsetIndex
from walgate.storage.wal import Wal, WalOptions

__all__ = ["replica_copies"]

_END = 1 << 62  # past every version and offset


def replica_copies(data_dirs: Mapping[int, Path], database_id: str, vgroups: int, scratch: Path,
                   key: str = "p{}") -> list[Op]:
    """Node ``n``'s copy (data dir ``data_dirs[n]``, the node stopped) of each of the ``vgroups`` vgroups of the
    database of id ``database_id`` it holds, as partition ``key.format(vgroup)``: its WAL, entry by entry, and its
    topics' offset indexes, record by record, read from copies in ``scratch`` opened as the engine opens them, and
    the high watermark of its checkpoint (0 when it has none)."""
    ops: list[Op] = []
    for node_id, data_dir in sorted(data_dirs.items()):
        for p in range(vgroups):
            vnode = data_dir / "db" / database_id / f"vnode{p}"
            if not vnode.is_dir():  # (a replica moved away: its copy deleted)
                continue
            copy = scratch / f"node{node_id}-vnode{p}"
            if (vnode / "wal").is_dir():
                shutil.copytree(vnode / "wal", copy)
            wal = Wal.open(copy, WalOptions())
            try:
                entries = {e.version: hashlib.sha256(bytes([e.kind]) + e.count.to_bytes(4, "big") + e.body).digest()
                           for e in (wal.read_from(wal.first_version) if wal.segments else ())}
            finally:
                wal.close()
            ops.append(Replica(node_id, key.format(p), hw_checkpoint.read(vnode) or 0, entries,
                               _index_records(vnode, copy.with_name(copy.name + "-topics"))))
    return ops


def _index_records(vnode: Path, scratch: Path) -> dict[tuple[str, int], bytes]:
    """Each record of the offset indexes of vnode directory ``vnode`` (one per topic, ``topics/<topic id>.oidx``),
    opened from copies in ``scratch`` as the engine opens them (the valid prefix): (topic id, the entry's version) ->
    a digest of its offset, count and running maximum timestamp."""
    out: dict[tuple[str, int], bytes] = {}
    for path in sorted((vnode / "topics").glob("*.oidx")):
        scratch.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, scratch / path.name)
        index = OffsetIndex.open(scratch / path.name, _END)
        for offset, version, count, running in index.records_between(0, _END):
            out[(path.stem, version)] = hashlib.sha256(b"%d %d %d" % (offset, count, running)).digest()
    return out
