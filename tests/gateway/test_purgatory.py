"""The acks=all purgatory (:mod:`walgate.gateway.purgatory`): a write is answered exactly when a high watermark past
its last version is posted, never before; with the ISR then below ``min.insync.replicas``,
NOT_ENOUGH_REPLICAS_AFTER_APPEND; NOT_LEADER_OR_FOLLOWER when the leader resigns first; REQUEST_TIMED_OUT after
its timeout; a high watermark posted before the wait began counts. A write waits under the leader epoch it was
appended in: when that leadership ended before the wait began (deposed, or led again in a newer epoch) it is answered
NOT_LEADER_OR_FOLLOWER at once, and a high watermark of another epoch never answers it."""

from __future__ import annotations

import asyncio

from walgate.gateway.purgatory import Purgatory
from walgate.wire.errors import ErrorCode

KEY = ("db", 0)
OTHER = ("db", 1)
EPOCH = 5


def led() -> Purgatory:
    """A purgatory whose vnodes KEY and OTHER are led in EPOCH."""
    p = Purgatory()
    p.lead(KEY, EPOCH)
    p.lead(OTHER, EPOCH)
    return p


async def _settled() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_write_is_answered_exactly_when_the_high_watermark_passes_it() -> None:
    p = led()
    w5 = asyncio.create_task(p.wait(KEY, EPOCH, 5, 30.0))
    w9 = asyncio.create_task(p.wait(KEY, EPOCH, 9, 30.0))
    await _settled()
    for hw in (0, 3, 5):  # a high watermark of 5 holds versions below 5: version 5 not yet
        p.advance(KEY, EPOCH, hw, 3, 2)
        p.advance(OTHER, EPOCH, 100, 3, 2)  # (another vnode's)
        await _settled()
        assert not w5.done() and not w9.done() and p.waiting(KEY) == 2
    p.advance(KEY, EPOCH, 6, 3, 2)
    assert await w5 == ErrorCode.none
    await _settled()
    assert not w9.done() and p.waiting(KEY) == 1
    p.advance(KEY, EPOCH, 10, 2, 2)
    assert await w9 == ErrorCode.none and p.waiting(KEY) == 0


async def test_the_isr_below_min_when_passed_is_not_enough_replicas_after_append() -> None:
    p = led()
    w = asyncio.create_task(p.wait(KEY, EPOCH, 1, 30.0))
    await _settled()
    p.advance(KEY, EPOCH, 2, 1, 2)
    assert await w == ErrorCode.not_enough_replicas_after_append


async def test_a_high_watermark_posted_before_the_wait_counts_until_the_leader_resigns() -> None:
    p = led()
    p.advance(KEY, EPOCH, 4, 3, 2)
    assert await p.wait(KEY, EPOCH, 3, 30.0) == ErrorCode.none
    w = asyncio.create_task(p.wait(KEY, EPOCH, 4, 30.0))
    await _settled()
    assert not w.done()
    p.fail(KEY, ErrorCode.not_leader_or_follower)
    assert await w == ErrorCode.not_leader_or_follower
    p.lead(KEY, EPOCH + 1)
    w = asyncio.create_task(p.wait(KEY, EPOCH + 1, 3, 0.05))  # what was posted before the resignation is forgotten
    assert await w == ErrorCode.request_timed_out


async def test_a_write_not_passed_in_time_times_out_and_leaves_nothing_waiting() -> None:
    p = led()
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await p.wait(KEY, EPOCH, 0, 0.05) == ErrorCode.request_timed_out
    assert loop.time() - start >= 0.05 and p.waiting(KEY) == 0
    p.advance(KEY, EPOCH, 1, 3, 2)  # (nothing left to answer)


async def test_a_write_of_a_leadership_that_ended_before_its_wait_is_not_led_at_once_never_answered_later() -> None:
    p = led()
    p.advance(KEY, EPOCH, 100, 3, 2)
    p.fail(KEY, ErrorCode.not_leader_or_follower)  # deposed between the write's append and its wait
    assert await asyncio.wait_for(p.wait(KEY, EPOCH, 100, 30.0), 1.0) == ErrorCode.not_leader_or_follower
    assert p.waiting(KEY) == 0
    p.lead(KEY, EPOCH + 2)  # led again, a newer epoch: a write of the older one is not waited for either
    assert await asyncio.wait_for(p.wait(KEY, EPOCH, 100, 30.0), 1.0) == ErrorCode.not_leader_or_follower
    w = asyncio.create_task(p.wait(KEY, EPOCH + 2, 101, 30.0))
    await _settled()
    p.advance(KEY, EPOCH, 200, 3, 2)  # a post of the old leadership, arriving late: it answers nothing
    await _settled()
    assert not w.done() and p.waiting(KEY) == 1
    p.advance(KEY, EPOCH + 2, 102, 3, 2)
    assert await w == ErrorCode.none
