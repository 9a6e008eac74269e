"""The gateway's background loops meet a failing disk: the log cleaner and the periodic WAL fsync log one clear line
naming the error (no traceback: a disk error is not a bug), keep the server up and try again."""

from __future__ import annotations

import asyncio
import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from walgate.gateway import server
from walgate.gateway.config import Config
from walgate.gateway.server import Gateway


async def _failing_twice(monkeypatch: pytest.MonkeyPatch, name: str, caplog: pytest.LogCaptureFixture,
                         tmp_path: Path, **config: Any) -> list[logging.LogRecord]:
    """Replaces ``server.<name>`` by one that raises ENOSPC; the log records of a gateway once it was called twice."""
    calls = asyncio.Event()
    count = 0
    loop = asyncio.get_running_loop()

    def disk_full(*_args: Any) -> Any:
        nonlocal count
        count += 1
        if count >= 2:
            loop.call_soon_threadsafe(calls.set)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(server, name, disk_full)
    caplog.set_level(logging.INFO, logger="walgate")
    async with Gateway(Config(data_dir=tmp_path / "data", kafka_port=0, http_port=0, **config)):
        await asyncio.wait_for(calls.wait(), 10)
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_cleaner_pass_on_a_full_disk_logs_one_line_and_is_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    errors = await _failing_twice(monkeypatch, "_clean_now", caplog, tmp_path, log_cleaner_backoff_ms=10)
    assert errors and all(r.exc_info is None for r in errors), [r.getMessage() for r in errors]
    assert "log cleaner failed: [Errno 28] No space left on device" in errors[0].getMessage()


async def test_a_periodic_fsync_on_a_failing_disk_logs_one_line_and_is_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setattr(server, "SYNC_MAX_DELAY", 0.01)
    monkeypatch.setattr(server, "SYNC_MIN_DELAY", 0.01)
    errors = await _failing_twice(monkeypatch, "_sync_now", caplog, tmp_path)
    assert errors and all(r.exc_info is None for r in errors), [r.getMessage() for r in errors]
    assert "WAL fsync failed: [Errno 28] No space left on device" in errors[0].getMessage()
