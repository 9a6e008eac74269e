"""Connection lines, the request log and the JSON log format.

- every Kafka connection logs one INFO line when its first request names the client (peer, client id, principal)
  and one when it closes (the same, the reason, the number of requests); a connection that never sent a request
  logs only its close;
- at DEBUG, ``kafka.request.logger`` (Kafka's logger name) logs each answered request with its api, version,
  correlation id, client id, peer, sizes and times;
- ``walgate serve --log-format json`` writes one JSON object per line (time, level, logger, message and the
  extra fields), and ``log_format`` is a setting like the others (file, env, flag).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from livewalgate import running_walgate
from tests.gateway.test_kafka_bad_input import (
    _closed,
    _header_v1,
    _parse_api_versions_v0,
    _recv_frame,
    _send,
)
from walgate.gateway.config import Config, ConfigError, load_config
from walgate.gateway.logs import JsonFormatter
from walgate.gateway.server import Gateway

CLIENT = b"log-test-client"


def api_versions(port: int, correlation_id: int = 7) -> str:
    """One ApiVersions v0 request on a new connection, then close it; returns the connection's local address."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        _send(sock, _header_v1(18, 0, correlation_id, CLIENT))
        assert _parse_api_versions_v0(_recv_frame(sock), correlation_id)[0] == 0
        host, local_port = sock.getsockname()[:2]
    return f"{host}:{local_port}"


def bad_frame(port: int) -> str:
    """Send a frame with a negative size; returns the connection's local address once the server closed it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\xff\xff\xff\xff")
        assert _closed(sock)
        return "{}:{}".format(*sock.getsockname()[:2])


async def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "not logged within 10 s"
        await asyncio.sleep(0.02)


async def test_each_connection_logs_its_open_and_close(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="walgate.kafka.connection")
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        port = gateway.kafka_address[1]
        peer = await asyncio.to_thread(api_versions, port)

        def lines(peer: str) -> list[logging.LogRecord]:
            return [r for r in caplog.records if r.name == "walgate.kafka.connection" and getattr(r, "peer", "") == peer]

        await wait_for(lambda: len(lines(peer)) == 2)
        opened, closed = lines(peer)
        assert opened.levelno == closed.levelno == logging.INFO
        assert (opened.client_id, opened.principal) == (CLIENT.decode(), "User:ANONYMOUS")  # type: ignore[attr-defined]
        assert f"kafka connection from {peer} opened" in opened.getMessage()
        assert CLIENT.decode() in opened.getMessage() and "User:ANONYMOUS" in opened.getMessage()
        assert (closed.client_id, closed.reason, closed.requests) == (  # type: ignore[attr-defined]
            CLIENT.decode(), "closed by the client", 1)
        assert "closed (closed by the client)" in closed.getMessage()

        with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:  # no request at all
            quiet = "{}:{}".format(*silent.getsockname()[:2])
        await wait_for(lambda: len(lines(quiet)) == 1)
        [closed] = lines(quiet)
        assert (closed.client_id, closed.requests) == (None, 0)  # type: ignore[attr-defined]

        garbled = await asyncio.to_thread(bad_frame, port)
        await wait_for(lambda: len(lines(garbled)) == 1)
        assert lines(garbled)[0].reason.startswith("bad frame")  # type: ignore[attr-defined]


async def test_requests_are_logged_at_debug_on_kafkas_request_logger(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="kafka.request.logger")
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0)) as gateway:
        peer = await asyncio.to_thread(api_versions, gateway.kafka_address[1], 41)
        await wait_for(lambda: any(r.name == "kafka.request.logger" for r in caplog.records))
    [line] = [r for r in caplog.records if r.name == "kafka.request.logger"]
    assert line.levelno == logging.DEBUG
    fields = {k: getattr(line, k) for k in ("api", "api_version", "correlation_id", "client_id", "peer",
                                            "request_bytes")}
    assert fields == {"api": "ApiVersions", "api_version": 0, "correlation_id": 41, "client_id": CLIENT.decode(),
                      "peer": peer, "request_bytes": 4 + 10 + len(CLIENT)}
    assert line.response_bytes > 10  # type: ignore[attr-defined]
    for part in ("total_ms", "request_queue_ms", "local_ms", "response_send_ms"):
        assert getattr(line, part) >= 0
    assert line.total_ms >= line.local_ms  # type: ignore[attr-defined]
    assert "Completed request ApiVersions v0 correlation id 41" in line.getMessage()


def test_walgate_serve_logs_json_lines(tmp_path: Path) -> None:
    with running_walgate(tmp_path, "--log-format", "json", "--log-level", "DEBUG") as server:
        peer = api_versions(server.kafka_port, 5)
        deadline = time.monotonic() + 10
        while "closed by the client" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        log = server.log()
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    assert not [line for line in lines if "exception" in line or line["level"] == "ERROR"]
    assert any(line["message"].startswith("walgate ready http=") for line in lines)
    mine = [line for line in lines if line.get("peer") == peer]
    assert [line["logger"] for line in mine] == [
        "walgate.kafka.connection", "kafka.request.logger", "walgate.kafka.connection"]
    opened, request, closed = mine
    assert (opened["client_id"], opened["principal"], opened["level"]) == (CLIENT.decode(), "User:ANONYMOUS", "INFO")
    assert (request["api"], request["correlation_id"], request["level"]) == ("ApiVersions", 5, "DEBUG")
    assert (closed["reason"], closed["requests"]) == ("closed by the client", 1)
    assert opened["time"].endswith("Z")


def test_log_format_is_a_setting(tmp_path: Path) -> None:
    assert load_config(env={"WALGATE_DATA_DIR": str(tmp_path), "WALGATE_LOG_FORMAT": "json"}).log_format == "json"
    assert load_config(env={}, overrides={"data_dir": tmp_path}).log_format == "text"
    with pytest.raises(ConfigError, match="log_format must be one of text, json"):
        Config(data_dir=tmp_path, log_format="xml")


def test_json_lines_carry_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("walgate.test", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info())
    line = json.loads(JsonFormatter().format(record))
    assert (line["level"], line["logger"], line["message"]) == ("ERROR", "walgate.test", "failed here")
    assert "Traceback" in line["exception"] and "ValueError: boom" in line["exception"]
