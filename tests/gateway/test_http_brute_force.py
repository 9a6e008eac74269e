"""Guessing root's HTTP Basic password against a real server over HTTP: concurrent guesses queue and each one counts,
and failures with thousands of other user names do not make the server forget root's.

The waits are checked as lower bounds only (``asyncio.sleep`` never returns early), so a loaded machine cannot make
these tests fail; without the queue (guesses all running after one shared wait) or with the oldest pair forgotten
first, the same bounds are missed by more than a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from walgate.gateway import http_auth
from walgate.gateway.config import Config
from walgate.gateway.server import Gateway

ROOT_PASSWORD = "brute-force-pw"


@pytest.fixture
async def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setenv("WALGATE_ROOT_PASSWORD", ROOT_PASSWORD)
    config = Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, http_auth="basic")
    async with Gateway(config) as gateway:
        host, port = gateway.http_address
        yield f"http://{host}:{port}/rest/sql"


async def attempt(session: aiohttp.ClientSession, url: str, user: str, password: str) -> int:
    async with session.post(url, data=b"SHOW DATABASES", auth=aiohttp.BasicAuth(user, password)) as response:
        await response.read()
        return response.status


async def test_concurrent_guesses_queue_and_each_counts(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        start = time.monotonic()
        statuses = await asyncio.gather(*(attempt(session, url, "root", f"guess-{i}") for i in range(5)))
        guessed = time.monotonic() - start
        assert statuses == [401] * 5
        assert guessed >= 0.1 + 0.2 + 0.4 + 0.8  # checked one after the other, each after its wait
        assert await attempt(session, url, "root", ROOT_PASSWORD) == 200
        assert time.monotonic() - start >= 0.1 + 0.2 + 0.4 + 0.8 + 1.6  # 5 failures counted: then a wait of 1.6 s


async def test_failures_of_other_names_never_forget_a_user_under_attack(url: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_auth, "_MAX_TRACKED", 20)  # the same rule as at 10,000 pairs, with 50x fewer requests
    async with aiohttp.ClientSession() as session:
        for i in range(5):
            last_failure = time.monotonic()  # the 5th failure is recorded after this
            assert await attempt(session, url, "root", f"guess-{i}") == 401
        for batch in range(3):  # 30 other names, one failure each: more than the 20 pairs remembered
            names = [f"someone-{batch}-{i}" for i in range(10)]
            assert await asyncio.gather(*(attempt(session, url, name, "x") for name in names)) == [401] * 10
        assert await attempt(session, url, "root", ROOT_PASSWORD) == 200
        assert time.monotonic() - last_failure >= 1.6  # root's 5 failures still counted: 0.1 * 2**4 s after the 5th
