"""A follower vnode's appends of its leader's WAL entries, and everything derived from them.

A local write appends to a vnode's WAL and then derives, from what it appended: the tables of its meta entries
(the vnode's meta store), each topic's offset index over the vnode (TDengine topics by evaluating the entries,
Kafka-native ones by their batches' offsets), and a Kafka-native partition's producer and transaction state. A
follower appends the leader's entries byte for byte (:meth:`~walgate.storage.vnode.Vnode.append_replicated`) and
derives the same things from them here, by the same functions a restart rebuilds them with
(:meth:`~walgate.storage.topic_views.TopicViews.index`, :func:`~walgate.storage.native_topics.replay_batch`), so
that a follower's derived files are those a restart would rebuild: evaluation is deterministic, and the entries are
the leader's own. Library code for the replica fetcher (docs/plans/replication-wiring.md, step 4).

A vnode restored from a snapshot (:attr:`Vnode.restoring <walgate.storage.vnode.Vnode.restoring>`,
docs/plans/vnode-snapshot.md) appends the entries below the snapshot's end ``L`` as they are and derives nothing
from them (the snapshot's meta store and offset index records hold their effect); from ``L`` on, as above; once its
WAL reaches ``L`` and that is derived, its restoring marker is removed.
"""

from __future__ import annotations

from walgate.storage.native_topics import replay_batch
from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.vnode import Vnode
from walgate.storage.wal import KIND_KAFKA

__all__ = ["append_replicated"]


def append_replicated(store: Store, views: TopicViews, vnode: Vnode, raw: bytes, first_version: int,
                      epoch: int) -> int:
    """Append the leader's entries ``raw`` (whole batches from WAL version ``first_version``, of leader ``epoch``)
    to ``vnode`` of ``store`` as they are, then advance every topic's offset index over the vnode and, for a
    Kafka-native topic, its partition's producer state; the vnode's next version. Raises what
    :meth:`Vnode.append_replicated` raises (EntriesRefused, with nothing written, also for a Kafka batch whose base
    offset is below the partition's next offset; StorageUnavailable), before anything is derived."""
    topics = store.catalog.topics_of(vnode.db.name)
    native = [store.indexes[(t.name, vnode.index)] for t in topics if t.kind == "kafka"]
    below = -1 if vnode.restoring is None else vnode.restoring[1]
    checked = vnode.append_replicated(raw, first_version, epoch, native[0].end_offset if native else None)
    derived = [c for c in checked if c.entry.version >= below]
    if derived and topics:
        views.index(vnode, [c.decoded for c in derived], vnode.wal.next_version, [t.name for t in topics])
    if vnode.restoring is not None and vnode.wal.next_version >= below:
        vnode.restored()
    if not derived or not topics:
        return vnode.wal.next_version
    for topic in topics:
        producers = store.producers.get((topic.name, vnode.index)) if topic.kind == "kafka" else None
        if producers is not None:
            for c in derived:
                if c.entry.kind == KIND_KAFKA:
                    replay_batch(producers, c.entry.body)
    return vnode.wal.next_version
