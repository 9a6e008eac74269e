"""acks=all answers waiting for a replicated vnode's high watermark (Kafka's ``DelayedProduce`` purgatory; issue 25,
docs/plans/replication-wiring.md step 5).

A write appended at versions up to ``last_version`` of a replicated vnode is answered once the vnode's high
watermark passes ``last_version`` (every ISR member holds it durably): NONE when the ISR then still has
``min.insync.replicas`` members, NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise
(:func:`walgate.replication.leader.ack_status`, Kafka's ``Partition.checkEnoughReplicasReachOffset``);
NOT_LEADER_OR_FOLLOWER when this node stops leading the vnode first; REQUEST_TIMED_OUT when the request's timeout
passes first. A write is waited for under the leader epoch it was appended in (the view ``Produce`` checked it
against): when this node does not lead the vnode in that epoch at the moment the wait begins (deposed since, or
leading a newer epoch), it is answered NOT_LEADER_OR_FOLLOWER at once, as Kafka's ``DelayedProduce`` checks the
partition's leader epoch; a high watermark of another epoch never answers it (the write may have been truncated
while this node followed in between). Event loop only: the replica manager tells it the epoch it leads
(:meth:`Purgatory.lead`, :meth:`Purgatory.fail`) and posts each high watermark it learns on a lane here with
``loop.call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from walgate.replication.leader import ack_status
from walgate.storage.lanes import VnodeKey
from walgate.wire.errors import ErrorCode

__all__ = ["Purgatory"]


@dataclass(frozen=True, eq=False)
class _Waiter:
    last_version: int
    answer: asyncio.Future[ErrorCode]


class Purgatory:
    """The waiting acks=all writes, per vnode. Invariants: a waiter is resolved at most once, and never with NONE
    before a high watermark past its ``last_version`` was posted in the leader epoch it waits under; every waiter of
    a vnode waits under the epoch :meth:`lead` last gave it (:meth:`fail` answers them all when it ends)."""

    def __init__(self) -> None:
        self._waiting: dict[VnodeKey, list[_Waiter]] = {}
        self._leading: dict[VnodeKey, int] = {}  # the leader epoch each vnode is led in now
        self._known: dict[VnodeKey, tuple[int, int, int]] = {}  # the last (hw, ISR size, min ISR) posted in it

    def waiting(self, key: VnodeKey) -> int:
        """How many writes to ``key`` wait now."""
        return len(self._waiting.get(key, ()))

    def lead(self, key: VnodeKey, leader_epoch: int) -> None:
        """This node leads ``key`` in ``leader_epoch`` from now (after :meth:`fail` ended any earlier leadership)."""
        self._leading[key] = leader_epoch
        self._known.pop(key, None)

    async def wait(self, key: VnodeKey, leader_epoch: int, last_version: int, timeout_s: float) -> ErrorCode:
        """The answer of a write to ``key`` appended in ``leader_epoch`` whose last entry is at ``last_version`` (the
        module docstring)."""
        if self._leading.get(key) != leader_epoch:
            return ErrorCode.not_leader_or_follower
        waiter = _Waiter(last_version, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(key, []).append(waiter)
        if key in self._known:  # (posted before the wait began: the write may be passed already)
            self.advance(key, leader_epoch, *self._known[key])
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):  # (not wait_for, which may swallow a cancellation)
                return await asyncio.shield(waiter.answer)
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            self._drop(key, waiter)

    def advance(self, key: VnodeKey, leader_epoch: int, hw: int, isr_size: int, min_isr: int) -> None:
        """``key``'s high watermark in ``leader_epoch`` is ``hw`` with ``isr_size`` members in its ISR: answer every
        write it passed (and every later one it passes, until :meth:`fail`); ignored when ``key`` is not led in
        ``leader_epoch`` now (a post that arrives after its leadership ended)."""
        if self._leading.get(key) != leader_epoch:
            return
        self._known[key] = (hw, isr_size, min_isr)
        for waiter in list(self._waiting.get(key, ())):
            status = ack_status(hw, waiter.last_version, isr_size, min_isr)
            if status is not None:
                self._resolve(key, waiter, status)

    def fail(self, key: VnodeKey, code: ErrorCode) -> None:
        """This node stopped leading ``key``: answer every write waiting on it with ``code``; what was posted for
        ``key`` is forgotten, and a wait begun later is answered NOT_LEADER_OR_FOLLOWER until :meth:`lead`."""
        self._leading.pop(key, None)
        self._known.pop(key, None)
        for waiter in list(self._waiting.get(key, ())):
            self._resolve(key, waiter, code)

    def _resolve(self, key: VnodeKey, waiter: _Waiter, code: ErrorCode) -> None:
        if not waiter.answer.done():
            waiter.answer.set_result(code)
        self._drop(key, waiter)

    def _drop(self, key: VnodeKey, waiter: _Waiter) -> None:
        waiters = self._waiting.get(key)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._waiting[key]
