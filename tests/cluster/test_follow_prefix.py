"""walgate.cluster.etcd.follow_prefix against a real etcd: the one rule every prefix follower keeps (read first,
read again after a compaction or a caller's gap, resume a broken stream where the caller is, without reading)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aetcd
from cluster_support import eventually
from etcd_cluster import EtcdCluster

from walgate.cluster.etcd import EtcdSession, follow_prefix, tx
from walgate.cluster.model import ControlPlaneUnavailable

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
        self.lost: bytes | None = None  # an event for this key is dropped, as if the watch never delivered it (once)
        self.task: asyncio.Task[None] | None = None

    async def read(self) -> None:
        revision, kvs = await self.session.get_prefix(PREFIX)
        self.values = {kv.key.removeprefix(PREFIX): kv.value for kv in kvs}
        self.start = revision + 1
        self.reads += 1

    async def on_event(self, event: Any) -> None:
        if event.kv.key == self.gap_at:
            self.gap_at = None
            raise _Gap(f"{event.kv.key!r} shows a gap")
        if event.kv.key == self.lost:
            self.lost = None
            return
        name = event.kv.key.removeprefix(PREFIX)
        if event.kind == "PUT":
            self.values[name] = event.kv.value
        else:
            self.values.pop(name, None)
        self.start = event.kv.mod_revision + 1

    def follow(self, reread_s: float | None = None) -> None:
        self.task = asyncio.create_task(follow_prefix(
            self.session, PREFIX, start=lambda: self.start, read=self.read, on_event=self.on_event,
            what="test", retry_delay=0.1, read_again=(_Gap,), reread_s=reread_s))


async def _put(session: EtcdSession, name: bytes, value: bytes) -> int:
    _, responses = await session.txn([], [tx.Put(PREFIX + name, value)])
    return int(responses[0].response_put.header.revision)


@contextlib.asynccontextmanager
async def _sessions(etcd: EtcdCluster, timeout: float = 5.0) -> AsyncIterator[tuple[EtcdSession, _Follower]]:
    """A session to write with and a follower (its session's calls bounded by ``timeout``), both stopped after."""
    writer, follower = EtcdSession(etcd.endpoints), _Follower(EtcdSession(etcd.endpoints, timeout=timeout))
    try:
        yield writer, follower
    finally:
        if follower.task is not None:
            follower.task.cancel()
            await asyncio.gather(follower.task, return_exceptions=True)
        await follower.session.close()
        await writer.close()


async def test_read_first_then_events_and_a_gap_reads_again(etcd1: EtcdCluster) -> None:
    async with _sessions(etcd1) as (writer, follower):
        await _put(writer, b"a", b"1")
        follower.follow()
        await eventually("read", lambda: _holds(follower, {b"a": b"1"}))
        await _put(writer, b"b", b"2")
        await writer.txn([], [tx.Delete(PREFIX + b"a")])
        await eventually("the put and the delete seen", lambda: _holds(follower, {b"b": b"2"}))
        assert follower.reads == 1
        follower.gap_at = PREFIX + b"c"
        await _put(writer, b"c", b"3")  # raises _Gap when seen: read again, which finds it
        await eventually("read again after the gap", lambda: _holds(follower, {b"b": b"2", b"c": b"3"}))
        assert follower.reads == 2


async def test_a_watch_that_ran_reread_s_reads_again_and_takes_a_change_it_never_delivered(
        etcd1: EtcdCluster) -> None:
    async with _sessions(etcd1) as (writer, follower):
        follower.follow(reread_s=1.0)
        await eventually("read", lambda: _holds(follower, {}))
        follower.lost = PREFIX + b"a"
        await _put(writer, b"a", b"1")  # its event dropped: only a read takes it
        await _put(writer, b"b", b"2")
        await eventually("the put whose event was lost taken by a read",
                         lambda: _holds(follower, {b"a": b"1", b"b": b"2"}))
        assert follower.lost is None and follower.reads >= 2


async def test_a_compacted_start_reads_again(etcd1: EtcdCluster) -> None:
    async with _sessions(etcd1) as (writer, follower):
        await _put(writer, b"a", b"1")
        await follower.read()  # as before a stop: the follower resumes from here
        await _put(writer, b"a", b"2")
        revision = await _put(writer, b"b", b"3")
        async with aetcd.Client(*etcd1.endpoints[0]) as raw:
            await raw.compact(revision, physical=True)  # the follower's start is gone from etcd
        follower.follow()
        await eventually("read again", lambda: _holds(follower, {b"a": b"2", b"b": b"3"}))
        assert follower.reads == 2


async def test_a_broken_stream_resumes_where_the_caller_is_without_reading(etcd1: EtcdCluster) -> None:
    async with _sessions(etcd1, timeout=1.0) as (writer, follower):
        follower.follow()
        await eventually("read", lambda: _holds(follower, {}))
        member = etcd1.members[0]
        member.kill()  # kill -9: the watch stream breaks; restarted on the same data dir
        member.start()
        await asyncio.to_thread(etcd1.wait_healthy, [member])
        await eventually("a write after the restart", lambda: _put_ok(writer, b"after", b"1"))
        await eventually("the put after the restart seen", lambda: _holds(follower, {b"after": b"1"}))
        assert follower.reads == 1  # resumed from its revision: nothing read again


async def _put_ok(writer: EtcdSession, name: bytes, value: bytes) -> bool:
    try:
        await _put(writer, name, value)
        return True
    except ControlPlaneUnavailable:  # the writer's channel to the killed member: a new one next time
        return False


async def _holds(follower: _Follower, values: dict[bytes, bytes]) -> bool:
    return follower.reads > 0 and follower.values == values
