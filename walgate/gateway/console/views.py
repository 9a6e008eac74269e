"""What the web console shows, read from the engine and the group coordinator: plain JSON-ready dicts.

Every function here is synchronous and runs on the storage thread (the console's handlers call them through
:meth:`walgate.gateway.storage_thread.StorageThread.call`; the group coordinator's part is read on the coordinator
lane, which the storage thread waits for), so each answer is one consistent snapshot: a topic dropped meanwhile is
either wholly in it or wholly absent. Bytes clients wrote (keys, values, header values) are
returned as text, decoded as UTF-8 with replacement characters; the page shows them with ``textContent`` only.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from typing import Any

from walgate.coordinator.coordinator import GroupCoordinator
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.storage.engine import Engine
from walgate.storage.errors import NotHere
from walgate.storage.partitions import is_lost
from walgate.storage.topics_snapshot import TopicsSnapshot
from walgate.storage.wal import FileRegion
from walgate.wire import WireError, decode_batches

__all__ = ["MAX_SUBTABLES", "MAX_VALUE_BYTES", "databases", "groups", "high_watermarks", "share_groups", "tail",
           "topics"]

MAX_SUBTABLES = 1000
"""Subtables listed per database (the count is always given)."""

MAX_VALUE_BYTES = 16384
"""A tailed key, value or header value longer than this is cut (and marked ``truncated``)."""


def topics(engine: Engine) -> list[dict[str, Any]]:
    """Every topic with, per partition, log start offset, high watermark, and the bytes and segments of the WAL
    holding it (a TDengine topic's is its database's vnode WAL)."""
    partitions: dict[str, list[dict[str, Any]]] = {}
    for s in engine.partitions.stats():
        partitions.setdefault(s.topic, []).append({"partition": s.partition, "log_start": s.log_start,
                                                   "high_watermark": s.high_watermark, "size_bytes": s.size_bytes,
                                                   "segments": s.segments})
    return [{"name": name, "kind": topic.kind, "db": topic.db, "source": topic.source,
             "partitions": sorted(partitions.get(name, []), key=lambda p: p["partition"])}
            for name, topic in sorted(engine.catalog.topics.items())]


def groups(engine: Engine, coordinator: GroupCoordinator) -> list[dict[str, Any]]:
    """Every group (with members or committed offsets): state, type, members and their assignment, and per
    partition it is assigned or has committed: the committed offset, high watermark and lag (high watermark −
    committed; None before the first commit)."""
    parts = engine.partitions
    committed: dict[str, dict[tuple[str, int], int]] = {}
    for group, topic, partition, c in engine.all_committed():
        committed.setdefault(group, {})[(topic, partition)] = c.offset

    def read_coordinator() -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
        """On the coordinator lane (the storage lane waits for it): members and groups."""
        members: dict[str, list[dict[str, Any]]] = {}
        for m in coordinator.consumers():
            members.setdefault(m.group_id, []).append({
                "member_id": m.member_id, "client_id": m.client_id, "host": m.client_host.lstrip("/"),
                "state": m.state, "assignment": {t: list(ps) for t, ps in sorted((m.assignment or {}).items())},
            })
        return members, list(coordinator.list_groups(offset_groups=committed))

    members, listed = engine.on_coordinator_lane(read_coordinator)
    out = []
    for g in sorted(listed, key=lambda g: g["group_id"]):
        group_id = g["group_id"]
        offsets = committed.get(group_id, {})
        keys = set(offsets)
        for member in members.get(group_id, []):
            keys.update((t, p) for t, ps in member["assignment"].items() for p in ps)
        partitions = []
        for topic, p in sorted(keys):
            hwm = parts.offsets(topic, p).high_watermark if parts.has(topic, p) else None
            offset = offsets.get((topic, p))
            lag = None if offset is None or hwm is None else max(hwm - offset, 0)
            partitions.append({"topic": topic, "partition": p, "committed": offset, "high_watermark": hwm,
                               "lag": lag})
        out.append({"group_id": group_id, "state": g["group_state"], "type": g["group_type"],
                    "protocol_type": g["protocol_type"], "members": members.get(group_id, []),
                    "partitions": partitions})
    return out


def share_groups(topics: TopicsSnapshot, shares: ShareCoordinator, listed: set[str]) -> list[dict[str, Any]]:
    """Every share group (with members or share-partitions in memory) not in ``listed``, as :func:`groups` shows a
    group (type ``share``), on the coordinator lane: its members and their assignment, and per share-partition its
    start offset (Kafka's share group offset, as ``committed``), the records in flight and acquired (the high
    watermark and the lag are :func:`high_watermarks`'); ``share``: the group's counts
    (:class:`~walgate.coordinator.share_coordinator.ShareGroupStats`)."""
    out = []
    for st in shares.stats():
        if st.group in listed:
            continue
        described = shares.groups.describe(st.group)
        members = [{"member_id": m["member_id"], "client_id": m["client_id"], "host": m["client_host"].lstrip("/"),
                    "state": "Stable", "assignment": {a["topic_name"]: a["partitions"]
                                                      for a in m["assignment"]["topic_partitions"]}}
                   for m in (described or {}).get("members", [])]
        partitions = []
        for (group, topic_id, p), sp in sorted(shares.partitions.items()):
            topic = topics.topic_name(uuid.UUID(topic_id)) if group == st.group else None
            if topic is None:
                continue
            partitions.append({"topic": topic, "partition": p, "committed": sp.start, "high_watermark": None,
                               "lag": None, "in_flight": sp.end - sp.start, "acquired": sp.acquired()})
        out.append({"group_id": st.group, "state": "Stable" if members else "Empty", "type": "share",
                    "protocol_type": "share", "members": members, "partitions": partitions,
                    "share": {"in_flight": st.in_flight, "acquired": st.acquired, "archived": st.archived,
                              "redelivered": st.redelivered}})
    return out


def high_watermarks(engine: Engine, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`share_groups`' groups with each share-partition's high watermark and lag (high watermark − start
    offset), on the storage lane (None for a partition gone meanwhile)."""
    parts = engine.partitions
    for group in groups:
        for p in group["partitions"]:
            hwm = parts.offsets(p["topic"], p["partition"]).high_watermark if parts.has(p["topic"], p["partition"]) \
                else None
            p["high_watermark"], p["lag"] = hwm, None if hwm is None else max(hwm - p["committed"], 0)
    return groups


def databases(engine: Engine) -> list[dict[str, Any]]:
    """Every database with its options, its supertables and (up to :data:`MAX_SUBTABLES`) its tables; a cluster
    database with a vgroup on another node lists no table (``table_count`` None: its tables are not all here)."""
    out = []
    shown = engine.execute("SHOW DATABASES")
    at = {c[0]: i for i, c in enumerate(shown.columns)}
    for row in shown.rows:
        name, vgroups, precision = row[at["name"]], row[at["vgroups"]], row[at["precision"]]
        stables = [{"name": r[0], "columns": r[3], "tags": r[4]} for r in engine.execute("SHOW STABLES", name).rows]
        try:
            tables: list[Any] | None = engine.execute("SHOW TABLES", name).rows
        except NotHere:
            tables = None
        out.append({
            "name": name, "vgroups": vgroups, "precision": precision, "stables": sorted(stables, key=lambda s: s["name"]),
            "table_count": None if tables is None else len(tables),
            "tables": [{"name": r[0], "stable": r[4] or "", "vgroup": r[5]}
                       for r in sorted(tables or (), key=lambda r: r[0])[:MAX_SUBTABLES]],
        })
    return sorted(out, key=lambda d: d["name"])


def tail(engine: Engine, topic: str, partition: int, limit: int) -> dict[str, Any]:
    """The newest ``limit`` records of a topic-partition (offset, timestamp ms, key, value, headers), oldest first,
    read as a consumer reads them (:meth:`~walgate.storage.partitions.Partitions.read`).

    Records of lost entries (quarantined or failing their checksum) are a gap, as consumers see them; so is a stored
    batch that does not decode."""
    parts = engine.partitions
    offsets = parts.offsets(topic, partition)
    start, end = offsets.log_start, offsets.high_watermark
    first = max(start, end - limit)
    records: list[dict[str, Any]] = []
    for batch in parts.read(topic, partition, first, sys.maxsize, must_one=True, read_committed=False).batches:
        try:
            decoded = decode_batches(batch.read() if isinstance(batch, FileRegion) else batch)
        except WireError:
            continue
        records += [_record(r.offset, r.timestamp, r.key, r.value, r.headers)
                    for b in decoded if not is_lost(b) for r in b.records if first <= r.offset < end]
    return {"topic": topic, "partition": partition, "log_start": start, "high_watermark": end,
            "records": records[-limit:]}


def _record(offset: int, timestamp: int, key: bytes | None, value: bytes | None,
            headers: Sequence[tuple[str, bytes | None]]) -> dict[str, Any]:
    key_text, key_cut = _text(key)
    value_text, value_cut = _text(value)
    shown = [(name, *_text(v)) for name, v in headers]
    return {"offset": offset, "timestamp": timestamp, "key": key_text, "value": value_text,
            "headers": [[name, v] for name, v, _ in shown],
            "truncated": key_cut or value_cut or any(cut for _, _, cut in shown)}


def _text(data: bytes | None) -> tuple[str | None, bool]:
    if data is None:
        return None, False
    return bytes(data[:MAX_VALUE_BYTES]).decode("utf-8", "replace"), len(data) > MAX_VALUE_BYTES
