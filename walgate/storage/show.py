"""SHOW and DESCRIBE: the catalog, the vnodes' tables, topics, consumers and damage as TDengine-style results."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from walgate.storage.errors import Unsupported
from walgate.storage.group_offsets import GroupOffsets
from walgate.storage.observers import ConsumerRow
from walgate.storage.result import Result
from walgate.storage.schema import Column
from walgate.storage.sql import ast
from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.values import format_timestamp

__all__ = ["Show", "Dnode", "consumers"]

_TOPIC_TYPES = {"database": "db", "stable": "stable", "select": "column", "kafka": "kafka"}


@dataclass(frozen=True)
class Dnode:
    """One row of ``SHOW DNODES``: a node of the cluster (TDengine's dnode) as its node knows it. ``status`` is
    ``ready`` (registered) or ``offline`` (registered once, not now); ``note`` says ``controller`` for the
    controller."""

    id: int
    endpoint: str  # the Kafka endpoint it advertises, host:port ("" when not known)
    status: str
    note: str = ""


def consumers(members: list[ConsumerRow]) -> Result:
    """SHOW CONSUMERS: one row per consumer-group member (the coordinator's ``members``)."""
    cols = [("consumer_id", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192), ("client_id", "VARCHAR", 192),
            ("host", "VARCHAR", 64), ("status", "VARCHAR", 20), ("topics", "VARCHAR", 1024),
            ("assignment", "VARCHAR", 1024), ("last_heartbeat", "TIMESTAMP", 8)]
    rows = [[c.member_id, c.group, c.client_id, c.host, c.state, ",".join(sorted(c.assignment)),
             ";".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(c.assignment.items())),
             format_timestamp(c.last_heartbeat_ms, "ms")] for c in members]
    return Result(cols, rows)


class Show:
    def __init__(self, store: Store, views: TopicViews, offsets: GroupOffsets) -> None:
        self.store = store
        self.views = views
        self.offsets = offsets
        self.dnodes: tuple[Dnode, ...] = ()  # set by the node (the gateway knows the cluster): SHOW DNODES
        # the leader a replicated vgroup's partition state names as this node read it (database id, vgroup -> node
        # id, -1: none), None when no state is read: set by the node's replica manager (SHOW VGROUPS)
        self.leader_of: Callable[[str, int], int | None] = lambda _db_id, _vgroup: None

    def show(self, s: ast.Show, session: str | None) -> Result:
        store = self.store
        what = s.what
        if what == "DATABASES":
            # replica last (added by issue 25): every older column keeps its index for clients that read by position
            cols = [("name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("vgroups", "SMALLINT", 2),
                    ("precision", "VARCHAR", 2),
                    ("wal_level", "TINYINT", 1), ("wal_fsync_period", "INT", 4), ("wal_retention_period", "INT", 4),
                    ("wal_retention_size", "BIGINT", 8), ("wal_segment_size", "BIGINT", 8), ("replica", "TINYINT", 1)]
            rows = [
                [d.name, format_timestamp(d.created_ms, "ms"), d.vgroups, d.precision] +
                [d.options[k] for k in ("WAL_LEVEL", "WAL_FSYNC_PERIOD", "WAL_RETENTION_PERIOD", "WAL_RETENTION_SIZE", "WAL_SEGMENT_SIZE")] +
                [d.replication_factor]
                for d in store.catalog.databases.values()
            ]
            return Result(cols, rows)
        if what == "STABLES":
            db = store.resolve_db(s.db, session)
            cols = [("stable_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("columns", "INT", 4), ("tags", "INT", 4)]
            rows = [[st.name, db.name, format_timestamp(st.created_ms, "ms"), len(st.columns), len(st.tags)]
                    for (d, _), st in store.catalog.stables.items() if d == db.name]
            return Result(cols, rows)
        if what == "TABLES":
            return self.tables(s, session)
        if what == "VGROUPS":
            return self._vgroups(store.resolve_db(s.db, session).name)
        if what == "TOPICS":
            cols = [("topic_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("sql", "VARCHAR", 1024),
                    ("meta", "VARCHAR", 7), ("type", "VARCHAR", 8), ("topic_id", "VARCHAR", 36)]
            rows = [[t.name, t.db, format_timestamp(t.created_ms, "ms"), t.sql, "with" if t.with_meta else "no",
                     _TOPIC_TYPES[t.kind], t.topic_id]
                    for t in store.catalog.topics.values()]
            return Result(cols, rows)
        if what == "CONSUMERS":
            return consumers(store.consumers.consumers())
        if what == "DNODES":
            cols = [("id", "SMALLINT", 2), ("endpoint", "VARCHAR", 134), ("status", "VARCHAR", 10),
                    ("note", "VARCHAR", 256)]
            return Result(cols, [[d.id, d.endpoint, d.status, d.note] for d in self.dnodes])
        if what == "SUBSCRIPTIONS":
            return self.subscriptions(store.consumers.consumers(),
                                      [(g, t, p, c.offset) for g, t, p, c in self.offsets.all()])
        if what == "QUARANTINE":
            return self._quarantine()
        raise Unsupported(f"SHOW {what} is not supported")

    def tables(self, s: ast.Show, session: str | None, here_only: bool = False,
               vgroups: Collection[int] | None = None) -> Result:
        """``SHOW [db.]TABLES``: every table of the database, sorted; ``here_only`` (cluster mode): those of the
        vnodes placed on this node (``vgroups``: exactly those the node asked assigned here, :meth:`Store.vnodes_here
        <walgate.storage.store.Store.vnodes_here>`), else :class:`NotHere` when a vgroup is elsewhere (never a
        partial list)."""
        store = self.store
        db = store.resolve_db(s.db, session)
        cols = [("table_name", "VARCHAR", 192), ("db_name", "VARCHAR", 64), ("create_time", "TIMESTAMP", 8), ("columns", "INT", 4),
                ("stable_name", "VARCHAR", 192), ("vgroup_id", "INT", 4), ("type", "VARCHAR", 21)]
        rows = []
        for vnode in store.vnodes_here(db, vgroups) if here_only else store.all_vnodes(db):
            for t in vnode.tables():
                if t.dropped:
                    continue
                ncols = len(store.columns_of(db, t)) if t.stable is None or (db.name, t.stable) in store.catalog.stables else 0
                rows.append([t.name, db.name, format_timestamp(t.created_ts, db.precision), ncols, t.stable,
                             vnode.index, "CHILD_TABLE" if t.stable else "NORMAL_TABLE"])
        return Result(cols, sorted(rows))

    def _vgroups(self, db_name: str) -> Result:
        """TDengine's ``SHOW VGROUPS``: each vgroup's replicas as the catalog places them, ``v<k>_dnode`` and
        ``v<k>_status`` for each (as many pairs as the database has replicas): ``leader`` for the leader (a
        replicated vgroup's: the one its partition state names, :attr:`leader_of`, none while it has none; else the
        first replica), ``follower`` for the others, when that node is this one or registered now, else
        ``offline``; ``tables`` counts the vgroup's tables where it is open here."""
        db, local = self.store.catalog.database(db_name), self.store.catalog.node_id
        ready = {d.id for d in self.dnodes if d.status == "ready"} | {local}
        open_here = {v.index: v.live_count for v in self.store.vnodes.get(db_name, [])}
        rows = []
        for i in range(db.vgroups):
            replicas = db.replicas_of(i, local)
            named = self.leader_of(db.id, i) if db.replicated(i) else None
            leader = replicas[0] if named is None else named
            rows.append([i, db.name, open_here.get(i)] + [
                x for node in replicas
                for x in (node, ("leader" if node == leader else "follower") if node in ready else "offline")])
        cols = [("vgroup_id", "INT", 4), ("db_name", "VARCHAR", 64), ("tables", "INT", 4)]
        for k in range(1, db.replication_factor + 1):
            cols += [(f"v{k}_dnode", "SMALLINT", 2), (f"v{k}_status", "VARCHAR", 9)]
        return Result(cols, rows)

    def subscriptions(self, members: list[ConsumerRow], offsets: list[tuple[str, str, int, int]]) -> Result:
        """SHOW SUBSCRIPTIONS from the coordinator's ``members`` and committed ``offsets`` (group, topic,
        partition, offset), both read on the coordinator lane first: one row per (topic, group, partition) assigned
        to a member or with a committed offset: the committed offset, the WAL version of the record it points at
        (the next to read) and the lag behind the high watermark (storage lane)."""
        owners: dict[tuple[str, str, int], str] = {}
        for c in members:
            for topic, partitions in c.assignment.items():
                for p in partitions:
                    owners[(topic, c.group, p)] = c.member_id
        committed = {(t, g, p): offset for g, t, p, offset in offsets}
        rows = []
        for key in sorted(set(owners) | set(committed)):
            topic, group, partition = key
            if not self.views.has_partition(topic, partition):
                continue
            start, end = self.views.watermarks(topic, partition)
            offset = committed.get(key)
            version = self.views.version_at(topic, partition, offset) if offset is not None else None
            lag = end - max(offset, start) if offset is not None else None
            rows.append([topic, group, partition, owners.get(key), offset, version, lag])
        cols = [("topic_name", "VARCHAR", 192), ("consumer_group", "VARCHAR", 192), ("vgroup_id", "INT", 4),
                ("consumer_id", "VARCHAR", 192), ("offset", "BIGINT", 8), ("version", "BIGINT", 8), ("lag", "BIGINT", 8)]
        return Result(cols, rows)

    def _quarantine(self) -> Result:
        cols = [("file", "VARCHAR", 256), ("start", "BIGINT", 8), ("end", "BIGINT", 8), ("reason", "VARCHAR", 1024),
                ("action", "VARCHAR", 32), ("kept", "VARCHAR", 256), ("first_version", "BIGINT", 8),
                ("end_version", "BIGINT", 8)]
        rows = [[d.file, d.start, d.end, d.reason, d.action, d.kept, d.first_version, d.end_version]
                for d in self.store.damage_log.records]
        return Result(cols, rows)

    def describe(self, s: ast.Describe, session: str | None) -> Result:
        store = self.store
        db = store.resolve_db(s.name.db, session)
        st = store.catalog.stables.get((db.name, s.name.name))
        fields: list[tuple[Column, str]]
        if st is not None:
            fields = [(c, "") for c in st.columns] + [(t, "TAG") for t in st.tags]
        else:
            t = store.table(db, s.name.name)
            if t.stable is None:
                fields = [(c, "") for c in store.columns_of(db, t)]
            else:
                parent = store.catalog.stable(db.name, t.stable)
                fields = [(c, "") for c in parent.columns] + [(tag, "TAG") for tag in parent.tags]
        cols = [("field", "VARCHAR", 64), ("type", "VARCHAR", 32), ("length", "INT", 4), ("note", "VARCHAR", 8)]
        return Result(cols, [[c.name, c.type.name, c.type.size, note] for c, note in fields])
