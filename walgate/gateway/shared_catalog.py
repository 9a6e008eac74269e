"""The cluster's shared catalog (cluster mode, docs/cluster.md): users, ACLs, client quotas, broker and group
configs, Kafka-native topics and SQL databases, supertables and TDengine topics, one for every node.

A change made on any node is staged by its engine (:meth:`walgate.storage.engine.Engine.staged`: validated against
the node's catalog, then undone) and handed to :meth:`SharedCatalog.publish`, which

* on the controller, appends it to the cluster's record stream (:class:`~walgate.cluster.records.RecordLog`, one
  fenced etcd transaction) after checking it against the controller's catalog caught up with the whole stream (so
  two nodes' conflicting changes cannot both be appended);
* on any other node, proposes it to the controller: ``catalog/proposals/<id>`` put on the node's lease; the
  controller appends it in the same transaction that deletes the proposal and puts ``catalog/outcomes/<id>``
  (``{"seq": N}``, or ``{"error": ...}`` when it does not apply), which the proposer reads. etcd is the transport
  rather than a call to the controller's HTTP listener because every node already reaches etcd, proposals need no
  second authentication or TLS setup beside it, and a proposal whose proposer died goes with its lease;

and returns once this node applied record N, so what a client was answered is visible on the node it asked. Other
nodes apply it when their record stream delivers it (a client of another node may see the old state until then,
usually milliseconds).

Every node applies the stream in sequence order (:class:`~walgate.cluster.records.RecordFollower`) through the
engine's one apply path (:meth:`walgate.storage.engine.Engine.apply_shared`: the catalog record, durable in
``catalog.log`` with its sequence number, from which a restart resumes; then the vnodes of databases and
Kafka-native topics placed on this node opened, those of dropped ones deleted, TDengine topics compiled, ALTER/DROP
STABLE's meta entries written: :mod:`walgate.storage.sql_objects`); a node that was away reads what it missed, or the
snapshot the controller trims the stream into every :data:`TRIM_EVERY` records (the catalog's shared records,
:meth:`~walgate.storage.catalog.Catalog.shared_records`, one JSON line each). A record the disk refuses to take, or
whose vnodes cannot be made, is retried every second (the node stays behind, ``/readyz`` says so), never skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from walgate.cluster.etcd import follow_prefix, tx
from walgate.cluster.model import (
    MAX_RECORDS_PER_TXN,
    ControlPlaneError,
    ControlPlaneUnavailable,
    NotController,
    RecordCursor,
)
from walgate.cluster.records import RecordFollower, RecordLog
from walgate.gateway.cluster_member import ClusterMember, stop_tasks
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.storage.errors import ClusterUnavailable, InvalidValue, StorageError

__all__ = ["SharedCatalog", "TRIM_EVERY", "CHANGE_TIMEOUT_S", "encode_state"]

log = logging.getLogger("walgate.cluster")

TRIM_EVERY = 1000
"""The controller folds the stream into its snapshot once this many records were appended since the last time."""
CHANGE_TIMEOUT_S = 30.0
"""A change not appended and applied on the node asked within this is answered with an error."""
_RETRY_S = 1.0
T = TypeVar("T")


def _encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def encode_state(records: list[dict[str, Any]]) -> bytes:
    """A snapshot's state (``catalog/snapshot``): one JSON line per record, as :meth:`SharedCatalog._restore` reads."""
    return b"\n".join(_encode(r) for r in records)


class SharedCatalog:
    """The node's part in the shared catalog; ``on_applied(ops)`` runs after each record applied here (the node's
    caches of quotas and configs follow the catalog)."""

    def __init__(self, member: ClusterMember, storage: StorageThread, engine: Engine, applied_seq: int,
                 on_applied: Callable[[str], Awaitable[None]], trim_every: int = TRIM_EVERY) -> None:
        assert member.election is not None, "the node joined its cluster first"
        self.member = member
        self.election = member.election
        self.storage = storage
        self.engine = engine
        self.on_applied = on_applied
        self.trim_every = trim_every
        self.log = RecordLog(member.session, member.keys, member.election)
        self.follower = RecordFollower(member.session, member.keys, self._apply, self._restore,
                                       RecordCursor(seq=applied_seq))
        self._lock = asyncio.Lock()  # the controller's appends, one at a time
        self._trimmed = 0
        self._proposals_from = 0  # the revision the watch of proposals resumes at (0: read them all first)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def caught_up(self) -> bool:
        """Whether the node has read the stream once since it started (what it applied may be a moment behind)."""
        return self.follower.cursor.revision > 0

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self.follower.run(), name="walgate-catalog-follower"),
                       asyncio.create_task(self._serve_proposals(), name="walgate-catalog-proposals")]

    async def stop(self) -> None:
        await stop_tasks(self._tasks)
        self._tasks = []

    # ------------------------------------------------------------------ applying

    async def _apply(self, seq: int, epoch: int, payload: bytes) -> None:
        try:
            record: Any = json.loads(payload)
        except ValueError:
            record = {"op": None, "bytes": payload[:200].decode(errors="replace")}  # passed over by apply_shared
        while True:
            try:
                await self.storage.call(self.engine.apply_shared, seq, record)
                break
            except StorageError as e:  # the disk refused, or a vnode placed here cannot be opened: never skipped
                log.error("catalog record %d not applied yet: %s; retrying in %g s", seq, e.message, _RETRY_S)
                await asyncio.sleep(_RETRY_S)
        await self._applied(str(record.get("op")) if isinstance(record, dict) else "")

    async def _applied(self, op: str) -> None:
        try:
            await self.on_applied(op)
        except Exception:  # a bug: logged with its traceback, the stream goes on
            log.exception("after applying a catalog record")

    async def _restore(self, seq: int, state: bytes) -> None:
        while True:
            try:
                records = [json.loads(line) for line in state.splitlines() if line]
                await self.storage.call(self.engine.restore_shared, seq, records)
                break
            except (ValueError, StorageError) as e:
                log.error("the catalog snapshot up to record %d not restored yet: %s; retrying in %g s", seq,
                          getattr(e, "message", e), _RETRY_S)
                await asyncio.sleep(_RETRY_S)
        await self._applied("")

    # ------------------------------------------------------------------ changing

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the storage thread as a staged call, its shared changes published: its result once
        they are applied on this node (raises as :meth:`publish`)."""
        result, staged = await self.storage.call(self.engine.staged, fn, *args)
        if staged:
            await self.publish(staged)
        return result

    async def publish(self, records: list[dict[str, Any]]) -> None:
        """Have ``records`` (a staged call's) appended to the stream and applied on this node. Raises
        :class:`InvalidValue` (the controller's catalog refused them: nothing changed) or
        :class:`ClusterUnavailable` (no controller or no etcd quorum answered within :data:`CHANGE_TIMEOUT_S`)."""
        try:
            async with asyncio.timeout(CHANGE_TIMEOUT_S):
                await self.follower.wait_applied(await self._appended(records))
        except TimeoutError:
            raise ClusterUnavailable(f"The cluster's catalog did not take the change within {CHANGE_TIMEOUT_S:g} s (no"
                                     " controller elected, or etcd has no quorum); it may still be applied",
                                     maybe_applied=True) from None
        except ControlPlaneError as e:  # (an append etcd did not answer may still be applied)
            raise ClusterUnavailable(f"The cluster's catalog did not take the change: {e}", maybe_applied=True) from None

    async def applied(self, seq: int) -> None:
        """Return once this node applied record ``seq`` of the stream (what another node had applied when it sent
        a request). Raises :class:`ClusterUnavailable` when it does not within :data:`CHANGE_TIMEOUT_S`."""
        try:
            async with asyncio.timeout(CHANGE_TIMEOUT_S):
                await self.follower.wait_applied(seq)
        except TimeoutError:
            raise ClusterUnavailable(f"This node did not apply the cluster's catalog up to record {seq}, which the "
                                     f"node that sent the request had applied, within {CHANGE_TIMEOUT_S:g} s: "
                                     "nothing was done") from None

    async def catch_up(self) -> None:
        """Return once this node applied every record appended to the stream so far (what another node was answered
        is visible here then). Raises :class:`ClusterUnavailable` when etcd does not answer, or the node does not
        catch up, within :data:`CHANGE_TIMEOUT_S`."""
        try:
            async with asyncio.timeout(CHANGE_TIMEOUT_S):
                kv = await self.member.session.get(self.member.keys.seq)
                await self.follower.wait_applied(int(kv.value) if kv is not None else 0)
        except TimeoutError:
            raise ClusterUnavailable(f"This node did not catch up with the cluster's catalog within"
                                     f" {CHANGE_TIMEOUT_S:g} s") from None
        except ControlPlaneError as e:
            raise ClusterUnavailable(f"The cluster's catalog could not be read: {e}") from None

    async def _appended(self, records: list[dict[str, Any]]) -> int:
        """``records`` appended as the controller, else proposed to it; their sequence number. A controller that
        stepped down before its append of one transaction was written (NotController: its lease lapsed and another
        was elected; nothing written) proposes them to the new one instead, as a Kafka broker sends a request it
        forwarded to a former controller (NOT_CONTROLLER) again to the new one. (An append of several transactions
        refused after the first is not made again: part of it is in the stream.)"""
        registration = self.member.registration
        while self.election.epoch is not None:
            lease = None if registration is None else registration.lease_id
            try:
                return await self._append(records)
            except NotController as e:
                if len(records) > MAX_RECORDS_PER_TXN:
                    raise
                log.info("catalog change: %s; proposed to the controller elected now", e)
                if registration is not None and lease is not None:
                    await registration.wait_lost(lease)  # (its candidacy went with that lease: proposed on the next)
        return await self._propose(records)

    async def _append(self, records: list[dict[str, Any]], also: Callable[[int], list[Any]] | None = None,
                      when: list[Any] | None = None) -> int:
        """The controller's append: checked against its catalog caught up with the whole stream."""
        async with self._lock:
            kv = await self.member.session.get(self.member.keys.seq)
            await self.follower.wait_applied(int(kv.value) if kv is not None else 0)
            await self.storage.call(self.engine.catalog.validate_shared, records)
            seq = await self.log.append([_encode(r) for r in records], also, when)
            if seq - self._trimmed >= self.trim_every:
                with contextlib.suppress(NotController):  # (stepped down since: the next controller trims)
                    await self._trim(seq)
            return seq

    async def _trim(self, seq: int) -> None:
        await self.follower.wait_applied(seq)
        state = await self.storage.call(self.engine.catalog.shared_records)
        await self.log.trim(seq, encode_state(state))
        self._trimmed = seq
        log.info("catalog: records up to %d folded into the snapshot", seq)

    async def _propose(self, records: list[dict[str, Any]]) -> int:
        """``records`` proposed on this node's lease (once it holds one again, when it lapsed), until the controller
        answers: their sequence number, or :class:`InvalidValue` (refused). Raises :class:`ControlPlaneUnavailable`
        when the node left its cluster."""
        registration = self.member.registration
        if registration is None:
            raise ControlPlaneUnavailable(f"node {self.member.node_id} is not registered in its cluster")
        await registration.wait_registered()
        lease = registration.lease_id
        proposal_id = f"{self.member.node_id}-{uuid.uuid4().hex}"
        keys, session = self.member.keys, self.member.session
        await session.txn([], [tx.Put(keys.proposal(proposal_id), json.dumps(records).encode(), lease=lease)])
        try:
            while (kv := await session.get(keys.outcome(proposal_id))) is None:
                await asyncio.sleep(0.02)
        except BaseException:  # not answered: withdrawn, unless the controller took it meanwhile (then it stands)
            await asyncio.shield(self._withdraw(proposal_id))
            raise
        await session.txn([], [tx.Delete(keys.outcome(proposal_id))])
        outcome = json.loads(kv.value)
        if "error" in outcome:
            raise InvalidValue(str(outcome["error"]))
        return int(outcome["seq"])

    async def _withdraw(self, proposal_id: str) -> None:
        key = self.member.keys.proposal(proposal_id)
        try:
            withdrawn, _ = await self.member.session.txn([tx.Version(key) > 0], [tx.Delete(key)])
        except ControlPlaneError as e:  # it goes with the lease
            log.warning("catalog proposal %s not withdrawn: %s", proposal_id, e)
            return
        if not withdrawn:
            log.warning("catalog proposal %s was appended after its proposer stopped waiting", proposal_id)

    async def _serve_proposals(self) -> None:
        """While this node is the controller: append what the other nodes propose, in the order proposed (all of
        them read at each election, then watched: :func:`~walgate.cluster.etcd.follow_prefix`)."""
        keys, session = self.member.keys, self.member.session
        while True:
            await self.election.wait_elected()
            self._proposals_from = 0
            try:
                await follow_prefix(session, keys.proposals, start=lambda: self._proposals_from,
                                    read=self._take_proposed, on_event=self._proposed, what="catalog proposals",
                                    retry_delay=_RETRY_S)
            except ControlPlaneError as e:  # NotController: wait to be elected again
                log.warning("catalog proposals: %s", e)
                await asyncio.sleep(_RETRY_S)

    async def _take_proposed(self) -> None:
        """Take every proposal there is; the watch then starts after the revision read."""
        revision, kvs = await self.member.session.get_prefix(self.member.keys.proposals)
        for kv in kvs:
            await self._take(kv)
        self._proposals_from = revision + 1

    async def _proposed(self, event: Any) -> None:
        """Take a proposal the watch reports (NotController once this node is no longer the controller: it stops
        taking until elected again); a resumed watch starts after it."""
        if self.election.epoch is None:
            raise NotController(f"node {self.member.node_id} is no longer the controller")
        if event.kind == "PUT":
            await self._take(event.kv)
        self._proposals_from = event.kv.mod_revision + 1

    async def _take(self, kv: Any) -> None:
        """Append one proposal, or answer why not; the proposal is deleted in the same transaction."""
        keys = self.member.keys
        proposal_id = kv.key[len(keys.proposals):].decode()
        outcome_key = keys.outcome(proposal_id)

        def answer(seq: int) -> list[Any]:
            return [tx.Delete(kv.key), tx.Put(outcome_key, json.dumps({"seq": seq}).encode(), lease=kv.lease)]

        try:
            records = json.loads(kv.value)
            if not isinstance(records, list):
                raise InvalidValue(f"a catalog proposal is not a list of records: {kv.value[:200]!r}")
            await self._append(records, answer, [tx.Version(kv.key) > 0])
        except (InvalidValue, ValueError) as e:
            await self.election.fenced_txn([tx.Version(kv.key) > 0], [
                tx.Delete(kv.key), tx.Put(outcome_key, json.dumps({"error": str(e)}).encode(), lease=kv.lease)])
