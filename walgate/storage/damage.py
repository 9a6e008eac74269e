"""Damage found in the data dir: what was quarantined, where it came from and what it cost.

The server always starts (docs/architecture.md, "Fault model"): a file or range that fails its checksum, is truncated or
does not parse is moved aside into ``<data dir>/quarantine/`` (never deleted), everything intact is served, and
each finding becomes one :class:`Damage` record. The records are logged once at WARNING when found, listed by
``SHOW QUARANTINE`` and reported by ``/healthz``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from walgate.storage import fileio
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.fileio import SyncLatency

__all__ = ["Damage", "DamageLog"]

log = logging.getLogger("walgate.damage")


@dataclass(frozen=True)
class Damage:
    """One damaged range: ``file`` (relative to the data dir), its byte range ``[start, end)``, what was done
    (``action``: quarantined / rebuilt / truncated), why (``reason``), the copy kept (``kept``, relative to the data
    dir, "" if none) and the WAL versions lost ``[first_version, end_version)`` (-1, -1 when none or not a WAL)."""

    file: str
    start: int
    end: int
    reason: str
    action: str
    kept: str = ""
    first_version: int = -1
    end_version: int = -1


class DamageLog:
    """Where the components of one data dir report damage and keep the damaged bytes.

    ``report`` copies the bytes into ``<root>/quarantine/`` first (a name derived from the file's path and range and
    the wall time in seconds, never from user input; ``.1``, ``.2``, ... added when another report took that name:
    each report keeps its own copy), logs one WARNING line naming the file, range, versions and reason, and records a
    :class:`Damage`. A component that cannot keep the bytes (the disk is full) still reports, with ``kept`` "".

    Thread-safe: both lanes report into one engine's log (the coordinator lane what its logs' start finds, the
    storage thread the rest), so reports are made one at a time under a lock, each kept copy written whole under its
    own name; ``records`` is only appended to (readers on other threads copy it: ``list(records)``).
    """

    def __init__(self, root: Path, clock: Clock = SYSTEM_CLOCK, syncs: SyncLatency | None = None) -> None:
        self.root = root
        self.syncs = SyncLatency() if syncs is None else syncs  # its engine's fsync times (a log of its own: its own)
        self.clock = clock  # the wall time in a kept copy's name
        self.records: list[Damage] = []  # appended under _lock only
        self._lock = threading.Lock()

    def report(self, path: Path, start: int, end: int, reason: str, action: str, data: bytes = b"",
               first_version: int = -1, end_version: int = -1) -> Damage:
        rel = self._rel(path)
        with self._lock:
            kept = self._keep(rel, start, end, data) if data else ""
            damage = Damage(rel, start, end, reason, action, kept, first_version, end_version)
            versions = f", versions [{first_version}, {end_version})" if first_version >= 0 else ""
            log.warning("damage in %s bytes [%d, %d)%s: %s; %s%s", rel, start, end, versions, reason, action,
                        f" (kept as {kept})" if kept else "")
            self.records.append(damage)
        return damage

    def _keep(self, rel: str, start: int, end: int, data: bytes) -> str:
        """Write ``data`` to a name of its own in the quarantine (under the lock); the name kept, or "" when the disk
        refused it (logged)."""
        qdir = self.root / "quarantine"
        name = f"{rel.replace('/', '__')}.{start}-{end}.{self.clock.time_ns() // 1_000_000_000}"
        target, taken = qdir / name, 0
        try:
            qdir.mkdir(exist_ok=True)
            while target.exists():  # a report of the same range in the same second
                taken += 1
                target = qdir / f"{name}.{taken}"
            fileio.replace_file(target, data, syncs=self.syncs)
        except OSError as exc:
            log.error("could not keep the damaged bytes of %s [%d, %d): %s", rel, start, end, exc)
            return ""
        return self._rel(target)

    def _rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)
