"""The Kafka listener in process: a handler that raises closes its connection after ONE log line.

The line is at ERROR and names the api key, version, client and exception (no traceback: the server log stays
readable and a traceback there always means a bug that escaped); other connections go on being served.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.gateway_helpers import read_frame
from walgate.gateway.config import Config
from walgate.gateway.kafka import handlers
from walgate.gateway.kafka.server import KafkaServer
from walgate.gateway.server import Gateway


def _request(api_key: int, version: int, correlation_id: int) -> bytes:
    body = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test" + b"\x00\x00\x00\x00"  # no topics
    return struct.pack(">i", len(body)) + body


async def test_a_handler_that_raises_closes_the_connection_after_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(broker: Any, ctx: Any, request: Any) -> None:
        raise RuntimeError("boom")

    metadata = handlers.HANDLERS[3]
    monkeypatch.setitem(handlers.HANDLERS, 3, handlers.Handler(3, metadata.min_version, metadata.max_version, broken))
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        host, port = gateway.kafka_address
        with caplog.at_level(logging.INFO, logger="walgate.kafka"):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(_request(3, 1, 11))  # Metadata v1, all topics
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, no answer
            writer.close()
        failed = [r for r in caplog.records if r.name == "walgate.kafka"]
        assert [(r.levelno, r.exc_info) for r in failed] == [(logging.ERROR, None)]
        message = failed[0].getMessage()
        assert "api key 3 v1 (client 'test') failed: RuntimeError: boom" in message
        reader, writer = await asyncio.open_connection(host, port)  # the server goes on
        writer.write(struct.pack(">i", 14) + struct.pack(">hhih", 18, 0, 12, 4) + b"test")
        assert (await read_frame(reader, 10))[0] == 12
        writer.close()


async def test_a_connection_whose_task_first_runs_after_stop_began_is_closed_unserved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection accepted just before the listener closed, whose task asyncio first runs once stop() has begun
    (so stop() neither cancels nor awaits it), is closed without a request served. Before, it was served after the
    node's storage had shut down: a Jepsen run's node logged a follower's WalFetch failing with "cannot schedule new
    futures after shutdown" after "walgate stopped"."""
    accepted, release = asyncio.Event(), asyncio.Event()
    connection = KafkaServer._connection

    async def first_run_late(self: KafkaServer, reader: Any, writer: Any, **kwargs: Any) -> None:
        accepted.set()
        await release.wait()  # (its task's first step, as asyncio may run it after stop() took its tasks)
        await connection(self, reader, writer, **kwargs)

    monkeypatch.setattr(KafkaServer, "_connection", first_run_late)
    gateway = Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0))
    await gateway.start()
    running = True
    try:
        host, port = gateway.kafka_address
        reader, writer = await asyncio.open_connection(host, port)
        try:
            await asyncio.wait_for(accepted.wait(), 10)
            writer.write(struct.pack(">i", 14) + struct.pack(">hhih", 18, 0, 12, 4) + b"test")  # ApiVersions v0
            running = False
            await gateway.stop()
            release.set()
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, no answer
        finally:
            writer.close()
    finally:
        release.set()
        if running:  # (a step before the stop failed: the gateway is stopped all the same)
            await gateway.stop()
