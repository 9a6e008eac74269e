"""A vnode cut back to a WAL version with every derived state it feeds (replication's follower truncation,
docs/plans/replication-wiring.md step 6).

:func:`truncate_vnode` cuts the WAL and what the vnode derives itself (:meth:`Vnode.truncate_to`: the leader-epoch
cache, the meta store), then what the engine derives from it, in memory and in their files: each topic's offset
index on the vnode (the records of the cut entries forgotten, so the next append gets the offsets a replica that
never had them would), a Kafka-native partition's producer and transaction state (rebuilt from the batches the WAL
keeps, as an open rebuilds it: sequences, epochs, open transactions, aborted list and last stable offset as before
the cut), the log cleaner's dirty point (moved back to the cut, a pass on the vnode ended) and the rendered batches
cached for the cut versions. The high watermark follows from the offset index
(its end) and the WAL's visible version.

Invariant: afterwards, and after a reopen, the derived state equals that of a vnode that only ever had the entries
below the cut. Each derived file is checked against the WAL at open (offset index records past the WAL's end
dropped, a meta store covering past it rebuilt, the epoch cache cut to it, producer state rebuilt from it), so a
crash at any point after the WAL's cut reopens consistent.
"""

from __future__ import annotations

from walgate.storage.batch_cache import BatchCache
from walgate.storage.cleaner import Cleaner
from walgate.storage.errors import StorageError, StorageUnavailable
from walgate.storage.native_topics import NativeTopics
from walgate.storage.store import Store
from walgate.storage.vnode import Vnode

__all__ = ["truncate_vnode"]


def truncate_vnode(store: Store, native: NativeTopics, cleaner: Cleaner, cache: BatchCache, db: str, index: int,
                   version: int, *, high_watermark: int) -> int:
    """Cut vnode ``index`` of database ``db`` back to the WAL entry holding ``version`` and its derived state with
    it (see the module docstring); the version it was cut to. ``high_watermark``: the WAL version below which
    entries are committed (acknowledged, served to consumers: replication's high watermark); a cut below it is
    refused (StorageError, nothing cut). Raises as :meth:`~walgate.storage.vnode.Vnode.truncate_to` does, nothing
    cut unless it says so. A cut whose derived files the disk refused to rewrite raises StorageUnavailable and
    leaves the vnode's WAL refusing appends (:attr:`~walgate.storage.wal.Wal.held`) until a call again (the same
    version, or any) rewrites them: the files then never hold records of cut entries where new ones follow. A cut
    to the WAL's end with nothing held and no epoch starting there is a no-op; one with an epoch starting there (a
    follower that led that epoch briefly and wrote nothing) cuts the epoch cache as any cut does, as Kafka's
    ``UnifiedLog.truncateTo`` does with the log unchanged: else the follower's latest epoch would diverge from the
    leader's on every fetch."""
    vnode = store.local_vnode(db, index)
    if (version == vnode.wal.next_version and vnode.wal.held is None
            and all(e.start_offset < version for e in vnode.epochs.entries)):
        return version
    start = vnode.wal.entry_start(version) if version >= vnode.wal.first_version else version
    if start < high_watermark:
        raise StorageError(f"{vnode.dir}: truncating to version {version} would cut entries below the high watermark "
                           f"(version {high_watermark}), which are committed; nothing was cut")
    held = vnode.wal.held
    vnode.wal.held = f"the truncation to version {start} is unfinished"
    try:
        vnode.truncate_to(start)
    except BaseException:
        if vnode.wal.next_version != start:  # nothing was cut
            vnode.wal.held = held
            raise
        _derived(store, native, cleaner, cache, vnode, start)  # (also when the meta store's rebuild was refused)
        raise
    _derived(store, native, cleaner, cache, vnode, start)
    vnode.wal.held = None
    return start


def _derived(store: Store, native: NativeTopics, cleaner: Cleaner, cache: BatchCache, vnode: Vnode,
             version: int) -> None:
    """The engine's state derived from ``vnode``'s WAL, cut back to ``version``; every part is cut even when the
    disk refuses an offset index's rewrite, the first refusal raised after (StorageUnavailable)."""
    refused: StorageUnavailable | None = None
    topics = store.catalog.topics_of(vnode.db.name)
    for topic in topics:
        idx = store.indexes.get((topic.name, vnode.index))
        if idx is not None:
            try:
                idx.truncate_to(version)
            except StorageUnavailable as exc:
                refused = refused or exc
        if topic.kind == "kafka":
            native.rebuild_producers(topic, vnode)
    cleaner.truncated(vnode, version)
    cache.forget_from({native.views.topic_id(t.name) for t in topics}, vnode.index, version)
    if refused is not None:
        raise refused
