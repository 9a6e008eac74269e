"""The mnode catalog: databases, supertables and topics, persisted as a replayed log.

Every change is one JSON line appended to ``catalog.jsonl`` and fsynced
before the statement returns; opening the catalog replays the file through
the same :meth:`Catalog.apply` that live changes use, so live and recovered
state cannot drift. A torn last line (crash while appending) is dropped.

Tables (subtables and normal tables) are not here: they live in the vnode
their name hashes to, created by meta entries of that vnode's WAL
(see vnode.py), as in TDengine.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from walgate.storage.errors import AlreadyExists, InvalidValue, NotFound
from walgate.storage.schema import Column, ColumnType

__all__ = ["Catalog", "DatabaseDef", "StableDef", "TopicDef", "DB_DEFAULTS", "column_to_json", "column_from_json"]

DB_DEFAULTS: dict[str, int | str] = {
    "VGROUPS": 2,
    "PRECISION": "ms",
    "WAL_LEVEL": 1,
    "WAL_FSYNC_PERIOD": 3000,
    "WAL_RETENTION_PERIOD": 604800,
    "WAL_RETENTION_SIZE": -1,
    "WAL_SEGMENT_SIZE": 64,
}
_LIMITS: dict[str, tuple[int, int]] = {
    "VGROUPS": (1, 1024),
    "WAL_LEVEL": (1, 2),
    "WAL_FSYNC_PERIOD": (0, 180000),
    "WAL_RETENTION_PERIOD": (-1, 2**31 - 1),
    "WAL_RETENTION_SIZE": (-1, 2**31 - 1),
    "WAL_SEGMENT_SIZE": (0, 2**20),
}


@dataclass(frozen=True)
class DatabaseDef:
    name: str
    options: dict[str, int | str]
    created_ms: int

    @property
    def vgroups(self) -> int:
        return int(self.options["VGROUPS"])

    @property
    def precision(self) -> str:
        return str(self.options["PRECISION"])


@dataclass(frozen=True)
class StableDef:
    db: str
    name: str
    columns: tuple[Column, ...]
    tags: tuple[Column, ...]
    created_ms: int

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def tag(self, name: str) -> Column | None:
        return next((c for c in self.tags if c.name == name), None)


@dataclass(frozen=True)
class TopicDef:
    """A topic as created; ``sql`` is re-parsed to get the select list / condition."""

    name: str
    kind: str  # database | stable | select | kafka (Kafka-native: produced batches, in a database of its own)
    db: str
    source: str  # stable / table name ("" for database and Kafka-native topics)
    with_meta: bool
    sql: str
    topic_id: str  # stable UUID (Kafka topic id)
    created_ms: int
    configs: dict[str, str] = field(default_factory=dict)  # Kafka topic configs as set (Kafka-native topics)


def column_to_json(c: Column) -> list[Any]:
    return [c.name, c.type.name, c.type.length]


def column_from_json(raw: list[Any]) -> Column:
    return Column(raw[0], ColumnType(raw[1], raw[2]))


@dataclass
class Catalog:
    path: Path
    databases: dict[str, DatabaseDef] = field(default_factory=dict)
    stables: dict[tuple[str, str], StableDef] = field(default_factory=dict)
    topics: dict[str, TopicDef] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> "Catalog":
        cat = cls(path)
        if path.exists():
            lines = path.read_bytes().split(b"\n")
            good = 0
            for line in lines:
                if not line:
                    continue
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    break  # torn last line
                cat.apply(record)
                good += len(line) + 1
            if good < path.stat().st_size:
                os.truncate(path, good)
        return cat

    def _commit(self, record: dict[str, Any]) -> None:
        """Persist then apply one change (fsynced before returning)."""
        with open(self.path, "ab") as f:
            f.write(orjson.dumps(record) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.apply(record)

    def apply(self, r: dict[str, Any]) -> None:
        """Apply one change record: the only way catalog state changes."""
        op = r["op"]
        if op == "create_db":
            self.databases[r["name"]] = DatabaseDef(r["name"], r["options"], r["created_ms"])
        elif op == "drop_db":
            self.databases.pop(r["name"], None)
            self.stables = {k: v for k, v in self.stables.items() if k[0] != r["name"]}
            self.topics = {k: v for k, v in self.topics.items() if v.db != r["name"]}
        elif op in ("create_stable", "alter_stable"):
            cols = tuple(column_from_json(c) for c in r["columns"])
            tags = tuple(column_from_json(c) for c in r["tags"])
            self.stables[(r["db"], r["name"])] = StableDef(r["db"], r["name"], cols, tags, r["created_ms"])
        elif op == "drop_stable":
            self.stables.pop((r["db"], r["name"]), None)
        elif op == "create_topic":
            self.topics[r["name"]] = TopicDef(**{k: v for k, v in r.items() if k != "op"})
        elif op == "drop_topic":
            self.topics.pop(r["name"], None)
        elif op == "alter_kafka_topic":
            topic = self.topics[r["name"]]
            self.topics[r["name"]] = replace(topic, configs=r["configs"])
            old = self.databases[topic.db]
            self.databases[topic.db] = DatabaseDef(old.name, r["options"], old.created_ms)
        elif op == "create_kafka_topic":  # one record: the topic and its database appear together
            self.databases[r["db"]] = DatabaseDef(r["db"], r["options"], r["created_ms"])
            self.topics[r["name"]] = TopicDef(r["name"], "kafka", r["db"], "", False, "", r["topic_id"],
                                              r["created_ms"], r["configs"])
        else:
            raise ValueError(f"unknown catalog record {op!r}")

    # -------------------------------------------------------------- databases

    def database(self, name: str) -> DatabaseDef:
        try:
            return self.databases[name]
        except KeyError:
            raise NotFound(f"Database not exist: {name}") from None

    def create_database(self, name: str, options: dict[str, int | str], now_ms: int) -> DatabaseDef:
        merged = dict(DB_DEFAULTS)
        for key, value in options.items():
            if key == "PRECISION":
                if value not in ("ms", "us", "ns"):
                    raise InvalidValue(f"Invalid option PRECISION {value!r}: expected 'ms', 'us' or 'ns'")
            else:
                lo, hi = _LIMITS[key]
                if not isinstance(value, int) or not lo <= value <= hi:
                    raise InvalidValue(f"Invalid option {key} {value!r}: expected an integer in [{lo}, {hi}]")
            merged[key] = value
        self._commit({"op": "create_db", "name": name, "options": merged, "created_ms": now_ms})
        return self.databases[name]

    def drop_database(self, name: str) -> None:
        self._commit({"op": "drop_db", "name": name})

    # ---------------------------------------------------------------- stables

    def stable(self, db: str, name: str) -> StableDef:
        try:
            return self.stables[(db, name)]
        except KeyError:
            raise NotFound(f"STable not exist: {db}.{name}") from None

    def create_stable(self, st: StableDef) -> None:
        self._commit(
            {
                "op": "create_stable",
                "db": st.db,
                "name": st.name,
                "columns": [column_to_json(c) for c in st.columns],
                "tags": [column_to_json(c) for c in st.tags],
                "created_ms": st.created_ms,
            }
        )

    def alter_stable(self, st: StableDef, columns: tuple[Column, ...], tags: tuple[Column, ...]) -> StableDef:
        new = replace(st, columns=columns, tags=tags)
        self._commit(
            {
                "op": "alter_stable",
                "db": st.db,
                "name": st.name,
                "columns": [column_to_json(c) for c in columns],
                "tags": [column_to_json(c) for c in tags],
                "created_ms": st.created_ms,
            }
        )
        return new

    def drop_stable(self, db: str, name: str) -> None:
        self._commit({"op": "drop_stable", "db": db, "name": name})

    # ----------------------------------------------------------------- topics

    def create_topic(
        self, name: str, kind: str, db: str, source: str, with_meta: bool, sql: str, now_ms: int
    ) -> TopicDef:
        if name in self.topics:
            raise AlreadyExists(f"Topic already exists: {name}")
        self._commit(
            {
                "op": "create_topic",
                "name": name,
                "kind": kind,
                "db": db,
                "source": source,
                "with_meta": with_meta,
                "sql": sql,
                "topic_id": str(uuid.uuid4()),
                "created_ms": now_ms,
            }
        )
        return self.topics[name]

    def create_kafka_topic(
        self, name: str, db: str, options: dict[str, int | str], configs: dict[str, str], now_ms: int
    ) -> TopicDef:
        """A Kafka-native topic and the database holding its partitions (one per vgroup), atomically."""
        if name in self.topics:
            raise AlreadyExists(f"Topic already exists: {name}")
        if db in self.databases:
            raise AlreadyExists(f"Database already exists: {db}")
        merged = {**DB_DEFAULTS, **options}
        self._commit({"op": "create_kafka_topic", "name": name, "db": db, "options": merged, "configs": configs,
                      "topic_id": str(uuid.uuid4()), "created_ms": now_ms})
        return self.topics[name]

    def alter_kafka_topic(self, name: str, options: dict[str, int | str], configs: dict[str, str]) -> None:
        """New configs of a Kafka-native topic and options (VGROUPS, WAL settings) of its database."""
        self._commit({"op": "alter_kafka_topic", "name": name, "options": options, "configs": configs})

    def drop_topic(self, name: str) -> None:
        self._commit({"op": "drop_topic", "name": name})
