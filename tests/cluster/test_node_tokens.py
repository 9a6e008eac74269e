"""The cluster's node token over a real etcd (walgate/gateway/node_tokens.py): made once by the first node, the
same for every node, and rotated by an operator writing a new value: a node signs with the new one once it read it
again, accepts a signature with the new one by reading it again before refusing (at most every REREAD_S), and
keeps accepting the one before. A manual clock: nothing waits."""

from __future__ import annotations

import asyncio

from etcd_cluster import EtcdCluster

from walgate.cluster.etcd import EtcdSession, tx
from walgate.cluster.model import Keys
from walgate.gateway.node_tokens import REFRESH_S, REREAD_S, NodeTokens


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_token_is_made_once_and_rotated_without_refusing_anyone(etcd1: EtcdCluster) -> None:
    async def main() -> None:
        session = EtcdSession(etcd1.endpoints)
        key = Keys("walgate").node_token
        clock_a, clock_b = Clock(), Clock()
        a, b = NodeTokens(session, key, clock_a), NodeTokens(session, key, clock_b)
        try:
            await a.load()
            await b.load()  # the second node reads the first one's
            first = await a.signing()
            assert first == await b.signing() and len(first) >= 43 and a.known() == (first,)

            await session.txn([], [tx.Put(key, b"rotated-by-the-operator")])  # etcdctl put
            clock_a.now += REREAD_S / 2
            assert await a.signing() == first, "read again only after REFRESH_S"
            assert not await a.verified(lambda tokens: "rotated-by-the-operator" in tokens), \
                "not read again within REREAD_S of the last read"
            clock_a.now += REREAD_S
            assert await a.verified(lambda tokens: "rotated-by-the-operator" in tokens), "read again before refusing"
            assert a.known() == ("rotated-by-the-operator", first), "the one before is still accepted"
            assert await b.signing() == first  # b has not read it yet: its signatures are accepted by a
            assert await a.verified(lambda tokens: first in tokens)
            clock_b.now += REFRESH_S + 1
            assert await b.signing() == "rotated-by-the-operator"
            await b.load()  # a restarting node never makes a new token
            assert b.current == "rotated-by-the-operator"
        finally:
            await session.close()

    asyncio.run(main())
