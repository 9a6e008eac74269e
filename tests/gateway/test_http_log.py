"""walgate's HTTP server log (walgate.gateway.http_log) over a real aiohttp server on 127.0.0.1: a request aiohttp
cannot read as HTTP (a header line past 8190 bytes: test_serve_cluster_node_fuzz found it logged as an ERROR with a
traceback) is answered 400 by aiohttp and logged as one warning line; a handler's failure still with its traceback."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from walgate.gateway.http_log import ServerLog


async def _fail(request: web.Request) -> web.Response:
    raise RuntimeError("a bug")


async def _ask(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)  # aiohttp closes the connection after an error
    finally:
        writer.close()


async def test_a_request_aiohttp_cannot_read_is_a_warning_and_a_bug_keeps_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "aiohttp.server")
    app = web.Application()
    app.router.add_post("/fail", _fail)
    runner = web.AppRunner(app, logger=ServerLog())
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        answer = await _ask(port, b"POST /rest/sql HTTP/1.1\r\nHost: x\r\nX-Walgate-Signature: " + b"0" * 20000
                            + b"\r\nContent-Length: 0\r\n\r\n")
        assert answer.split(b" ", 2)[1] == b"400", answer[:100]
        [record] = [r for r in caplog.records if r.name == "aiohttp.server"]
        assert record.levelno == logging.WARNING and record.exc_info is None
        assert "127.0.0.1" in record.getMessage() and "HTTP 400" in record.getMessage()
        assert "8190 bytes" in record.getMessage()
        caplog.clear()
        answer = await _ask(port, b"POST /fail HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        assert answer.split(b" ", 2)[1] == b"500", answer[:100]
        [record] = [r for r in caplog.records if r.name == "aiohttp.server"]
        assert record.levelno == logging.ERROR and record.exc_info is not None
    finally:
        await runner.cleanup()
