"""The transaction coordinator's durable state: one record per transactional id, newest wins.

``transactions.log`` in the data dir is an append-only log of checksummed JSON lines (:mod:`walgate.storage.lines`),
``{"id": transactional id, "txn": {...}}``: the whole state of one transactional id as the coordinator wrote it
(:mod:`walgate.coordinator.transactions` owns its fields; this module only keeps them), or ``"txn": null`` when the
id expired. It is Kafka's ``__transaction_state`` topic on one node.

* :meth:`TransactionLog.append` writes its records with one write and fsyncs before returning; only then are they
  applied in memory (:attr:`TransactionLog.records`). When the disk refuses the write or the fsync, the file is cut
  back, nothing changes and :class:`~walgate.storage.errors.StorageUnavailable` is raised (the coordinator answers a
  retriable error and its state is what the file says); the next write starts with a ``\\n``, so it never joins a
  torn tail the cut could not remove.
* Opening replays the log: a torn last line (a crash while appending) is dropped; a last line whose ``\\n`` is
  damaged still counts; a complete line that fails its checksum or is not a record, and bytes after the last
  ``\\n`` that are no torn line, are reported to the :class:`~walgate.storage.damage.DamageLog` (bytes kept) and
  skipped, and the lines after a bad one still count. A missing file holds no transactions (a data dir made
  before transactions existed has none; the first append creates it).
* Compaction: when superseded lines outnumber ``max(live ids, COMPACT_FLOOR)``, at open or after an append, the log
  is rewritten with the live records only (:func:`walgate.storage.fileio.replace_file`: a crash leaves the old file
  or the new one). A failed compaction changes nothing and is tried again after a later append.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.errors import StorageUnavailable

__all__ = ["TransactionLog", "COMPACT_FLOOR", "TRANSACTIONS_LOG"]

log = logging.getLogger("walgate.transactions")

TRANSACTIONS_LOG: Final = "transactions.log"
"""The file's name in the data dir."""

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live transactional ids."""


def _parse(record: Any) -> tuple[str, dict[str, Any] | None]:
    tid, txn = record["id"], record["txn"]
    if not isinstance(tid, str) or not (txn is None or isinstance(txn, dict)):
        raise ValueError(f"bad record {record!r}")
    return tid, txn


class TransactionLog:
    """Transactional id -> its newest state (a JSON object), durable (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._live: dict[str, dict[str, Any]] = {}
        self._lines = 0  # lines in the file (live and superseded)
        self._pad = b""  # b"\n" while the file may end in a torn line

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None) -> TransactionLog:
        """Replay ``path``; never refuses (damage is reported and skipped)."""
        tlog = cls(path)
        data = path.read_bytes() if path.exists() else b""
        scan = lines.scan(data)
        bad = [(b.start, b.end, b.reason, "newline restored" if b.repaired else "skipped") for b in scan.bad]
        for start, end, record in scan.records:
            try:
                tid, txn = _parse(record)
            except (KeyError, TypeError, ValueError) as exc:
                bad.append((start, end, f"not a transaction record: {exc}", "skipped"))
                continue
            tlog._apply(tid, txn)
        tlog._lines = len(scan.records)
        for start, end, reason, action in sorted(bad):
            tlog._report(damage, start, end, reason, action, data[start:end])
        if bad or scan.complete < len(data) or tlog._superseded():
            try:
                tlog._rewrite()
            except OSError as exc:
                log.error("%s: could not rewrite the transaction log: %s", path, exc)
                tlog._pad = b"\n"
        return tlog

    def _report(self, damage: DamageLog | None, start: int, end: int, reason: str, action: str, data: bytes) -> None:
        if damage is None:
            log.warning("%s bytes [%d, %d): %s; %s", self.path, start, end, reason, action)
        else:
            damage.report(self.path, start, end, f"transaction log: {reason}", action, data)

    @property
    def records(self) -> Mapping[str, dict[str, Any]]:
        """Every live transactional id's newest record."""
        return self._live

    def _apply(self, tid: str, txn: dict[str, Any] | None) -> None:
        if txn is None:
            self._live.pop(tid, None)
        else:
            self._live[tid] = txn

    def _superseded(self) -> bool:
        return self._lines - len(self._live) > max(len(self._live), COMPACT_FLOOR)

    def _rewrite(self) -> None:
        fileio.replace_file(self.path, b"".join(lines.encode({"id": t, "txn": x}) for t, x in self._live.items()))
        self._lines = len(self._live)
        self._pad = b""

    def append(self, records: Sequence[tuple[str, dict[str, Any] | None]]) -> None:
        """Durably record ``(transactional id, state or None)`` pairs, then apply them; raises
        :class:`StorageUnavailable`, changing nothing, when the disk refuses the write or its fsync."""
        if not records:
            return
        data = self._pad + b"".join(lines.encode({"id": t, "txn": x}) for t, x in records)
        try:
            fileio.append_file(self.path, data)  # one write, fsynced; cut back on failure
        except OSError as exc:
            self._pad = b"\n"  # in case the cut back failed too
            raise StorageUnavailable(f"The transaction log could not be written ({exc.strerror or exc}): "
                                     "the transaction state is unchanged") from None
        self._pad = b""
        for tid, txn in records:
            self._apply(tid, txn)
        self._lines += len(records)
        if self._superseded():
            try:
                self._rewrite()
            except OSError as exc:  # the records are durable in the uncompacted log; compact after a later one
                log.warning("%s: could not compact the transaction log: %s", self.path, exc)
