"""Committed consumer-group offsets of one vnode (the seed's "progress recorded in the vnode").

``offsets.jsonl`` in the vnode directory is an append-only log of JSON lines,
``{"g": group, "t": topic, "p": partition, "o": offset, "e": leader_epoch,
"m": metadata, "ts": commit time ms}``; ``"o": null`` is a tombstone (offset
deleted). :meth:`CommittedOffsets.commit` appends a whole batch with one
write and fsyncs before returning, so an acknowledged commit survives
``kill -9`` and power loss. Opening replays the log (a torn last line from a
crash is dropped) and rewrites it compacted (tmp file, fsync, rename) when
it holds more superseded lines than live ones.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import orjson

__all__ = ["Committed", "CommittedOffsets"]

log = logging.getLogger("walgate.offsets")

Key = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True)
class Committed:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ms: int


class CommittedOffsets:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._live: dict[Key, Committed] = {}

    @classmethod
    def open(cls, path: Path) -> "CommittedOffsets":
        store = cls(path)
        lines = 0
        if path.exists():
            for line in path.read_bytes().split(b"\n"):
                if not line:
                    continue
                try:
                    store._apply(orjson.loads(line))
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    log.warning("%s: dropping a torn or corrupt line at the end of the offsets log", path)
                    break
                lines += 1
        if lines > 2 * len(store._live) or (path.exists() and lines == 0):
            store._rewrite()
        return store

    def _apply(self, r: dict) -> None:
        key = (r["g"], r["t"], int(r["p"]))
        if r["o"] is None:
            self._live.pop(key, None)
        else:
            self._live[key] = Committed(int(r["o"]), int(r["e"]), r["m"], int(r["ts"]))

    @staticmethod
    def _line(key: Key, c: Committed | None) -> bytes:
        g, t, p = key
        if c is None:
            return orjson.dumps({"g": g, "t": t, "p": p, "o": None}) + b"\n"
        return orjson.dumps({"g": g, "t": t, "p": p, "o": c.offset, "e": c.leader_epoch, "m": c.metadata, "ts": c.commit_ms}) + b"\n"

    def _append(self, records: list[tuple[Key, Committed | None]]) -> None:
        """Write the records with one write, fsync, then apply them."""
        if not records:
            return
        data = b"".join(self._line(k, c) for k, c in records)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        for key, c in records:
            if c is None:
                self._live.pop(key, None)
            else:
                self._live[key] = c

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(self._line(k, c) for k, c in self._live.items()))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def commit(self, group: str, offsets: Iterable[tuple[str, int, Committed]]) -> None:
        """Durably record ``(topic, partition, committed)`` for ``group`` (fsynced before returning)."""
        self._append([((group, t, p), c) for t, p, c in offsets])

    def get(self, group: str, topic: str, partition: int) -> Committed | None:
        return self._live.get((group, topic, partition))

    def delete(self, group: str | None = None, topic: str | None = None, partition: int | None = None) -> int:
        """Delete the offsets matching every given filter; returns how many were deleted."""
        gone = [
            k for k in self._live
            if (group is None or k[0] == group) and (topic is None or k[1] == topic) and (partition is None or k[2] == partition)
        ]
        self._append([(k, None) for k in gone])
        return len(gone)

    def items(self) -> Iterator[tuple[Key, Committed]]:
        return iter(list(self._live.items()))
