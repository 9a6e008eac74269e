"""The transaction coordinator (KIP-98, KIP-447, KIP-890): one state machine per transactional id.

Pure and synchronous: no clock (``now_ms`` is passed in), no storage. Every request is decided by a method returning
a :class:`Step`: the error code to answer and, when the state changes, the new :class:`Txn` to make durable. The
caller (``walgate.gateway.kafka.transactions``) writes that record to the transaction log first and only then
:meth:`TransactionCoordinator.apply` s it, the one replay function, which start-up recovery calls with every record
of the log too, so live and recovered state cannot drift.

States (Kafka's ``TransactionState`` names)::

    Empty ──AddPartitions/AddOffsets (v2: Produce, TxnOffsetCommit)──▶ Ongoing ──EndTxn commit──▶ PrepareCommit ──markers, offsets──▶ CompleteCommit
      ▲                                   │  └─EndTxn abort, timeout, InitProducerId (fence)──▶ PrepareAbort ──markers──▶ CompleteAbort
      └──── InitProducerId (epoch bump) ◀─┴──────────────────────────── Complete* ──AddPartitions──▶ Ongoing

* **Empty / CompleteCommit / CompleteAbort**: no transaction. InitProducerId bumps the epoch (fencing the previous
  producer of this id); AddPartitionsToTxn / AddOffsetsToTxn start one.
* **Ongoing**: partitions and groups are added; TxnOffsetCommit keeps offsets pending in the transaction
  (:attr:`Txn.offsets`), seen by nobody until the commit. EndTxn moves it to Prepare*. InitProducerId for the same
  id, or the transaction's timeout, fences the producer: the epoch is bumped and the state becomes PrepareAbort in
  one record (Kafka's in-memory PrepareEpochFence step is folded into it), and InitProducerId answers
  CONCURRENT_TRANSACTIONS, so the client retries and the retry bumps the epoch again.
* **PrepareCommit / PrepareAbort**: decided and durable; the caller writes a marker into every partition, applies
  the pending offsets to the groups (commit only), then :meth:`TransactionCoordinator.complete` moves it to
  Complete*. A restart or a failed marker write leaves it here, and the caller completes it again later
  (markers are idempotent in effect). Requests meanwhile answer CONCURRENT_TRANSACTIONS (retriable).

Transaction version 2 (KIP-890 part 2). What a request does follows its own version, as Kafka's
``TransactionVersion.transactionVersionFor*``: EndTxn v5 and the implicit adds (Produce v12,
TxnOffsetCommit v5: :meth:`TransactionCoordinator.add_partitions` / :meth:`~TransactionCoordinator.add_offsets`
with ``tv=2``, and AddPartitionsToTxn v4+, a broker's add) are version 2, AddPartitionsToTxn v0–v3, AddOffsetsToTxn
and EndTxn v0–v4 version 0 (Kafka's TV_0: KIP-890 part 1 and before). The transaction
keeps the version of its last such request (:attr:`Txn.tv`). Under version 2 every EndTxn bumps the epoch: its
Prepare* record holds the bumped epoch (which the markers carry) and ``last_producer_epoch`` the client's, and an
EndTxn v5 retry names the epoch before the bump; when the epoch is exhausted the Prepare* record holds a new producer
id (:attr:`Txn.next_producer_id`) that the Complete* state takes, at epoch 0. An abort is accepted with no
transaction (Empty, Complete*: an EndTxn v5 abort of nothing bumps the epoch too). The coordinator's own aborts (a
fence by InitProducerId, a timeout) follow the finalized ``transaction.version`` of the node
(:attr:`TransactionCoordinator.transaction_version`): at 2 the fenced epoch is bumped once more by the abort, as
Kafka's ``endTransaction`` does after ``prepareFenceProducerEpoch``. Records written before version 2 existed have no
``tv`` / ``next_pid``: they read as version 0, without a next producer id.

Producer ids and epochs (``TransactionMetadata``): a new transactional id gets a producer id and epoch -1, so its
first InitProducerId answers epoch 0. An exhausted epoch (32766 and up) rotates to a new producer id at epoch 0
(``previous_producer_id`` keeps the old one). KIP-360: an InitProducerId naming its producer id and epoch is
accepted for the current producer id at the current epoch (bump), at the epoch before the last bump (a retry: the
same epoch is answered again) or when the state is new; anything else is PRODUCER_FENCED.

Transactional ids expire after ``transactional.id.expiration.ms`` without a transaction (Empty / Complete*), and an
Ongoing transaction older than its timeout is aborted (:meth:`TransactionCoordinator.expire`). At start,
:meth:`TransactionCoordinator.orphans` names the transactions partitions hold open that no Ongoing or Prepare*
transaction holds, and how to end them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Final

from kio.schema.errors import ErrorCode

__all__ = [
    "DEFAULT_MAX_TIMEOUT_MS", "DEFAULT_ID_EXPIRATION_MS", "DEFAULT_TRANSACTION_VERSION", "MAX_EPOCH",
    "NO_PRODUCER_EPOCH", "Orphan", "PendingOffset", "STATE_NAMES", "Step", "TRANSACTION_VERSIONS",
    "TransactionCoordinator", "Txn", "TxnState", "epoch_exhausted", "merge_proxies", "proxy_part",
]

DEFAULT_MAX_TIMEOUT_MS: Final = 900_000
"""Kafka's ``transaction.max.timeout.ms``."""
DEFAULT_ID_EXPIRATION_MS: Final = 604_800_000
"""Kafka's ``transactional.id.expiration.ms`` (7 days)."""
DEFAULT_TRANSACTION_VERSION: Final = 2
"""The finalized ``transaction.version`` of a new Kafka 4 cluster."""
TRANSACTION_VERSIONS: Final = (0, 2)
"""The (lowest, highest) level of the ``transaction.version`` feature this coordinator supports (Kafka 4's)."""
NO_PRODUCER_EPOCH: Final = -1
_NO_PRODUCER_ID: Final = -1
MAX_EPOCH: Final = 32767
_GUARDED_PRODUCERS: Final = 65_536
"""How many producer ids' last marker the proxy guards remember; a guard older than the last forgotten one is stale
for any producer id not remembered (refused rather than risk holding offsets past their marker)."""


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: the last epochs are kept for the abort markers of a fenced producer."""
    return epoch >= MAX_EPOCH - 1


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


STATE_NAMES: Final = frozenset({s.value for s in TxnState} | {"PrepareEpochFence", "Dead"})
"""Every state name Kafka knows (ListTransactions filters): this coordinator never holds the last two (its fence is
a PrepareAbort record, an expired id is removed)."""

_PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_IDLE = (TxnState.EMPTY, *_COMPLETE)


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """An offset a TxnOffsetCommit gave, applied to ``group`` only if the transaction commits."""

    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


@dataclass(frozen=True, slots=True)
class Txn:
    """One transactional id's whole state (what the log keeps, :meth:`to_record`)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    last_update_ms: int
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # the epoch before the last bump (KIP-360 retries)
    previous_producer_id: int = _NO_PRODUCER_ID  # the producer id before the last rotation
    start_ms: int = -1  # when the last transaction started, kept after it ends; -1 after an InitProducerId (as Kafka)
    partitions: frozenset[tuple[str, int]] = frozenset()
    groups: frozenset[str] = frozenset()
    offsets: tuple[PendingOffset, ...] = field(default=())
    tv: int = 0  # the transaction version of the transaction's last request (0: KIP-890 part 1 and before, 2)
    next_producer_id: int = _NO_PRODUCER_ID  # version 2, Prepare*: the producer id Complete* takes (epoch exhausted)
    proxy: bool = False  # cluster mode: another node coordinates the id; this node, the group's, holds its offsets

    def producer_after(self) -> tuple[int, int]:
        """The (producer id, epoch) the producer holds once this transaction is complete (what EndTxn v5 answers)."""
        if self.next_producer_id != _NO_PRODUCER_ID:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    def to_record(self) -> dict[str, Any]:
        return {
            "pid": self.producer_id, "epoch": self.producer_epoch, "last_epoch": self.last_producer_epoch,
            "prev_pid": self.previous_producer_id, "timeout": self.timeout_ms, "state": self.state.value,
            "start": self.start_ms, "updated": self.last_update_ms,
            "partitions": sorted([t, p] for t, p in self.partitions), "groups": sorted(self.groups),
            "offsets": [[o.group, o.topic, o.partition, o.offset, o.leader_epoch, o.metadata, o.commit_ms]
                        for o in self.offsets],
            "tv": self.tv, "next_pid": self.next_producer_id, **({"proxy": True} if self.proxy else {}),
        }

    @classmethod
    def from_record(cls, tid: str, r: Mapping[str, Any]) -> Txn:
        """The state a :meth:`to_record` wrote (one written before transaction version 2, without ``tv`` and
        ``next_pid``, is a version 0 transaction); ValueError (or KeyError/TypeError) for anything
        else."""
        ints = [r[k] for k in ("pid", "epoch", "last_epoch", "prev_pid", "timeout", "start", "updated")]
        ints += [r.get("tv", 0), r.get("next_pid", _NO_PRODUCER_ID)]
        if any(type(v) is not int for v in ints) or type(r.get("proxy", False)) is not bool:
            raise ValueError(f"not integers: {ints!r}, or proxy not a bool: {r.get('proxy')!r}")
        partitions = frozenset((str(t), int(p)) for t, p in r["partitions"])
        offsets = tuple(PendingOffset(str(g), str(t), int(p), int(o), int(e), str(m), int(ts))
                        for g, t, p, o, e, m, ts in r["offsets"])
        return cls(tid, r["pid"], r["epoch"], r["timeout"], TxnState(r["state"]), r["updated"], r["last_epoch"],
                   r["prev_pid"], r["start"], partitions, frozenset(str(g) for g in r["groups"]), offsets,
                   ints[7], ints[8], r.get("proxy", False))


def proxy_part(txn: Txn, kept: Callable[[str], bool]) -> Txn | None:
    """The part of proxy ``txn`` of the groups ``kept`` is true for (their offsets), None when it holds none: what
    one coordinator partition of a replicated cluster records of offsets held for a transaction."""
    groups = frozenset(g for g in txn.groups if kept(g))
    if not groups:
        return None
    return replace(txn, groups=groups, offsets=tuple(o for o in txn.offsets if o.group in groups))


def merge_proxies(held: Txn | None, part: Txn) -> Txn:
    """``held`` (offsets held for a transaction, from the partitions loaded before) with ``part`` (another
    partition's, :func:`proxy_part`): joined when both are of the same producer id and epoch, else the one written
    last (the other is of a transaction that ended: its coordinator ends one before another starts)."""
    if held is None:
        return part
    if (held.producer_id, held.producer_epoch) != (part.producer_id, part.producer_epoch):
        return part if part.last_update_ms >= held.last_update_ms else held
    return replace(held, groups=held.groups | part.groups, offsets=held.offsets + part.offsets,
                   last_update_ms=max(held.last_update_ms, part.last_update_ms))


@dataclass(frozen=True, slots=True)
class Orphan:
    """Partitions where a producer has a transaction open that the coordinator is not running: the marker to end it
    with (``commit``) at ``epoch``, due at ``due_ms``."""

    producer_id: int
    epoch: int
    commit: bool
    partitions: tuple[tuple[str, int], ...]
    due_ms: int


@dataclass(frozen=True, slots=True)
class Step:
    """A request's decision: the error code to answer, and the new state to make durable first (None: unchanged)."""

    error: int
    txn: Txn | None = None
    producer: tuple[int, int] | None = None  # EndTxn v5 with NONE: the (producer id, epoch) to answer


class TransactionCoordinator:
    """Every transactional id's :class:`Txn` (see the module docstring for the rules)."""

    def __init__(self, max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
                 id_expiration_ms: int = DEFAULT_ID_EXPIRATION_MS,
                 transaction_version: int = DEFAULT_TRANSACTION_VERSION) -> None:
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        self.transaction_version = transaction_version  # the finalized transaction.version (the node's own aborts)
        self.txns: dict[str, Txn] = {}  # the transactional ids this node coordinates
        self.proxies: dict[str, Txn] = {}  # cluster mode: offsets held for another node's transactional ids
        self._markers_seen = 0  # markers for the group coordinator partitions arrived since start (proxy guards)
        self._last_marker: dict[int, int] = {}  # producer id -> the count when its last such marker arrived
        self._forgotten = -1  # the newest count dropped from _last_marker: older guards of unknown ids are stale
        self.kept_apart = False  # the two tables are written to different logs (a replicated cluster's partitions)

    def apply(self, tid: str, txn: Txn | None, proxy: bool = False) -> None:
        """The one replay function: ``txn`` is durable (None: the id expired, or, ``proxy``, the offsets held for it
        were ended). A proxy :class:`Txn` is kept apart from the transactional ids this node coordinates: a node may
        hold another node's offsets of an id and later coordinate that id too (a replicated cluster's coordinators
        move), as Kafka's group coordinator keeps pending offsets apart from the transaction coordinator's state."""
        table = self.proxies if (proxy if txn is None else txn.proxy) else self.txns
        if txn is None:
            table.pop(tid, None)
        else:
            table[tid] = txn

    # ------------------------------------------------------------------ requests

    def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None, now_ms: int,
                         allocate: Callable[[], int]) -> Step:
        """InitProducerId with a transactional id; ``expected``: the (producer id, epoch) of a v3+ request that named
        them (KIP-360); ``allocate`` hands out a new producer id. A NONE step's txn holds the answer."""
        if not tid:
            return Step(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return Step(ErrorCode.invalid_transaction_timeout)
        txn = self.txns.get(tid)
        if txn is None:
            txn = Txn(tid, allocate(), NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY, now_ms)
        if expected is not None and not (
            txn.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == txn.producer_id
            or (expected[0] == txn.previous_producer_id and epoch_exhausted(expected[1]))
        ):
            return Step(ErrorCode.producer_fenced)
        if txn.state in _PREPARE:
            return Step(ErrorCode.concurrent_transactions)
        if txn.state is TxnState.ONGOING:
            return Step(ErrorCode.concurrent_transactions, self._fenced(txn, now_ms))
        idle = dict(state=TxnState.EMPTY, timeout_ms=timeout_ms, last_update_ms=now_ms, start_ms=-1,
                    partitions=frozenset(), groups=frozenset(), offsets=())
        if epoch_exhausted(txn.producer_epoch) and (expected is None or expected[1] == txn.producer_epoch):
            return Step(ErrorCode.none, replace(txn, producer_id=allocate(), producer_epoch=0,
                                                previous_producer_id=txn.producer_id,
                                                last_producer_epoch=NO_PRODUCER_EPOCH if expected is None
                                                else txn.producer_epoch, **idle))  # type: ignore[arg-type]
        if expected is None:
            epoch, last = txn.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == txn.producer_epoch:
            epoch, last = txn.producer_epoch + 1, txn.producer_epoch
        elif expected[1] == txn.last_producer_epoch:  # a retry of the bump whose answer was lost
            epoch, last = txn.producer_epoch, txn.last_producer_epoch
        else:
            return Step(ErrorCode.producer_fenced)
        return Step(ErrorCode.none, replace(txn, producer_epoch=epoch, last_producer_epoch=last,
                                            **idle))  # type: ignore[arg-type]

    def _current(self, tid: str, producer_id: int, epoch: int) -> Txn | int:
        """The txn of a request naming ``producer_id``/``epoch``, or the error refusing it."""
        txn = self.txns.get(tid)
        if not tid:
            return ErrorCode.invalid_request
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if txn.producer_epoch != epoch:
            return ErrorCode.producer_fenced
        if txn.state in _PREPARE:
            return ErrorCode.concurrent_transactions
        return txn

    def _begun(self, txn: Txn, now_ms: int, tv: int, partitions: Iterable[tuple[str, int]] = (),
               groups: Iterable[str] = ()) -> Txn:
        if txn.state is TxnState.ONGOING:
            return replace(txn, partitions=txn.partitions | frozenset(partitions), groups=txn.groups | frozenset(groups),
                           last_update_ms=now_ms, tv=tv)
        return replace(txn, state=TxnState.ONGOING, start_ms=now_ms, last_update_ms=now_ms, tv=tv,
                       partitions=frozenset(partitions), groups=frozenset(groups), offsets=())

    def add_partitions(self, tid: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]],
                       now_ms: int, tv: int = 0) -> Step:
        """AddPartitionsToTxn (the client's form, ``tv`` 0) or a transactional Produce v12 (``tv`` 2, KIP-890 part 2:
        the broker adds the partitions itself): the partitions join the transaction (starting one)."""
        txn = self._current(tid, producer_id, epoch)
        if isinstance(txn, int):
            return Step(txn)
        wanted = frozenset(partitions)
        if txn.state is TxnState.ONGOING and wanted <= txn.partitions and txn.tv == tv:
            return Step(ErrorCode.none)
        return Step(ErrorCode.none, self._begun(txn, now_ms, tv, partitions=wanted))

    def verify(self, tid: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]],
               group_partition: Callable[[str], tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn's verify-only form (KIP-890 part 1): per partition, NONE when it is in the producer's
        ongoing transaction, TRANSACTION_ABORTABLE when not, or the error refusing the producer. With
        ``group_partition`` (cluster mode: a group's coordinator partition, Kafka's ``__consumer_offsets`` one), each
        group in the transaction stands for that partition too, as a group's coordinator verifies a TxnOffsetCommit
        v0–v4 (Kafka's group coordinator asks about the group's offsets partition)."""
        txn = self._current(tid, producer_id, epoch)
        if isinstance(txn, int):
            return {tp: txn for tp in partitions}
        joined = set(txn.partitions) if txn.state is TxnState.ONGOING else set()
        if group_partition is not None and txn.state is TxnState.ONGOING:
            joined.update(group_partition(g) for g in txn.groups)
        return {tp: ErrorCode.none if tp in joined else ErrorCode.transaction_abortable for tp in partitions}

    def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str, now_ms: int, tv: int = 0) -> Step:
        """AddOffsetsToTxn (``tv`` 0) or TxnOffsetCommit v5 (``tv`` 2, KIP-890 part 2: the group joins implicitly):
        the group's offsets may be committed in the transaction (starting one)."""
        txn = self._current(tid, producer_id, epoch)
        if isinstance(txn, int):
            return Step(txn)
        if txn.state is TxnState.ONGOING and group in txn.groups and txn.tv == tv:
            return Step(ErrorCode.none)
        return Step(ErrorCode.none, self._begun(txn, now_ms, tv, groups=(group,)))

    def offset_commit_check(self, tid: str, producer_id: int, epoch: int, group: str) -> int:
        """Whether TxnOffsetCommit may add offsets of ``group``: NONE, or the error refusing every partition
        (TRANSACTION_ABORTABLE for a group not in the ongoing transaction, as Kafka's verification answers it)."""
        txn = self._current(tid, producer_id, epoch)
        if isinstance(txn, int):
            return txn
        if txn.state is not TxnState.ONGOING or group not in txn.groups:
            return ErrorCode.transaction_abortable
        return ErrorCode.none

    def add_offsets_pending(self, tid: str, offsets: Iterable[PendingOffset], now_ms: int,
                            txn: Txn | None = None) -> Txn:
        """The transaction of ``tid`` (checked by :meth:`offset_commit_check`; or ``txn``, its state about to be
        recorded) with ``offsets`` pending: a later offset of a (group, topic, partition) replaces the earlier one."""
        txn = txn or self.txns[tid]
        kept = {(o.group, o.topic, o.partition): o for o in txn.offsets}
        kept.update({(o.group, o.topic, o.partition): o for o in offsets})
        return replace(txn, offsets=tuple(kept.values()), last_update_ms=now_ms)

    def pending_offsets(self, group: str) -> set[tuple[str, int]]:
        """The (topic, partition) of ``group`` whose offsets an Ongoing or Prepare* transaction holds pending (not
        yet committed nor dropped): what OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT."""
        return {(o.topic, o.partition) for t in (*self.txns.values(), *self.proxies.values())
                if t.state is TxnState.ONGOING or t.state in _PREPARE for o in t.offsets if o.group == group}

    def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool, now_ms: int, tv: int = 0,
                allocate: Callable[[], int] | None = None) -> Step:
        """EndTxn: Ongoing → PrepareCommit / PrepareAbort; a retry of a finished one answers NONE. ``tv`` 2 (EndTxn
        v5) follows :meth:`_end_txn_v2`; ``allocate`` hands out the next producer id when the epoch is exhausted."""
        txn = self.txns.get(tid)
        if not tid:
            return Step(ErrorCode.invalid_request)
        if tv >= 2:
            assert allocate is not None
            return self._end_txn_v2(txn, producer_id, epoch, commit, now_ms, allocate)
        if txn is None or txn.producer_id != producer_id:
            return Step(ErrorCode.invalid_producer_id_mapping)
        if txn.producer_epoch != epoch:
            return Step(ErrorCode.producer_fenced)
        if txn.state is TxnState.ONGOING:
            state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return Step(ErrorCode.none, replace(txn, state=state, last_update_ms=now_ms, tv=0))
        same = {TxnState.COMPLETE_COMMIT: (commit, ErrorCode.none), TxnState.COMPLETE_ABORT: (not commit, ErrorCode.none),
                TxnState.PREPARE_COMMIT: (commit, ErrorCode.concurrent_transactions),
                TxnState.PREPARE_ABORT: (not commit, ErrorCode.concurrent_transactions)}.get(txn.state)
        if same is not None and same[0]:
            return Step(same[1])
        return Step(ErrorCode.invalid_txn_state)

    def _end_txn_v2(self, txn: Txn | None, producer_id: int, epoch: int, commit: bool, now_ms: int,
                    allocate: Callable[[], int]) -> Step:
        """EndTxn v5 (Kafka's ``endTransaction`` for version 2). A retry names the epoch before the bump (or, after a
        producer id rotation, the old id at the last usable epoch). Per state, for an abort / a commit of the current
        epoch: Ongoing → Prepare* with the epoch bumped; Empty and Complete* → PrepareAbort of nothing (bumped) /
        INVALID_TXN_STATE. A retry: Complete* of the same outcome answers NONE, Prepare* of the same outcome
        CONCURRENT_TRANSACTIONS, anything else INVALID_TXN_STATE; another epoch is PRODUCER_FENCED."""
        if txn is None:
            return Step(ErrorCode.invalid_producer_id_mapping)
        on_overflow = (txn.producer_id != producer_id and txn.previous_producer_id == producer_id
                       and epoch == MAX_EPOCH - 1 and txn.producer_epoch == 0)
        if txn.producer_id != producer_id and not on_overflow:
            return Step(ErrorCode.invalid_producer_id_mapping)
        on_bump = txn.producer_id == producer_id and txn.producer_epoch == epoch + 1
        retry = on_bump or on_overflow
        current = txn.producer_id == producer_id and txn.producer_epoch == epoch
        if txn.state in _PREPARE:
            valid = on_bump
        elif txn.state in _COMPLETE:
            valid = current or retry
        else:
            valid = current
        if not valid:
            return Step(ErrorCode.producer_fenced)
        outcome = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if retry:
            if txn.state is outcome:
                return Step(ErrorCode.none, producer=(txn.producer_id, txn.producer_epoch))
            if txn.state in _PREPARE and (txn.state is TxnState.PREPARE_COMMIT) == commit:
                return Step(ErrorCode.concurrent_transactions)
            return Step(ErrorCode.invalid_txn_state)
        if txn.state is not TxnState.ONGOING and commit:
            return Step(ErrorCode.invalid_txn_state)
        if txn.state is not TxnState.ONGOING:  # an abort of nothing: it starts now, with nothing to mark
            txn = replace(txn, start_ms=now_ms, partitions=frozenset(), groups=frozenset(), offsets=())
        next_pid = allocate() if epoch_exhausted(txn.producer_epoch) else _NO_PRODUCER_ID
        prepared = replace(txn, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                           producer_epoch=txn.producer_epoch + 1, last_producer_epoch=txn.producer_epoch,
                           next_producer_id=next_pid, tv=2, last_update_ms=now_ms)
        return Step(ErrorCode.none, prepared, prepared.producer_after())

    # ------------------------------------------------------------------ offsets of another node's transaction

    def proxy_guard(self, producer_id: int) -> int:
        """Cluster mode, on the group's coordinator, before asking another node whether a TxnOffsetCommit's group is
        in ``producer_id``'s transaction: the token :meth:`proxy_offsets` takes, stale once a marker of that producer
        id for this node's group coordinator partitions arrived (:meth:`marker_arrived`), as Kafka's verification
        guard stops an append after a marker. Kept in memory only (a guard does not outlive a restart, nor does the
        request that took it), for the last :data:`_GUARDED_PRODUCERS` producer ids whose marker arrived."""
        return self._markers_seen

    def marker_arrived(self, producer_id: int) -> None:
        """A marker of ``producer_id`` for this node's group coordinator partitions (WriteTxnMarkers from the
        transaction's coordinator): every :meth:`proxy_guard` taken for it before is stale."""
        self._markers_seen += 1
        self._last_marker.pop(producer_id, None)  # kept in arrival order: the oldest first
        self._last_marker[producer_id] = self._markers_seen
        if len(self._last_marker) > _GUARDED_PRODUCERS:
            self._forgotten = self._last_marker.pop(next(iter(self._last_marker)))

    def proxy_offsets(self, tid: str, producer_id: int, epoch: int, group: str, offsets: Iterable[PendingOffset],
                      now_ms: int, guard: int) -> Step:
        """Cluster mode, on the group's coordinator: a TxnOffsetCommit of ``tid``, which another node coordinates
        (it answered that ``group`` is in the producer's ongoing transaction, after :meth:`proxy_guard` gave
        ``guard``). A marker of the producer id that arrived since ended that transaction: TRANSACTION_ABORTABLE,
        nothing kept (else the offsets would outlive it). The offsets are kept pending in a proxy :class:`Txn`
        (never listed or timed out here) until that node's marker for the group's coordinator partition ends it
        (:meth:`proxies_ended`), or, past its timeout, that node says the transaction is not open (:meth:`proxies_due`). A proxy of an older epoch of the producer id is replaced (its transaction was ended:
        its coordinator sends the markers before another starts); an older epoch than the proxy's is
        INVALID_PRODUCER_EPOCH."""
        if self._last_marker.get(producer_id, self._forgotten) > guard:
            return Step(ErrorCode.transaction_abortable)
        if tid in self.txns and not self.kept_apart:
            return Step(ErrorCode.invalid_txn_state)  # this node coordinated the id before: it must not be lost
        held = self.proxies.get(tid)
        if held is not None and held.producer_id == producer_id and held.producer_epoch > epoch:
            return Step(ErrorCode.invalid_producer_epoch)
        if held is None or (held.producer_id, held.producer_epoch) != (producer_id, epoch):
            held = Txn(tid, producer_id, epoch, self.max_timeout_ms, TxnState.ONGOING, now_ms, start_ms=now_ms,
                       proxy=True)
        held = replace(held, groups=held.groups | {group})
        return Step(ErrorCode.none, self.add_offsets_pending(tid, offsets, now_ms, held))

    def proxies_ended(self, producer_id: int, epoch: int, groups: Callable[[str], bool]) -> list[Txn]:
        """The proxies a marker of ``producer_id`` at ``epoch`` (or a later one) ends: those of groups for which
        ``groups`` is true (the groups of the coordinator partitions the marker names)."""
        return [t for t in self.proxies.values() if t.producer_id == producer_id
                and t.producer_epoch <= epoch and any(groups(g) for g in t.groups)]

    def proxies_due(self, now_ms: int) -> list[Txn]:
        """The proxies not written to for their timeout (``transaction.max.timeout.ms`` when made): by then their
        coordinator has ended any transaction they belong to, and the group's node asks it whether one is still
        open (a proxy whose marker will never come is dropped)."""
        return [t for t in self.proxies.values() if t.last_update_ms + t.timeout_ms <= now_ms]

    # ------------------------------------------------------------------ completion and timers

    def _fenced(self, txn: Txn, now_ms: int) -> Txn:
        """The ongoing ``txn`` aborted with its epoch bumped (Kafka's ``prepareFenceProducerEpoch``), and, at
        ``transaction.version`` 2, bumped again by the abort (``last_producer_epoch`` the fenced one), as Kafka's
        coordinator writes it: up to :data:`MAX_EPOCH`, which only the abort markers carry (the next InitProducerId
        rotates the producer id)."""
        fenced = min(txn.producer_epoch + 1, MAX_EPOCH)
        if self.transaction_version >= 2:
            return replace(txn, producer_epoch=min(fenced + 1, MAX_EPOCH), last_producer_epoch=fenced,
                           state=TxnState.PREPARE_ABORT, last_update_ms=now_ms, tv=2)
        return replace(txn, producer_epoch=fenced, last_producer_epoch=NO_PRODUCER_EPOCH, state=TxnState.PREPARE_ABORT,
                       last_update_ms=now_ms, tv=0)

    def complete(self, tid: str, now_ms: int) -> Txn:
        """The Complete* state of ``tid``'s Prepare* transaction, once its markers (and offsets) are written: at
        the next producer id, epoch 0, when the Prepare* state names one (Kafka's ``prepareComplete``)."""
        txn = self.txns[tid]
        assert txn.state in _PREPARE, txn.state
        commit = txn.state is TxnState.PREPARE_COMMIT
        state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        pid, epoch = txn.producer_after()
        previous = txn.producer_id if pid != txn.producer_id else txn.previous_producer_id
        return replace(txn, state=state, last_update_ms=now_ms, partitions=frozenset(), groups=frozenset(), offsets=(),
                       producer_id=pid, producer_epoch=epoch, previous_producer_id=previous,
                       next_producer_id=_NO_PRODUCER_ID)

    def preparing(self) -> list[Txn]:
        """Transactions decided but not completed (markers to write)."""
        return [t for t in self.txns.values() if t.state in _PREPARE]

    def expire(self, now_ms: int) -> list[tuple[str, Txn | None]]:
        """What the periodic check writes: ongoing transactions past their timeout aborted with an epoch bump, idle
        transactional ids past ``transactional.id.expiration.ms`` removed (None)."""
        out: list[tuple[str, Txn | None]] = []
        for tid, txn in self.txns.items():  # (a proxy's coordinator, another node, times it out and ends it here)
            if txn.state is TxnState.ONGOING and txn.start_ms + txn.timeout_ms <= now_ms:
                out.append((tid, self._fenced(txn, now_ms)))
            elif txn.state in _IDLE and txn.last_update_ms + self.id_expiration_ms <= now_ms:
                out.append((tid, None))
        return out

    def orphans(self, ongoing: Mapping[int, Iterable[tuple[str, int]]], now_ms: int) -> list[Orphan]:
        """At start, given the partitions where each producer id has a transaction open (rebuilt from the logs): those
        no Ongoing or Prepare* transaction of this coordinator holds.

        A transaction is recorded complete only once its markers are durable (``Engine.write_txn_markers``), and a
        partition joins one only once that is durable, so these come only from damage (a lost or damaged line of
        the transaction log, a disk that lost what it acknowledged): what the transaction decided is not known.

        * A producer id a transactional id owns gets that id's Complete* state's outcome, at once, else an abort,
          at its current epoch (which does not fence it).
        * A producer id no transactional id owns can never commit; Kafka leaves such a transaction hanging. Here it
          is aborted at the last epoch, which fences the producer id, once ``transaction.max.timeout.ms`` has
          passed: by then any timeout it had has expired."""
        owners = {t.producer_id: t for t in self.txns.values()}
        out = []
        for pid, partitions in sorted(ongoing.items()):
            txn = owners.get(pid)
            running = txn.partitions if txn is not None and txn.state not in _IDLE else frozenset()
            stray = tuple(sorted(tp for tp in partitions if tp not in running))
            if not stray:
                continue
            if txn is None:
                out.append(Orphan(pid, MAX_EPOCH, False, stray, now_ms + self.max_timeout_ms))
            else:
                out.append(Orphan(pid, txn.producer_epoch, txn.state is TxnState.COMPLETE_COMMIT, stray, now_ms))
        return out

    # ------------------------------------------------------------------ admin

    def describe(self, tid: str) -> dict[str, Any]:
        """DescribeTransactions' answer for one id (the response's field names; durations and times in ms)."""
        txn = self.txns.get(tid)
        if not tid:
            return {"error_code": ErrorCode.invalid_request, "transactional_id": tid}
        if txn is None:
            return {"error_code": ErrorCode.transactional_id_not_found, "transactional_id": tid}
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(txn.partitions):
            by_topic.setdefault(t, []).append(p)
        return {"error_code": ErrorCode.none, "transactional_id": tid, "transaction_state": txn.state.value,
                "transaction_timeout": txn.timeout_ms, "transaction_start_time": txn.start_ms,
                "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

    def list(self, states: Iterable[str], producer_ids: Iterable[int], min_duration_ms: int,
             now_ms: int, id_pattern: re.Pattern[str] | None = None) -> list[Txn]:
        """ListTransactions: the ids matching every given filter (empty filters match all; ``min_duration_ms`` < 0:
        no duration filter, else only those whose last transaction started more than that long ago, or never, as
        Kafka's ``shouldInclude`` counts it; ``id_pattern``, v2 (KIP-1152): ids the pattern matches whole)."""
        wanted_states, wanted_pids = set(states), set(producer_ids)
        return [t for t in self.txns.values()
                if (not wanted_states or t.state.value in wanted_states)
                and (not wanted_pids or t.producer_id in wanted_pids)
                and (min_duration_ms < 0 or now_ms - t.start_ms > min_duration_ms)
                and (id_pattern is None or id_pattern.fullmatch(t.transactional_id) is not None)]
