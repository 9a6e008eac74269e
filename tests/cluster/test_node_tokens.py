"""The cluster's node token over a real etcd (walgate/gateway/node_tokens.py): made once by the first node, the
same for every node; an operator's rotation reaches a node that forwards nothing (it reads the token every
REFRESH_S), the one before is accepted GRACE_S after the change was seen and never after; deleting and putting the
key again revokes the one before at once. A value that is no token is refused, never accepted nor a crash; forged
signatures and etcd down cost one etcd read per REREAD_S, however many requests. A manual clock: nothing waits but
the background reads."""

from __future__ import annotations

import asyncio

import pytest
from etcd_cluster import EtcdCluster, free_port

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import ControlPlaneError, Keys
from walgate.gateway import node_tokens
from walgate.gateway.node_tokens import GRACE_S, REREAD_S, NodeTokens

KEY = Keys("walgate").node_token
T2, T3, T4 = ("2" * 43, "3" * 43, "4" * 43)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountedSession(EtcdSession):
    """A real session that counts its reads."""

    reads = 0

    async def get(self, key: bytes):  # type: ignore[no-untyped-def]
        self.reads += 1
        return await super().get(key)


async def put(session: EtcdSession, value: bytes) -> None:
    await session.txn([], [tx.Put(KEY, value)])  # etcdctl put


def test_a_rotation_reaches_every_node_and_the_old_token_is_accepted_only_for_the_grace(
        etcd1: EtcdCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_tokens, "REFRESH_S", 0.05)

    async def main() -> None:
        session = EtcdSession(etcd1.endpoints)
        clock_a, clock_b = Clock(), Clock()
        a, b = NodeTokens(session, KEY, clock_a), NodeTokens(session, KEY, clock_b)
        follow = asyncio.create_task(b.follow())  # b forwards nothing: it reads the token in the background
        try:
            await a.load()
            await b.load()  # the second node reads the first one's
            first = a.signing()
            assert first == b.signing() and len(first) >= 43 and a.known() == (first,)

            await put(session, T2.encode())
            for _ in range(200):  # bounded: b reads every 0.05 s
                if b.current == T2:
                    break
                await asyncio.sleep(0.05)
            assert b.known() == (T2, first), "b read the new one without forwarding; the old one in its grace"
            assert await a.verified(lambda tokens: T2 in tokens), "a reads again before refusing a new signature"
            assert a.known() == (T2, first)
            clock_a.now += GRACE_S + 0.1
            assert a.known() == (T2,) and not await a.verified(lambda tokens: first in tokens), "grace over"
            # two rotations a node did not see one by one: the one it knew is in grace, then no more
            await put(session, T3.encode())
            await put(session, T4.encode())
            clock_a.now += REREAD_S
            await a.refresh()
            assert a.known() == (T4, T2)
            clock_a.now += GRACE_S + 0.1
            assert a.known() == (T4,)
            await a.load()  # a restarting node never makes a new token
            assert a.current == T4
        finally:
            follow.cancel()
            await asyncio.gather(follow, return_exceptions=True)
            await session.close()

    asyncio.run(main())


def test_deleting_and_putting_the_key_revokes_the_old_token_at_once_and_a_bad_value_is_refused(
        etcd1: EtcdCluster) -> None:
    async def main() -> None:
        session = EtcdSession(etcd1.endpoints)
        tokens = NodeTokens(session, KEY, Clock())
        try:
            for bad in (b"", b"\xff\xfe" * 20, b"short"):  # none is a token: a start stops with the reason
                await put(session, bad)
                with pytest.raises(ControlPlaneError, match="openssl rand"):
                    await tokens.load()
            await put(session, T2.encode())
            await tokens.load()
            await put(session, b"")
            await tokens.refresh()  # refused (logged): the token known is kept, the empty one never accepted
            assert tokens.known() == (T2,)

            await put(session, T3.encode())
            await tokens.refresh()
            assert tokens.known() == (T3, T2)
            await session.txn([], [tx.Delete(KEY)])  # etcdctl del: nothing signed or accepted
            await tokens.refresh()
            assert tokens.known() == ()
            with pytest.raises(ControlPlaneError, match="deleted"):
                tokens.signing()
            await put(session, T4.encode())
            await tokens.refresh()
            assert tokens.known() == (T4,) and tokens.signing() == T4
            await session.txn([], [tx.Delete(KEY)])  # deleted and put again between two reads: revoked too
            await put(session, b"5" * 43)
            await tokens.refresh()
            assert tokens.known() == ("5" * 43,), "no grace for the token before a deleted key"
            await session.txn([], [tx.Delete(KEY)])  # a revocation whose new value is mistyped (too short)
            await put(session, b"hunter2-new")
            await tokens.refresh()
            assert tokens.known() == (), "the leaked token is revoked even though the new value is refused"
            with pytest.raises(ControlPlaneError, match="deleted"):
                tokens.signing()
            await put(session, T2.encode())  # put right: known again
            await tokens.refresh()
            assert tokens.known() == (T2,)
        finally:
            await session.close()

    asyncio.run(main())


def test_forged_signatures_and_etcd_down_cost_one_read_per_reread_interval(etcd1: EtcdCluster) -> None:
    async def main() -> None:
        session = CountedSession(etcd1.endpoints)
        clock = Clock()
        tokens = NodeTokens(session, KEY, clock)
        down = CountedSession([("127.0.0.1", free_port())], timeout=0.2)  # nothing listens there
        try:
            await tokens.load()
            clock.now += REREAD_S
            session.reads = 0
            forged = await asyncio.gather(*(tokens.verified(lambda tokens: False) for _ in range(200)))
            assert not any(forged) and session.reads == 1, "200 forged requests at once: one read, shared"
            for _ in range(50):
                assert not await tokens.verified(lambda tokens: False)
            assert session.reads == 1, "then none within REREAD_S"

            cut = NodeTokens(down, KEY, clock)
            cut.current = tokens.current  # as if loaded before etcd went away
            clock.now += REREAD_S
            assert not any(await asyncio.gather(*(cut.verified(lambda tokens: False) for _ in range(50))))
            for _ in range(50):
                assert not await cut.verified(lambda tokens: False)
            assert down.reads == 1, "etcd down: one failed read for 100 forged requests"
            assert cut.signing() == tokens.current, "signing never waits for etcd"
        finally:
            await session.close()
            await down.close()

    asyncio.run(main())


class GatedSession(CountedSession):
    """A real session whose reads answer only once ``gate`` is set (a read under way while the key changes)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.gate = asyncio.Event()
        self.gate.set()

    async def get(self, key: bytes):  # type: ignore[no-untyped-def]
        answer = await super().get(key)
        await self.gate.wait()
        return answer


def test_a_signature_with_a_token_put_after_the_last_read_is_checked_with_a_read_begun_after_it_arrived(
        etcd1: EtcdCluster) -> None:
    """A periodic read does not stop the read a request signed with a new token needs (it used to, for REREAD_S
    after each periodic read), and a request arriving while a read begun before the put is under way gets a read of
    its own after it (it used to get the old value of the read it joined)."""
    async def main() -> None:
        session = GatedSession(etcd1.endpoints)
        clock = Clock()
        tokens = NodeTokens(session, KEY, clock)
        try:
            await put(session, T2.encode())
            await tokens.load()
            await tokens.refresh()  # follow()'s periodic read
            await put(session, T3.encode())  # an operator's rotation; another node read it and signs with it
            clock.now += REREAD_S / 2
            assert await tokens.verified(lambda known: T3 in known), "read again, though a periodic read was just made"

            clock.now += REREAD_S
            session.gate.clear()
            session.reads = 0
            periodic = asyncio.create_task(tokens.refresh())  # begun before the next put, answered after it
            for _ in range(1000):  # bounded: until the read is under way
                if session.reads:
                    break
                await asyncio.sleep(0.01)
            await put(session, T4.encode())
            request = asyncio.create_task(tokens.verified(lambda known: T4 in known))
            await asyncio.sleep(0.05)
            session.gate.set()
            assert await request, "a read begun after the request arrived"
            await periodic
            assert session.reads == 2
        finally:
            await session.close()

    asyncio.run(main())


class FailingOnceSession(EtcdSession):
    """A real session whose next read once ``armed`` raises what no etcd client error is (a bug's exception)."""

    armed = False

    async def get(self, key: bytes):  # type: ignore[no-untyped-def]
        if self.armed:
            self.armed = False
            raise RuntimeError("an unexpected error")
        return await super().get(key)


def test_the_periodic_read_goes_on_after_an_unexpected_error(etcd1: EtcdCluster,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """follow() logs an exception that is not a ControlPlaneError and goes on reading (it used to end, and the node
    to sign with a stale token for ever)."""
    monkeypatch.setattr(node_tokens, "REFRESH_S", 0.05)

    async def main() -> None:
        session = EtcdSession(etcd1.endpoints)
        failing = FailingOnceSession(etcd1.endpoints)
        tokens = NodeTokens(failing, KEY, Clock())
        await put(session, T2.encode())
        await tokens.load()
        failing.armed = True  # follow()'s first read fails
        follow = asyncio.create_task(tokens.follow())
        try:
            await put(session, T3.encode())
            for _ in range(400):  # bounded: 20 s
                if tokens.signing() == T3 or follow.done():
                    break
                await asyncio.sleep(0.05)
            assert not follow.done() and tokens.signing() == T3
        finally:
            follow.cancel()
            await session.close()
            await failing.close()

    asyncio.run(main())
