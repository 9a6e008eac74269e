"""The cluster's SQL objects on one node (cluster mode, docs/cluster.md): databases, supertables and TDengine topics
made anywhere in the cluster, followed by each node after it applied their catalog records.

After every record (or snapshot) of the cluster's stream a node applied (:meth:`Engine.apply_shared
<walgate.storage.engine.Engine.apply_shared>`), :meth:`SqlObjects.follow` brings what it serves in line with its
catalog: the vnodes placed on it of a database it does not serve yet are created and opened, a TDengine topic it
does not serve yet is compiled and indexed over them (one of a table whose vgroup is on another node is compiled
there; its partitions here are indexed empty: :class:`~walgate.storage.topics.NoRowsHere`). Dropped databases'
vnodes and dropped topics go in :meth:`NativeTopics.follow_catalog
<walgate.storage.native_topics.NativeTopics.follow_catalog>`, for every kind alike.

ALTER/DROP STABLE also write a meta entry into every vnode of the database (TDengine topics with meta carry it; a
dropped supertable's subtables go with it): each node writes it into its own vnodes when it applies the record; of a
replicated database (``REPLICA n``, issue 25) only into the vnodes it leads now (:meth:`Store.written_vnode
<walgate.storage.store.Store.written_vnode>`), its followers getting the entry by copying the leader's WAL verbatim
(a follower's own write would part its WAL from the leader's; a vgroup with no leader as the record applies gets its
entry from its next leader: :meth:`SqlObjects.take_over`, from the catalog's
:attr:`~walgate.storage.catalog.Catalog.stable_changes`, each entry naming its record, ``of``). Invariant: once
record N is applied, every vnode placed here (led here, of a replicated database, unless its WAL holds N's entry or a
later one's already) has N's meta entry, or the catalog's last
:data:`~walgate.storage.catalog.STABLE_METAS_OP` record names N and the WAL version each vnode's entry goes at. That
record is written before the shared one (:meth:`SqlObjects.before`), the meta entries after it, in one
:meth:`Commits.commit <walgate.storage.commit.Commits.commit>` (all or none under a refused write); a write the disk
refused is taken again (``pending``), and at a restart (:meth:`SqlObjects.recover`) a vnode whose WAL still ends at
the version named lacks the entry (a crash came before it): it is written then. Pure and synchronous, on the storage
thread.
"""

from __future__ import annotations

import logging
from typing import Any

from walgate.storage.catalog import STABLE_METAS_OP, StableDef, stable_meta
from walgate.storage.commit import Commits
from walgate.storage.errors import StorageError
from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.vnode import Vnode

__all__ = ["SqlObjects"]

log = logging.getLogger("walgate.cluster")

_STABLE_CHANGES = ("alter_stable", "drop_stable")


class SqlObjects:
    """A node's following of the cluster's SQL objects (module docstring)."""

    def __init__(self, store: Store, commits: Commits, views: TopicViews) -> None:
        self.store = store
        self.commits = commits
        self.views = views
        # meta entries still to write: (database, meta entry, the vnodes here without it), in order
        self.pending: list[tuple[str, dict[str, Any], set[int]]] = []
        self._last_of: int | None = None  # the record whose entries pending's last item is (made by ``before``)

    def before(self, seq: int, record: dict[str, Any]) -> None:
        """Before shared record ``seq`` is applied: when it is an ALTER/DROP STABLE of a database with vnodes here
        that applies, record where its meta entries go (durably) and make them pending."""
        catalog = self.store.catalog
        if seq <= catalog.shared_seq or record.get("op") not in _STABLE_CHANGES:
            return
        db = catalog.databases.get(record.get("db"))  # type: ignore[arg-type]
        # (a led vnode whose WAL has the entry already: copied from the leader that wrote it before this node led)
        vnodes = [] if db is None else [v for v in self._written(db.name) if v.latest_of is None or v.latest_of < seq]
        if db is None or not vnodes:
            return
        try:
            catalog.validate_shared([record])
        except StorageError:
            return  # passed over by Catalog.apply_shared (a node's own database of the name, ...): no meta entry
        if self.pending and self._last_of == seq:
            self.pending.pop()  # this record's, of an attempt the disk refused (none written): made again below
        self._write_pending()  # an earlier record's entries the disk refused first: the intent below names only this one
        meta = stable_meta(record, seq)
        catalog.commit({"op": STABLE_METAS_OP, "of": seq, "db": db.name, "meta": meta,
                        "next": {str(v.index): v.wal.next_version for v in vnodes}})
        self.pending.append((db.name, meta, {v.index for v in vnodes}))
        self._last_of = seq

    def recover(self) -> None:
        """At start (before any write): the meta entries of the last record applied that a crash left out are
        written (module docstring); when the disk refuses, they stay pending, written after the next record."""
        catalog, intent = self.store.catalog, self.store.catalog.stable_metas
        if intent is None or intent["of"] != catalog.shared_seq or intent["db"] not in catalog.databases:
            return
        here = {v.index: v for v in self._written(intent["db"])}
        missing = {int(i) for i, version in intent["next"].items()
                   if int(i) in here and here[int(i)].wal.next_version == version}
        if missing:
            log.warning("the meta entries of cluster catalog record %d are missing from vnodes %s of database %s (a "
                        "stop came before they were written): written now", intent["of"], sorted(missing),
                        intent["db"])
            self.pending = [(intent["db"], dict(intent["meta"]), missing)]
            try:
                self._write_pending()
            except StorageError as exc:
                log.error("the meta entries of cluster catalog record %d are not written yet: %s", intent["of"],
                          exc.message)

    def follow(self, record: dict[str, Any] | None) -> None:
        """After ``record`` (None: a snapshot) was applied: open what the catalog places here and this node does not
        serve yet (a new database's vnodes; a replica move's, empty, with their TDengine topics' offset indexes),
        give the vnodes of vgroups of one copy a move made replicated their WAL settings (group commit),
        write the pending meta entries (module docstring) and recompile the TDengine topics over the supertables it
        changed. Idempotent: a call the disk refused (raised) is made again."""
        store, catalog = self.store, self.store.catalog
        kafka_dbs = {t.db for t in catalog.topics.values() if t.kind == "kafka"}
        for db in [d for d in catalog.databases.values() if d.name not in kafka_dbs]:
            if db.name not in store.vnodes:
                store.vnodes[db.name] = store.open_database(db)
                continue
            for vnode in store.vnodes[db.name]:  # a vgroup of one copy moved: replicated from now on (issue 26)
                if db.replicated(vnode.index) and not vnode.db.replicated(vnode.index):
                    vnode.reconfigure(db)
            for vnode in store.open_placed(db):  # a replica move's to this node (empty)
                for topic in [t for t in catalog.topics.values() if t.db == db.name and t.name in store.topic_uuids]:
                    self.views.open_partition(topic, vnode)
        for topic in [t for t in catalog.topics.values() if t.kind != "kafka" and t.name not in store.topic_uuids]:
            self.views.offsets.clear_left(topic.name)
            self.views.open_topic(topic)
        self._write_pending()
        if record is None or record.get("op") in _STABLE_CHANGES:
            changed = {record.get("db")} if record is not None else {t.db for t in catalog.topics.values()}
            for db_name in sorted(str(d) for d in changed if d in catalog.databases):
                self._recompile(db_name)

    def dropped_meanwhile(self, before: dict[tuple[str, str], StableDef]) -> None:
        """After a snapshot replaced the catalog's ``before`` supertables: a DROP STABLE's meta entry is pending for
        each one gone (or made again) whose database's vnodes here stay (the stream's records folded into the
        snapshot were never applied here; while this node was away no one wrote to its vnodes, so every subtable of
        that name in them was the old supertable's). Not recorded first: a crash before they are written leaves
        those subtables (docs/cluster.md)."""
        catalog = self.store.catalog
        for (db_name, name), old in sorted(before.items()):
            now = catalog.stables.get((db_name, name))
            vnodes = self.store.vnodes.get(db_name, [])
            db = catalog.databases.get(db_name)
            if (now is None or now.created_ms != old.created_ms) and vnodes and db is not None and all(
                    v.db.id == db.id for v in vnodes):
                self.pending.append((db_name, {"op": "drop_stable", "stable": name, "of": catalog.shared_seq},
                                     {v.index for v in vnodes}))

    def take_over(self, vnode: Vnode) -> int:
        """When this node begins to lead ``vnode`` of a replicated database (on its lane, before anything else is
        written there): append the meta entries of the database's ALTER/DROP STABLE records (the catalog's
        :attr:`~walgate.storage.catalog.Catalog.stable_changes`) after the latest its WAL holds
        (:attr:`Vnode.latest_of <walgate.storage.vnode.Vnode.latest_of>`), in order, each in one commit; how many.
        Its predecessors wrote none of them (a vgroup with no leader as the record applied, a leader's crash between
        the record and its entry, a deposed leader's entry cut as it followed this one); one already in the WAL is
        never written again, and one this node's catalog does not hold yet is written when the record applies
        (:meth:`before`). StorageUnavailable when the disk refuses one: those before it stay (the takeover, retried,
        writes the rest)."""
        db = self.store.catalog.databases.get(vnode.db.name)
        if db is None or db.id != vnode.db.id:
            return 0
        latest = vnode.latest_of
        missing = [meta for seq, meta in self.store.catalog.stable_changes.get(db.name, ())
                   if latest is None or seq > latest]
        for meta in missing:
            log.warning("vnode %d of database %s: the meta entry %s of supertable %s (cluster catalog record %d) is "
                        "not in its WAL: written by its new leader", vnode.index, db.name, meta["op"], meta["stable"],
                        meta["of"])
            self.commits.commit(db, {vnode.index: self.commits.with_meta(db, meta)})
        return len(missing)

    def _write_pending(self) -> None:
        """The pending meta entries, each in one commit (all its vnodes or none); the disk's refusal raised, the
        rest still pending."""
        while self.pending:
            db_name, meta, vnodes = self.pending[0]
            db = self.store.catalog.database(db_name)
            written = {v.index for v in self._written(db_name) if v.index in vnodes}
            if written != vnodes:
                log.warning("meta entry %s of database %s left out of vnodes %s: not led here now (their leader's WAL "
                            "is the replicas')", meta["op"], db_name, sorted(vnodes - written))
            if written:
                self.commits.commit(db, {i: self.commits.with_meta(db, meta) for i in sorted(written)})
            self.pending.pop(0)
        self._last_of = None

    def _written(self, db_name: str) -> list[Vnode]:
        """The vnodes of database ``db_name`` open here that this node writes its meta entries into: all of them, or
        of a replicated database those it leads now (module docstring)."""
        vnodes = self.store.vnodes.get(db_name, [])
        db = self.store.catalog.databases.get(db_name)
        if db is None or not db.any_replicated:
            return vnodes
        return [v for v in vnodes if not db.replicated(v.index) or v.wal.leading]

    def _recompile(self, db: str) -> None:
        """Recompile ``db``'s TDengine topics after a supertable changed (every node asked checks that they still
        compile, from the catalog: :meth:`TopicViews._here <walgate.storage.topic_views.TopicViews._here>`); a topic
        made while the change was on its way that does not keeps its old form, logged, the others follow it."""
        try:
            self.views.recompile(db)
        except StorageError as exc:
            log.error("the topics of database %s could not follow a change of its supertables: %s", db, exc.message)
