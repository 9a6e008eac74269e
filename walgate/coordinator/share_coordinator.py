"""Share groups' delivery state (KIP-932): share sessions, share-partitions, acknowledgements, and the records that
make them durable.

* Share sessions (Kafka's ``ShareSessionCache``), one per (group, member): ShareFetch epoch 0 opens one (replacing
  the member's old one; the records it holds stay its own until acknowledged or their locks end), each later ShareFetch / ShareAcknowledge carries the session's next epoch (another:
  INVALID_SHARE_SESSION_EPOCH; no session: SHARE_SESSION_NOT_FOUND) and moves it on; epoch -1 closes it, releasing
  the records the member holds. A session's partitions are those its requests named, less the forgotten ones.
* Share-partitions (:class:`~walgate.coordinator.share_partition.SharePartition`), one per (group, topic key,
  partition), created at first use at the log's start (``share.auto.offset.reset=earliest``) or end (``latest``,
  the default), or rebuilt from their durable value. The topic key is opaque here (the gateway passes topic ids, so
  a topic deleted and created again starts afresh).
* Durability: every change other than an acquisition (acknowledgements, releases, expired locks, a new, rebuilt or
  moved partition) marks its partition; :meth:`ShareCoordinator.take_records` hands their values to the caller, who
  queues them as write number *w* and calls :meth:`ShareCoordinator.written` (w), or
  :meth:`ShareCoordinator.rollback` when the call failed before that: every partition changed since the last
  :meth:`written` is put back as it was. The writes become durable after the call (group commit): until
  :meth:`ShareCoordinator.durable` says so, each keeps the partitions as they were before it; when the disk refused
  them, :meth:`ShareCoordinator.refused` puts every partition back as it was before the first write not durable
  (acquisitions made since, durable in no case, are undone with it: those records are delivered again), so nothing
  the disk refused stays and every acknowledgement answered is durable.

* Persisted state (``persisted``: a replicated cluster, where a share-partition's state is kept by the share
  coordinator, the leader of its group's ``__consumer_offsets`` partition, and the share-partition's leader moves):
  a share-partition is used only once its durable state was read (:meth:`ShareCoordinator.unread` names those not
  read yet, :meth:`ShareCoordinator.states_read` takes what was read: a value, or None for no state); until then it
  acquires nothing and is not started at ``share.auto.offset.reset``, as Kafka's share-partition leader initializes
  a share-partition from its persister first. :meth:`ShareCoordinator.forget` drops every group's state of a
  topic-partition whose leadership changed here, to be read again at its next use.
* Sessions of members another node coordinates (a cluster's partition leader: ``members_known`` False) are opened
  for any member id; one that asks nothing here for a member session timeout (``group.share.session.timeout.ms``),
  and at least the group's record lock duration (``share.record.lock.duration.ms``), is closed, releasing what its
  member holds, as its coordinator would have removed the member by then.
* Timers: :meth:`ShareCoordinator.next_expiry` is when :meth:`ShareCoordinator.expire` next has something to do (a
  member's session timing out, a left member's session closing, an unknown member's idle session closing, a lock
  ending), so that its owner can call it then
  rather than waiting for a request; :meth:`ShareCoordinator.take_released` names the share-partitions where records
  became acquirable again (released, expired, their holder gone), whose waiting fetches the owner wakes.

Pure and synchronous: the log (watermarks) and the groups' settings come through :class:`ShareLogs`; time is the
``now_ms`` passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from walgate.coordinator.share_group import ShareGroups
from walgate.coordinator.share_partition import Ack, AckError, Acquired, SharePartition, check_batch, ranges_of

__all__ = ["AckBatch", "PartitionResult", "ReadWant", "ShareCoordinator", "ShareGroupStats", "ShareKey", "ShareLogs",
           "ShareSettings"]

_NO_END = 1 << 63
"""Past every offset."""

ShareKey = tuple[str, str, int]
"""(group id, topic key, partition)."""


@dataclass(frozen=True)
class ShareSettings:
    """A group's ``share.record.lock.duration.ms``, ``share.delivery.count.limit``, ``share.auto.offset.reset``,
    ``share.isolation.level`` (``committed``: read_committed)."""

    lock_ms: int = 30_000
    delivery_limit: int = 5
    reset: str = "latest"
    max_in_flight: int = 2000
    committed: bool = False


class ShareLogs(Protocol):
    def watermarks(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(log start, high watermark) of a topic key's partition; raises when it has none; None when they are not
        known now (the log is read elsewhere: :meth:`ShareCoordinator.reads` says what to read before acquiring)."""

    def settings(self, group_id: str) -> ShareSettings:
        """The group's share settings now."""

    def stable(self, topic: str, partition: int) -> int:
        """The last stable offset of a topic key's partition (read_committed acquires below it)."""


class ReadWant(NamedTuple):
    """What acquiring in one share-partition needs read from its log: its watermarks and, from ``first`` (the first
    record it could acquire; None: nothing), the batches before ``end`` (where its in-flight window ends). ``fresh``:
    it has no state yet; it starts at the log's start or end as ``reset`` (``share.auto.offset.reset``) says, and
    ``end`` is ``max_in_flight`` past that."""

    topic: str
    partition: int
    first: int | None
    end: int
    fresh: bool = False
    reset: str = "latest"


class AckBatch(NamedTuple):
    topic: str
    partition: int
    first: int
    last: int
    types: list[int]


@dataclass
class ShareGroupStats:
    """One share group now (metrics, the web console): its members, the records between its share-partitions' start
    and end offsets (in flight) and those acquired now; records archived and redelivered since the node started."""

    group: str
    members: int = 0
    partitions: int = 0
    in_flight: int = 0
    acquired: int = 0
    archived: int = 0
    redelivered: int = 0


@dataclass
class PartitionResult:
    """One partition's part of a ShareFetch / ShareAcknowledge answer."""

    error: int = ErrorCode.none
    ack_error: int = ErrorCode.none
    ack_message: str | None = None
    acquired: list[Acquired] = field(default_factory=list)
    acked: bool = False


@dataclass
class _Session:
    epoch: int  # the epoch the next request must carry
    partitions: list[tuple[str, int]] = field(default_factory=list)
    left_ms: int | None = None  # when its member left the group (the session waits for its close, a while)
    remote_ms: int | None = None  # a member this node does not know (cluster mode): when it last asked here


class ShareCoordinator:
    """Share sessions and share-partitions of every share group (see the module docstring)."""

    def __init__(self, groups: ShareGroups, logs: ShareLogs, persisted: bool = False) -> None:
        self.groups = groups
        self.logs = logs
        self.persisted = persisted
        self._read: set[ShareKey] = set()  # persisted: keys whose durable state was read (kept while used)
        self.forgotten = 0  # persisted: calls of forget so far (a read begun before one is not taken)
        self.partitions: dict[ShareKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], _Session] = {}
        self._stored: dict[ShareKey, Any] = {}  # durable values not yet rebuilt
        self._undo: dict[ShareKey, SharePartition | None] = {}  # partitions as they were before the unwritten changes
        self._unwritten: list[tuple[int, dict[ShareKey, SharePartition | None]]] = []  # (write, its undo) not durable
        self._cursor = 0  # rotates which partition is served first
        self._released: set[ShareKey] = set()  # partitions with records acquirable again since take_released

    def load(self, values: Mapping[ShareKey, Any]) -> None:
        """The durable values (:meth:`take_records`' values as written); each is rebuilt at its first use."""
        self._stored.update(values)

    def stats(self) -> list[ShareGroupStats]:
        """Every share group with members or share-partitions in memory, by group id."""
        out = {g: ShareGroupStats(g, members=len(group.members)) for g, group in self.groups.groups.items()}
        for (group_id, _, _), sp in self.partitions.items():
            st = out.setdefault(group_id, ShareGroupStats(group_id))
            st.partitions += 1
            st.in_flight += sp.end - sp.start
            st.acquired += sp.acquired()
            st.archived += sp.archived
            st.redelivered += sp.redelivered
        return [out[g] for g in sorted(out)]

    def group_ids(self) -> frozenset[str]:
        """The ids of the share groups: those with members or share-partition state (in memory or durable only)."""
        return frozenset(self.groups.groups).union(k[0] for k in self.partitions).union(k[0] for k in self._stored)

    def has_state(self, group_id: str) -> bool:
        """The group has share-partition state (it consumed, or is consuming)."""
        return any(k[0] == group_id for k in self.partitions) or any(k[0] == group_id for k in self._stored)

    # -- persisted state (module docstring) -----------------------------------------------------------------------

    def unread(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> list[ShareKey]:
        """The keys of the group's ``partitions`` whose durable state must be read before they are used ([] unless
        ``persisted``)."""
        if not self.persisted:
            return []
        keys = [(group_id, topic, partition) for topic, partition in partitions]
        return [k for k in keys if k not in self._read and k not in self.partitions and k not in self._stored]

    def states_read(self, values: Mapping[ShareKey, Any], forgotten: int) -> None:
        """The durable values read of share-partitions (None: no state), by a read begun when :attr:`forgotten` was
        ``forgotten``: none is taken when a leadership changed since (they are read again at their next use); those
        used meanwhile keep what they have."""
        if forgotten != self.forgotten:
            return
        for key, value in values.items():
            if key in self._read or key in self.partitions or key in self._stored:
                continue
            self._read.add(key)
            if value is not None:
                self._stored[key] = value

    def forget(self, topic: str, partition: int) -> None:
        """Drop every group's state of a topic-partition (persisted: its leadership changed here); the durable state
        is read again at the next use, and no write undone later puts it back."""
        def gone(key: ShareKey) -> bool:
            return key[1] == topic and key[2] == partition

        for held in (self.partitions, self._stored, self._undo, *(undo for _, undo in self._unwritten)):
            for key in [k for k in held if gone(k)]:
                del held[key]
        self._read = {k for k in self._read if not gone(k)}
        self._released = {k for k in self._released if not gone(k)}
        self.forgotten += 1

    # -- durability ---------------------------------------------------------------------------------------------

    def _changing(self, key: ShareKey) -> SharePartition:
        """The partition of ``key``, kept as it was for :meth:`rollback` and marked to be written."""
        sp = self.partitions[key]
        if key not in self._undo:
            self._undo[key] = sp.copy()
        return sp

    def take_records(self) -> list[tuple[ShareKey, Any]]:
        """(key, durable value) of every partition changed since the last :meth:`written`; None for one deleted
        (:meth:`drop`)."""
        return [(key, self.partitions[key].to_record() if key in self.partitions else None) for key in self._undo]

    def written(self, write: int = 0) -> None:
        """The records :meth:`take_records` gave were queued as write ``write`` (0: there were none), kept undoable
        until :meth:`durable` covers it."""
        if write and self._undo:
            self._unwritten.append((write, dict(self._undo)))
        self._undo.clear()

    def durable(self, write: int) -> None:
        """Writes up to ``write`` are durable: their changes can no longer be undone."""
        while self._unwritten and self._unwritten[0][0] <= write:
            self._unwritten.pop(0)

    def refused(self) -> None:
        """Every write not durable was refused: put each partition they changed back as it was before the first."""
        before: dict[ShareKey, SharePartition | None] = {}
        for _, undo in self._unwritten:
            for key, sp in undo.items():
                before.setdefault(key, sp)
        self._unwritten.clear()
        self._restore(before)

    def rollback(self) -> None:
        """Put every partition changed since the last :meth:`written` back as it was (its records were refused)."""
        self._restore(self._undo)
        self._undo.clear()

    def _restore(self, before: Mapping[ShareKey, SharePartition | None]) -> None:
        for key, sp in before.items():
            if sp is None:
                self.partitions.pop(key, None)
            else:
                self.partitions[key] = sp

    # -- partitions ---------------------------------------------------------------------------------------------

    def _partition(self, group_id: str, topic: str, partition: int) -> SharePartition | None:
        """The share-partition of the key, rebuilt from its durable value or made at ``share.auto.offset.reset``;
        its start moved up to the log's start. None when it has no state and the log's watermarks are not known
        now."""
        key = (group_id, topic, partition)
        sp = self.partitions.get(key)
        settings = self.logs.settings(group_id)
        marks = self.logs.watermarks(topic, partition)
        if sp is None and key not in self._stored and (marks is None or self.unread(group_id, [(topic, partition)])):
            return None
        if sp is None:
            stored = self._stored.pop(key, None)
            if stored is not None:  # undone to itself (its durable value is not lost with a refused write)
                sp = SharePartition.from_record(stored, settings.lock_ms, settings.delivery_limit,
                                                settings.max_in_flight)
                self._undo.setdefault(key, sp.copy())
            else:
                assert marks is not None  # (returned above otherwise)
                start = marks[0] if settings.reset == "earliest" else marks[1]
                sp = SharePartition(start, settings.lock_ms, settings.delivery_limit, settings.max_in_flight)
                self._undo.setdefault(key, None)
            self.partitions[key] = sp
        sp.lock_ms, sp.delivery_limit = settings.lock_ms, settings.delivery_limit
        if marks is not None and marks[0] > sp.start:
            self._changing(key).move_start(marks[0])
        return sp

    def expire(self, now_ms: int, partitions: Callable[[str], int | None]) -> None:
        """Remove members whose session timed out (releasing what they hold), close the share sessions of members
        that left and did not close them, and release expired locks."""
        for group_id, member_id in self.groups.expire(now_ms, partitions):
            self._member_gone(group_id, member_id)
        for (group_id, member_id), session in list(self.sessions.items()):
            if session.left_ms is not None and session.left_ms + self.logs.settings(group_id).lock_ms <= now_ms:
                self.close(group_id, member_id)
            elif session.remote_ms is not None and session.remote_ms + self._idle_ms(group_id) <= now_ms:
                self.close(group_id, member_id)
        for key, sp in list(self.partitions.items()):
            deadline = sp.next_deadline()
            if deadline is not None and deadline <= now_ms:
                self._changing(key).expire(now_ms)
                self._released.add(key)

    def next_expiry(self) -> int | None:
        """The earliest time :meth:`expire` has something to do (None: nothing will expire)."""
        deadlines = [self.groups.next_deadline()]
        deadlines += [session.left_ms + self.logs.settings(group_id).lock_ms
                      for (group_id, _), session in self.sessions.items() if session.left_ms is not None]
        deadlines += [session.remote_ms + self._idle_ms(group_id)
                      for (group_id, _), session in self.sessions.items() if session.remote_ms is not None]
        deadlines += [sp.next_deadline() for sp in self.partitions.values()]
        known = [d for d in deadlines if d is not None]
        return min(known) if known else None

    def _idle_ms(self, group_id: str) -> int:
        """How long a session of a member another node coordinates may ask nothing here before it is closed: a
        member session timeout, and never less than the group's record lock duration, so that a member working on
        records it holds for as long as their locks allow keeps them."""
        return max(self.groups.session_timeout_ms, self.logs.settings(group_id).lock_ms)

    def take_released(self) -> set[ShareKey]:
        """The share-partitions where records became acquirable again since the last call (cleared)."""
        released, self._released = self._released, set()
        return released

    def _member_gone(self, group_id: str, member_id: str) -> None:
        self.sessions.pop((group_id, member_id), None)
        for key, sp in list(self.partitions.items()):
            if key[0] == group_id and any(r.member == member_id for r in sp.records.values()):
                self._changing(key).release_member(member_id)
                self._released.add(key)

    def member_left(self, group_id: str, member_id: str, now_ms: int) -> None:
        """A member left its group (heartbeat epoch -1). A client closing sends its last acknowledgements with the
        session's close (ShareAcknowledge epoch -1) beside the leaving heartbeat, in either order: while its session
        is open, the records it holds wait for that close, for one record lock duration at most (then
        :meth:`expire` closes it); without one they are released now."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            self._member_gone(group_id, member_id)
        else:
            session.left_ms = now_ms

    def next_deadline(self, keys: Iterable[ShareKey]) -> int | None:
        deadlines = [d for k in keys if k in self.partitions
                     for d in (self.partitions[k].next_deadline(),) if d is not None]
        return min(deadlines) if deadlines else None

    def archive(self, group_id: str, member_id: str, topic: str, partition: int, acquired: list[Acquired],
                gone: list[tuple[int, int]], now_ms: int) -> list[Acquired]:
        """Archive the offset ranges ``gone`` (records of aborted transactions, under read_committed) among what the
        member just acquired; what it still holds of ``acquired``."""
        sp = self._changing((group_id, topic, partition))
        dropped: set[int] = set()
        for first, last in gone:
            for a in acquired:
                low, high = max(first, a.first), min(last, a.last)
                if low <= high:
                    sp.acknowledge(member_id, low, high, [Ack.REJECT], now_ms)
                    dropped.update(range(low, high + 1))
        return list(ranges_of([(o, a.delivery_count) for a in acquired for o in range(a.first, a.last + 1)
                               if o not in dropped]))

    # -- sessions -----------------------------------------------------------------------------------------------

    def session(self, group_id: str, member_id: str, epoch: int, fetch: bool, members_known: bool | None = True,
                now_ms: int = 0) -> tuple[int, str | None]:
        """Check (and move on) the session for a request carrying ``epoch`` at ``now_ms``: (error code, message).
        ``members_known``: the group's members are known here (this node coordinates it); when not (a cluster's
        partition leader), epoch 0 opens a session for any non-empty member id, as Kafka's share-partition leader,
        closed by :meth:`expire` once it asked nothing for a member session timeout (at least a record lock
        duration); None (the cluster's placement of coordinators cannot be read now): known when this node holds
        the group's membership, as its coordinator does (so a fenced member is refused there even then)."""
        key = (group_id, member_id)
        if members_known is None:
            members_known = group_id in self.groups.groups
        if epoch == 0:
            if not fetch:
                return ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session."
            if not (self.groups.is_member(group_id, member_id) if members_known else member_id):
                return ErrorCode.unknown_member_id, None
            # a full session: the request names all its partitions
            self.sessions[key] = _Session(1, remote_ms=None if members_known else now_ms)
            return ErrorCode.none, None
        session = self.sessions.get(key)
        if session is None:
            return ErrorCode.share_session_not_found, None
        if session.remote_ms is not None:
            session.remote_ms = now_ms
        if epoch == -1:
            return ErrorCode.none, None
        if epoch != session.epoch:
            return ErrorCode.invalid_share_session_epoch, f"expected share session epoch {session.epoch}"
        session.epoch = session.epoch + 1 if session.epoch < 0x7FFFFFFF else 1
        return ErrorCode.none, None

    def close(self, group_id: str, member_id: str) -> None:
        """Epoch -1: the session ends and the member's records in its partitions are released."""
        session = self.sessions.pop((group_id, member_id), None)
        for topic, partition in session.partitions if session is not None else ():
            key = (group_id, topic, partition)
            sp = self.partitions.get(key)
            if sp is not None and any(r.member == member_id for r in sp.records.values()):
                self._changing(key).release_member(member_id)
                self._released.add(key)

    def update_session(self, group_id: str, member_id: str, add: Sequence[tuple[str, int]],
                       forget: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """Add and forget partitions of the member's session; its partitions now."""
        session = self.sessions[(group_id, member_id)]
        for tp in add:
            if tp not in session.partitions:
                session.partitions.append(tp)
        session.partitions = [tp for tp in session.partitions if tp not in set(forget)]
        return list(session.partitions)

    # -- acknowledgements and acquisition -----------------------------------------------------------------------

    def acknowledge(self, group_id: str, member_id: str, batches: Sequence[AckBatch], now_ms: int,
                    errors: Callable[[Exception], int]) -> dict[tuple[str, int], PartitionResult]:
        """Apply acknowledgement batches; each partition's outcome (a refused batch refuses its partition's later
        batches too, as Kafka answers one acknowledge error per partition; a partition whose log cannot be read
        answers ``errors(exc)``)."""
        out: dict[tuple[str, int], PartitionResult] = {}
        for b in batches:
            result = out.setdefault((b.topic, b.partition), PartitionResult(acked=True))
            if result.ack_error != ErrorCode.none:
                continue
            try:
                key = (group_id, b.topic, b.partition)
                if key not in self.partitions and key not in self._stored:  # nothing acquired there: no state made
                    self.logs.watermarks(b.topic, b.partition)  # raises for a partition the log does not have
                    check_batch(b.first, b.last, b.types)
                    raise AckError(f"offset {b.first} is not acquired by this member")
                self._partition(group_id, b.topic, b.partition)
                self._changing((group_id, b.topic, b.partition)).acknowledge(member_id, b.first, b.last, b.types,
                                                                            now_ms)
                if Ack.RELEASE in b.types:
                    self._released.add((group_id, b.topic, b.partition))
            except AckError as exc:
                result.ack_error = ErrorCode.invalid_request if exc.invalid_request else ErrorCode.invalid_record_state
                result.ack_message = str(exc)
            except Exception as exc:  # noqa: BLE001 - answered per partition
                result.ack_error = errors(exc)
        return out

    def acquire(self, group_id: str, member_id: str, partitions: Sequence[tuple[str, int]], max_records: int,
                now_ms: int, errors: Callable[[Exception], int],
                cap: Callable[[str, int, int, int], int] | None = None) -> dict[tuple[str, int], PartitionResult]:
        """Acquire up to ``max_records`` records over ``partitions`` for the member, starting at a rotating
        partition so that none starves; a partition whose log cannot be read answers ``errors(exc)``.
        ``cap(topic, partition, first, end)``: the offset (at most ``end``, past which nothing can be acquired now)
        before which records may be acquired in a partition whose first acquirable record is ``first`` (the
        caller's byte budget: whole batches, at least one)."""
        out: dict[tuple[str, int], PartitionResult] = {}
        if not partitions:
            return out
        self._cursor = (self._cursor + 1) % len(partitions)
        order = list(partitions[self._cursor:]) + list(partitions[:self._cursor])
        left = max_records
        for topic, partition in order:
            result = out.setdefault((topic, partition), PartitionResult())
            if left <= 0:
                continue
            try:
                sp = self._partition(group_id, topic, partition)
                marks = self.logs.watermarks(topic, partition)
                if sp is None or marks is None:  # its log was not read for this call: the next reads it
                    continue
                log_end = marks[1]
                if self.logs.settings(group_id).committed:
                    log_end = min(log_end, self.logs.stable(topic, partition))
            except Exception as exc:  # noqa: BLE001 - answered per partition
                result.error = errors(exc)
                continue
            if sp.next_deadline() is not None and sp.next_deadline() <= now_ms:  # type: ignore[operator]
                self._changing((group_id, topic, partition))
                sp.expire(now_ms)
            first = sp.first_available(log_end)
            if first is None:
                continue
            if cap is not None:
                log_end = cap(topic, partition, first, min(log_end, sp.start + sp.max_in_flight))
            result.acquired = sp.acquire(member_id, log_end, left, now_ms)
            left -= sum(a.last - a.first + 1 for a in result.acquired)
        return out

    def reads(self, group_id: str, partitions: Sequence[tuple[str, int]]) -> list[ReadWant]:
        """What :meth:`acquire` over ``partitions`` needs read from their logs now (see :class:`ReadWant`); a
        share-partition with durable state only is rebuilt (unchanged) to say it."""
        settings = self.logs.settings(group_id)
        out = []
        unread = set(self.unread(group_id, partitions))
        for topic, partition in partitions:
            if (group_id, topic, partition) in unread:  # nothing to acquire before its state is read
                continue
            sp = self._loaded((group_id, topic, partition))
            if sp is None:
                out.append(ReadWant(topic, partition, None, settings.max_in_flight, True, settings.reset))
            else:
                out.append(ReadWant(topic, partition, sp.first_available(_NO_END), sp.start + sp.max_in_flight))
        return out

    # -- administration (DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups)

    def state_keys(self, group_id: str) -> list[ShareKey]:
        """The keys of the group's share-partitions that have state (in memory or durable only), sorted."""
        return sorted({k for k in self.partitions if k[0] == group_id} | {k for k in self._stored if k[0] == group_id})

    def state_keys_all(self) -> set[ShareKey]:
        """The keys of every share-partition that has state (in memory or durable only)."""
        return set(self.partitions) | set(self._stored)

    def _loaded(self, key: ShareKey) -> SharePartition | None:
        """The share-partition of ``key`` (rebuilt from its durable value without changing it), None without state."""
        sp = self.partitions.get(key)
        if sp is None and key in self._stored:
            settings = self.logs.settings(key[0])
            sp = SharePartition.from_record(self._stored[key], settings.lock_ms, settings.delivery_limit,
                                            settings.max_in_flight)
            del self._stored[key]
            self.partitions[key] = sp
        return sp

    def summary(self, key: ShareKey) -> tuple[int, int] | None:
        """(start offset, records past it already acknowledged or archived) of a share-partition, None when it has
        no state."""
        sp = self._loaded(key)
        return None if sp is None else (sp.start, sp.done())

    def reset(self, key: ShareKey, start: int) -> None:
        """Start the share-partition of ``key`` afresh at offset ``start`` (AlterShareGroupOffsets): the records
        from ``start`` on are delivered again, none below it (the log's start still bounds it at its next use)."""
        settings = self.logs.settings(key[0])
        if self._loaded(key) is not None:
            self._changing(key)
        else:
            self._undo.setdefault(key, None)
        self.partitions[key] = SharePartition(start, settings.lock_ms, settings.delivery_limit, settings.max_in_flight)

    def drop(self, key: ShareKey) -> None:
        """Delete the state of the share-partition of ``key`` (written as a tombstone, also when its persisted
        state was not read); a later use starts it as ``share.auto.offset.reset`` says."""
        if self._loaded(key) is not None:
            self._changing(key)
            del self.partitions[key]
        elif self.unread(key[0], [key[1:]]):
            self._undo.setdefault(key, None)
            self._read.add(key)

    def drop_sessions(self, group_id: str) -> None:
        """Forget the share sessions of the group (its members are gone: a deleted group)."""
        for key in [k for k in self.sessions if k[0] == group_id]:
            del self.sessions[key]

