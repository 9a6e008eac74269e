"""acks=all answers waiting for a replicated vnode's high watermark (Kafka's ``DelayedProduce`` purgatory; issue 25,
docs/plans/replication-wiring.md step 5).

A write appended at versions up to ``last_version`` of a replicated vnode is answered once the vnode's high
watermark passes ``last_version`` (every ISR member holds it durably): NONE when the ISR then still has
``min.insync.replicas`` members, NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise
(:func:`walgate.replication.leader.ack_status`, Kafka's ``Partition.checkEnoughReplicasReachOffset``);
NOT_LEADER_OR_FOLLOWER when this node stops leading the vnode first; REQUEST_TIMED_OUT when the request's timeout
passes first. Event loop only: the replica manager posts each high watermark it learns on a lane here with
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
    """The waiting acks=all writes, per vnode. Invariant: a waiter is resolved at most once, and never with NONE
    before a high watermark past its ``last_version`` was posted."""

    def __init__(self) -> None:
        self._waiting: dict[VnodeKey, list[_Waiter]] = {}
        self._known: dict[VnodeKey, tuple[int, int, int]] = {}  # the last (hw, ISR size, min ISR) posted

    def waiting(self, key: VnodeKey) -> int:
        """How many writes to ``key`` wait now."""
        return len(self._waiting.get(key, ()))

    async def wait(self, key: VnodeKey, last_version: int, timeout_s: float) -> ErrorCode:
        """The answer of a write to ``key`` whose last entry is at ``last_version`` (the module docstring)."""
        waiter = _Waiter(last_version, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(key, []).append(waiter)
        if key in self._known:  # (posted before the wait began: the write may be passed already)
            self.advance(key, *self._known[key])
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.answer), max(0.0, timeout_s))
        except TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            self._drop(key, waiter)

    def advance(self, key: VnodeKey, hw: int, isr_size: int, min_isr: int) -> None:
        """``key``'s high watermark is ``hw`` with ``isr_size`` members in its ISR: answer every write it passed
        (and every later one it passes, until :meth:`fail`)."""
        self._known[key] = (hw, isr_size, min_isr)
        for waiter in list(self._waiting.get(key, ())):
            status = ack_status(hw, waiter.last_version, isr_size, min_isr)
            if status is not None:
                self._resolve(key, waiter, status)

    def fail(self, key: VnodeKey, code: ErrorCode) -> None:
        """Answer every write waiting on ``key`` with ``code`` (this node stopped leading it); what was posted for
        ``key`` is forgotten."""
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
