"""The transaction coordinator's durable state: one record per transactional id, newest wins.

``transactions.log`` in the data dir is an append-only log of checksummed JSON lines (:mod:`walgate.storage.lines`),
``{"id": transactional id, "txn": {...}}``: the whole state of one transactional id as the coordinator wrote it
(:mod:`walgate.coordinator.transactions` owns its fields; this module only keeps them), or ``"txn": null`` when the
id expired. It is Kafka's ``__transaction_state`` topic on one node.

The log is a :class:`~walgate.storage.keyed_log.KeyedLog`, whose docstring says how it is replayed, appended and
compacted:

* :meth:`TransactionLog.append` writes its records with one write and fsyncs before returning; only then are they
  applied in memory (:attr:`TransactionLog.records`). When the disk refuses the write or the fsync, nothing changes
  and :class:`~walgate.storage.errors.StorageUnavailable` is raised (the coordinator answers a retriable error and
  its state is what the file says).
* Opening replays the log: a torn last line is dropped; damage is reported to the
  :class:`~walgate.storage.damage.DamageLog` (or logged without one) and skipped, and the lines after a bad one
  still count. A missing file holds no transactions (a data dir made before transactions existed has none; the
  first append creates it).
* Compaction: when superseded lines outnumber ``max(live ids, COMPACT_FLOOR)``, at open or after an append.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from walgate.storage import lines
from walgate.storage.damage import DamageLog
from walgate.storage.fileio import SyncLatency
from walgate.storage.keyed_log import KeyedLog

__all__ = ["TransactionLog", "COMPACT_FLOOR", "TRANSACTIONS_LOG", "transaction_line"]

log = logging.getLogger("walgate.transactions")

TRANSACTIONS_LOG: Final = "transactions.log"
"""The file's name in the data dir."""

COMPACT_FLOOR: Final = 1000
"""Superseded lines tolerated before a compaction, whatever the number of live transactional ids."""


def transaction_line(transactional_id: str, state: dict[str, Any] | None) -> bytes:
    """The checksummed line recording *state* (None: the id expired) for *transactional_id*."""
    return lines.encode({"id": transactional_id, "txn": state})


class TransactionLog(KeyedLog[str, dict[str, Any]]):
    """Transactional id -> its newest state (a JSON object), durable (see the module docstring)."""

    WHAT = "transaction log"
    NOT_A_RECORD = "not a transaction record"
    REFUSED = "the transaction state is unchanged"
    logger = log

    @classmethod
    def open(cls, path: Path, damage: DamageLog | None = None, syncs: SyncLatency | None = None) -> TransactionLog:
        """Replay ``path``; never refuses (damage is reported and skipped); its fsyncs are timed into ``syncs`` (the
        engine's)."""
        tlog = cls(path, syncs)
        tlog._replay(damage)
        return tlog

    def _parse(self, record: Any) -> tuple[str, dict[str, Any] | None]:
        tid, txn = record["id"], record["txn"]
        if not isinstance(tid, str) or not (txn is None or isinstance(txn, dict)):
            raise ValueError(f"bad record {record!r}")
        return tid, txn

    def _line(self, key: str, value: dict[str, Any] | None) -> bytes:
        return transaction_line(key, value)

    def _compact_floor(self) -> int:
        return COMPACT_FLOOR

    @property
    def records(self) -> Mapping[str, dict[str, Any]]:
        """Every live transactional id's newest record."""
        return self._live

    def append(self, records: Sequence[tuple[str, dict[str, Any] | None]]) -> None:
        """Durably record ``(transactional id, state or None)`` pairs, then apply them; raises
        :class:`StorageUnavailable`, changing nothing, when the disk refuses the write or its fsync."""
        self._write(records)
