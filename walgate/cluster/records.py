"""The catalog record stream in etcd: the controller appends, every node applies in order.

Records are ``catalog/records/<seq>`` keys; ``catalog/seq`` holds the last sequence number. An append
(:meth:`RecordLog.append`) is one controller-fenced transaction per batch that compares ``catalog/seq``'s
``mod_revision``, so sequence order is revision order and no two appends interleave. :meth:`RecordLog.trim` folds
the records up to a sequence number into ``catalog/snapshot`` (the state the controller applied up to there) and
deletes them, in one fenced transaction.

:class:`RecordFollower` applies records in sequence order, each exactly once (:class:`walgate.cluster.model.
RecordCursor`): it watches ``catalog/records/`` from its last applied revision; when etcd has compacted that
revision away, or the stream skips a sequence number (trimmed), or the follower starts with nothing applied, it
reads the snapshot and the records after it, then watches from the revision read. A broken stream (the member
died, etcd restarted) is resumed the same way from the last applied revision.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from walgate.cluster.election import ControllerElection
from walgate.cluster.etcd import EtcdSession, follow_prefix, tx
from walgate.cluster.model import (
    MAX_RECORDS_PER_TXN,
    ControlPlaneError,
    Keys,
    RecordCursor,
    RecordGap,
    decode_record,
    decode_snapshot,
    encode_record,
    encode_snapshot,
)

__all__ = ["RecordLog", "RecordFollower"]

log = logging.getLogger("walgate.cluster")
_CATCH_UP_ATTEMPTS = 5


class RecordLog:
    """The controller's side of the stream."""

    def __init__(self, session: EtcdSession, keys: Keys, election: ControllerElection) -> None:
        self.session = session
        self.keys = keys
        self.election = election

    async def append(self, payloads: list[bytes], also: Callable[[int], list[Any]] | None = None,
                     when: list[Any] | None = None) -> int:
        """Append records (in batches of :data:`MAX_RECORDS_PER_TXN`, each batch all or nothing) and return the
        last one's sequence number; ``also(last seq)``: more operations of the last batch's transaction, ``when``:
        more compares of every batch's (one that fails: nothing written, :class:`ControlPlaneError`). Raises
        :class:`NotController` (this node is not, or no longer, the controller: the batch was not written) or
        :class:`ControlPlaneUnavailable`."""
        last = 0
        for start in range(0, len(payloads), MAX_RECORDS_PER_TXN):
            final = start + MAX_RECORDS_PER_TXN >= len(payloads)
            last = await self._append_batch(payloads[start:start + MAX_RECORDS_PER_TXN], also if final else None,
                                            when or [])
        return last

    async def _append_batch(self, batch: list[bytes], also: Callable[[int], list[Any]] | None,
                            when: list[Any]) -> int:
        for _ in range(2):
            async with self.election.catalog_appends:  # (the controller's own placement writes wait: ControllerElection)
                epoch = self.election.epoch
                kv = await self.session.get(self.keys.seq)
                seq, mod = (int(kv.value), kv.mod_revision) if kv is not None else (0, 0)
                ops = [tx.Put(self.keys.seq, str(seq + len(batch)).encode()),
                       *(also(seq + len(batch)) if also else [])]
                ops += [tx.Put(self.keys.record(seq + 1 + i), encode_record(epoch or 0, p))
                        for i, p in enumerate(batch)]
                ok, _ = await self.election.fenced_txn([tx.Mod(self.keys.seq) == mod, *when], ops)
            if ok:
                return seq + len(batch)
        raise ControlPlaneError("the catalog's sequence number changed under the controller twice (another writer"
                                " appends to catalog/seq), or a compare of the append failed: nothing appended")

    async def trim(self, through_seq: int, state: bytes) -> None:
        """Replace records 1..``through_seq`` by ``state`` (what applying them gives) in ``catalog/snapshot``.
        Refused (:class:`ControlPlaneError`) when record ``through_seq`` is not in the stream."""
        ok, _ = await self.election.fenced_txn(
            [tx.Version(self.keys.record(through_seq)) > 0],
            [tx.Put(self.keys.snapshot, encode_snapshot(through_seq, state)),
             tx.Delete(self.keys.records, self.keys.record(through_seq + 1))])
        if not ok:
            raise ControlPlaneError(f"catalog record {through_seq} is not in the stream (never written, or trimmed"
                                    f" already): nothing trimmed")


class RecordFollower:
    """A node's side of the stream: calls ``apply(seq, epoch, payload)`` for each record in sequence order and
    ``restore(seq, state)`` when it must start over from the snapshot (either may be a coroutine function: the next
    record waits for it); ``cursor`` is where it resumes (what the
    node had applied before, e.g. before a restart)."""

    def __init__(self, session: EtcdSession, keys: Keys, apply: Callable[[int, int, bytes], Awaitable[None] | object],
                 restore: Callable[[int, bytes], Awaitable[None] | object], cursor: RecordCursor | None = None) -> None:
        self.session = session
        self.keys = keys
        self.apply = apply
        self.restore = restore
        self.cursor = cursor or RecordCursor()
        self._changed = asyncio.Event()

    async def wait_applied(self, seq: int) -> None:
        """Return once record ``seq`` is applied."""
        while self.cursor.seq < seq:
            await self._changed.wait()

    async def _apply(self, key: bytes, value: bytes, revision: int) -> None:
        seq = self.keys.record_seq(key)
        if self.cursor.accept(seq, revision):
            epoch, payload = decode_record(value)
            applied = self.apply(seq, epoch, payload)
            if inspect.isawaitable(applied):
                await applied
            self.cursor.advance(seq, revision)
            self._changed.set()
            self._changed = asyncio.Event()

    async def catch_up(self) -> None:
        """Read the snapshot (when it is past the cursor) and every record after the cursor, at one revision."""
        for _ in range(_CATCH_UP_ATTEMPTS):
            snap = await self.session.get(self.keys.snapshot)
            revision, kvs = await self.session.get_prefix(self.keys.records)
            if snap is not None:
                seq, state = decode_snapshot(snap.value)
                if seq > self.cursor.seq:
                    log.info("catalog: restoring the snapshot of records up to %d (applied: %d)", seq, self.cursor.seq)
                    restored = self.restore(seq, state)
                    if inspect.isawaitable(restored):
                        await restored
                    self.cursor.advance(seq, snap.mod_revision)
            try:
                for kv in kvs:
                    await self._apply(kv.key, kv.value, kv.mod_revision)
            except RecordGap as e:
                log.info("catalog: %s; reading again", e)
                continue
            self.cursor.advance(self.cursor.seq, revision)
            self._changed.set()
            self._changed = asyncio.Event()
            return
        raise ControlPlaneError(f"catalog: the snapshot and records kept changing over {_CATCH_UP_ATTEMPTS} reads")

    async def run(self, retry_delay: float = 0.5) -> None:
        """Follow the stream until cancelled (:func:`~walgate.cluster.etcd.follow_prefix`: a compacted start or a
        gap reads the snapshot again, etcd being unreachable is waited out, ``retry_delay`` between tries, and the
        watch resumes from the last applied revision); the records applied stay applied."""
        await follow_prefix(self.session, self.keys.records, start=lambda: self.cursor.revision, read=self.catch_up,
                            on_event=self._on_event, what="catalog", retry_delay=retry_delay, read_again=(RecordGap,))

    async def _on_event(self, event: Any) -> None:
        if event.kind == "PUT":
            await self._apply(event.kv.key, event.kv.value, event.kv.mod_revision)
