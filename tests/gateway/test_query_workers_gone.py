"""A query whose client went away while it waited for a query slot, or while it was prepared, never reaches a
worker (walgate/gateway/query_workers.py): no work for nobody, and the slot is free again."""

from __future__ import annotations

from typing import cast

import pytest

from walgate.gateway.query_workers import QueryWorkers
from walgate.storage.engine import PreparedSelect
from walgate.storage.errors import QueryCancelled


async def test_a_client_gone_before_its_query_reaches_a_worker_costs_no_work() -> None:
    workers = QueryWorkers(1, 0, 1 << 30)
    prepared: list[str] = []

    async def never() -> PreparedSelect:
        prepared.append("prepared for a client already gone")
        raise AssertionError(prepared[-1])

    with pytest.raises(QueryCancelled, match="went away"):
        await workers.run(never, gone=lambda: True)
    assert prepared == []

    gone = [False]

    async def leaves_meanwhile() -> PreparedSelect:
        gone[0] = True  # the client closes its connection while the query is prepared
        return cast(PreparedSelect, object())  # never submitted

    for _ in range(2):  # the slot was freed each time
        gone[0] = False
        with pytest.raises(QueryCancelled, match="went away"):
            await workers.run(leaves_meanwhile, gone=lambda: gone[0])
    assert workers.pids == [], "no worker process was started"
