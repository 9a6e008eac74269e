"""walgate.cluster.etcd.follow_prefix against a real etcd: the one rule every prefix follower keeps (read first,
read again after a compaction or a caller's gap, resume a broken stream where the caller is, without reading)."""

from __future__ import annotations

import asyncio
from typing import Any

import aetcd
from cluster_support import eventually, within
from etcd_cluster import EtcdCluster

from walgate.cluster.etcd import EtcdSession, follow_prefix, tx

PREFIX = b"/walgate/test/followed/"


class _Gap(Exception):
    """What a caller raises when an event shows it missed something."""


class _Follower:
    """Keeps the keys under PREFIX (by name, the prefix left out) as follow_prefix hands them over; ``reads``
    counts the reads."""

    def __init__(self, session: EtcdSession) -> None:
        self.session = session
        self.values: dict[bytes, bytes] = {}
        self.start = 0
        self.reads = 0
        self.gap_at: bytes | None = None  # an event for this key raises _Gap (once)

    async def read(self) -> None:
        revision, kvs = await self.session.get_prefix(PREFIX)
        self.values = {kv.key.removeprefix(PREFIX): kv.value for kv in kvs}
        self.start = revision + 1
        self.reads += 1

    async def on_event(self, event: Any) -> None:
        if event.kv.key == self.gap_at:
            self.gap_at = None
            raise _Gap(f"{event.kv.key!r} shows a gap")
        name = event.kv.key.removeprefix(PREFIX)
        if event.kind == "PUT":
            self.values[name] = event.kv.value
        else:
            self.values.pop(name, None)
        self.start = event.kv.mod_revision + 1

    def follow(self) -> asyncio.Task[None]:
        return asyncio.create_task(follow_prefix(
            self.session, PREFIX, start=lambda: self.start, read=self.read, on_event=self.on_event,
            what="test", retry_delay=0.1, read_again=(_Gap,)))


async def _put(session: EtcdSession, name: bytes, value: bytes) -> int:
    _, responses = await session.txn([], [tx.Put(PREFIX + name, value)])
    return int(responses[0].response_put.header.revision)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_read_first_then_events_and_a_gap_reads_again(etcd1: EtcdCluster) -> None:
    writer, session = EtcdSession(etcd1.endpoints), EtcdSession(etcd1.endpoints)
    follower = _Follower(session)
    await _put(writer, b"a", b"1")
    task = follower.follow()
    try:
        await eventually("read", lambda: _holds(follower, {b"a": b"1"}))
        await _put(writer, b"b", b"2")
        await writer.txn([], [tx.Delete(PREFIX + b"a")])
        await eventually("the put and the delete seen", lambda: _holds(follower, {b"b": b"2"}))
        assert follower.reads == 1
        follower.gap_at = PREFIX + b"c"
        await _put(writer, b"c", b"3")  # raises _Gap when seen: read again, which finds it
        await eventually("read again after the gap", lambda: _holds(follower, {b"b": b"2", b"c": b"3"}))
        assert follower.reads == 2
    finally:
        await _stop(task)
        await session.close()
        await writer.close()


async def test_a_compacted_start_reads_again(etcd1: EtcdCluster) -> None:
    writer, session = EtcdSession(etcd1.endpoints), EtcdSession(etcd1.endpoints)
    follower = _Follower(session)
    await _put(writer, b"a", b"1")
    await follower.read()  # as before a stop: the follower resumes from here
    await _put(writer, b"a", b"2")
    revision = await _put(writer, b"b", b"3")
    async with aetcd.Client(*etcd1.endpoints[0]) as raw:
        await raw.compact(revision, physical=True)  # the follower's start is gone from etcd
    task = follower.follow()
    try:
        await eventually("read again", lambda: _holds(follower, {b"a": b"2", b"b": b"3"}))
        assert follower.reads == 2
    finally:
        await _stop(task)
        await session.close()
        await writer.close()


async def test_a_broken_stream_resumes_where_the_caller_is_without_reading(etcd1: EtcdCluster) -> None:
    session = EtcdSession(etcd1.endpoints, timeout=1.0)
    follower = _Follower(session)
    task = follower.follow()
    try:
        await eventually("read", lambda: _holds(follower, {}))
        member = etcd1.members[0]
        member.kill()  # kill -9: the watch stream breaks; restarted on the same data dir
        member.start()
        await asyncio.to_thread(etcd1.wait_healthy, [member])
        writer = EtcdSession(etcd1.endpoints)
        try:
            await within(_put(writer, b"after", b"1"))
        finally:
            await writer.close()
        await eventually("the put after the restart seen", lambda: _holds(follower, {b"after": b"1"}))
        assert follower.reads == 1  # resumed from its revision: nothing read again
    finally:
        await _stop(task)
        await session.close()


async def _holds(follower: _Follower, values: dict[bytes, bytes]) -> bool:
    return follower.reads > 0 and follower.values == values
