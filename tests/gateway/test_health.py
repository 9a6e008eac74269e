"""``/healthz`` (liveness) and ``/readyz`` (readiness) check real things, and fail for real causes.

- a healthy node: both 200, the readiness checks named, no probe file left behind;
- the data dir's probe path occupied by a directory: the write fails (EISDIR), ``/readyz`` answers 503 naming
  ``data_dir_writable`` while liveness stays 200; removing the directory makes it ready again;
- a full disk (a small tmpfs, filled; root only): ``/readyz`` 503 with ENOSPC, ready again once space is freed;
- a storage thread that does not answer (busy with a call that waits): ``/healthz``, ``/readyz`` and ``/metrics``
  answer 503 naming it; once it answers again so do they, and its queue depth is back to 0 (abandoned probes are
  accounted for);
- a coordinator lane that does not answer (the same, on the coordinator lane): ``/readyz`` 503 naming
  ``coordinator_lane`` alone, ``/healthz`` 200; once it answers, ready again and its queue depth back to 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.gateway.test_disk_full import fill, small_fs
from walgate.gateway import http_api, metrics
from walgate.gateway.config import Config
from walgate.gateway.server import Gateway
from walgate.gateway.storage_thread import StorageThread


async def get(gateway: Gateway, path: str) -> tuple[int, Any]:
    host, port = gateway.http_address
    async with aiohttp.ClientSession() as session, session.get(f"http://{host}:{port}{path}") as response:
        body = await response.json() if response.content_type == "application/json" else await response.text()
        return response.status, body


def _config(data_dir: Path) -> Config:
    return Config(data_dir=data_dir, kafka_port=0, http_port=0)


@contextlib.asynccontextmanager
async def held(lane: StorageThread) -> AsyncIterator[None]:
    """``lane`` busy with a call that waits on an Event until the block ends."""
    release = threading.Event()
    busy = asyncio.create_task(lane.call(release.wait, 30))
    try:
        yield
    finally:
        release.set()
        await busy


async def test_a_healthy_node_is_live_and_ready(tmp_path: Path) -> None:
    async with Gateway(_config(tmp_path / "data")) as gateway:
        assert await get(gateway, "/healthz") == (200, {"status": "ok", "quarantined": []})
        assert await get(gateway, "/readyz") == (200, {"status": "ready", "checks": {
            "storage_thread": "ok", "coordinator_lane": "ok", "data_dir_writable": "ok", "kafka_listener": "ok"}})
        assert not (tmp_path / "data" / http_api.PROBE_NAME).exists()


async def test_not_ready_while_the_probe_cannot_be_written(tmp_path: Path) -> None:
    async with Gateway(_config(tmp_path / "data")) as gateway:
        occupied = tmp_path / "data" / http_api.PROBE_NAME
        occupied.mkdir()
        (occupied / "keep").write_text("a directory in the way")
        status, body = await get(gateway, "/readyz")
        assert status == 503
        assert body["status"] == "not ready" and body["failed"] == ["data_dir_writable"]
        assert "Is a directory" in body["checks"]["data_dir_writable"]
        assert body["checks"]["storage_thread"] == "ok"
        assert (await get(gateway, "/healthz"))[0] == 200  # liveness: a restart would not help
        shutil.rmtree(occupied)
        assert (await get(gateway, "/readyz"))[0] == 200


async def test_not_ready_while_the_disk_is_full(tmp_path: Path) -> None:
    with small_fs(tmp_path / "fs") as fs:
        async with Gateway(_config(fs / "data")) as gateway:
            assert (await get(gateway, "/readyz"))[0] == 200
            filler = fill(fs, 0)
            status, body = await get(gateway, "/readyz")
            assert status == 503 and body["failed"] == ["data_dir_writable"]
            assert "No space left on device" in body["checks"]["data_dir_writable"]
            filler.unlink()
            assert (await get(gateway, "/readyz"))[0] == 200


async def test_a_storage_thread_that_does_not_answer_fails_readiness_not_liveness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # long enough that the lanes not held answer within it on a busy machine (the held one waits it out)
    monkeypatch.setattr(http_api, "HEALTH_TIMEOUT", 2.0)
    monkeypatch.setattr(metrics, "SCRAPE_TIMEOUT", 2.0)
    async with Gateway(_config(tmp_path / "data")) as gateway:
        async with held(gateway._storage):
            status, body = await get(gateway, "/healthz")  # alive, only busy: an orchestrator must not restart it
            assert status == 200 and body["status"] == "ok"
            status, body = await get(gateway, "/readyz")
            assert status == 503 and body["failed"] == ["storage_thread", "data_dir_writable"]
            assert body["checks"]["kafka_listener"] == "ok"
            status, body = await get(gateway, "/metrics")
            assert status == 503 and "storage thread did not answer" in body["desc"]
        assert (await get(gateway, "/healthz"))[0] == 200
        # the calls that timed out while it was held are still queued: the depth comes back to 0 once they ran
        for _ in range(100):  # bounded: 10 s
            status, text = await get(gateway, "/metrics")
            assert status == 200
            if "\nwalgate_storage_queue_depth 0.0\n" in text:
                break
            await asyncio.sleep(0.1)
        assert "\nwalgate_storage_queue_depth 0.0\n" in text
        assert '\nwalgate_lane_queue_depth{lane="storage"} 0.0\n' in text


async def test_a_coordinator_lane_that_does_not_answer_fails_readiness_not_liveness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_api, "HEALTH_TIMEOUT", 2.0)  # the storage thread's probe (an fsync) answers within it
    async with Gateway(_config(tmp_path / "data")) as gateway:
        async with held(gateway._coordinator):
            assert (await get(gateway, "/healthz"))[0] == 200
            status, body = await get(gateway, "/readyz")
            assert status == 503 and body["failed"] == ["coordinator_lane"]
            assert body["checks"] == {"storage_thread": "ok", "coordinator_lane": "no answer within 2 s",
                                      "data_dir_writable": "ok", "kafka_listener": "ok"}
        assert (await get(gateway, "/readyz"))[0] == 200
        status, text = await get(gateway, "/metrics")
        assert status == 200 and '\nwalgate_lane_queue_depth{lane="coordinator"} 0.0\n' in text


async def test_a_scrape_waiting_for_the_coordinator_lane_does_not_hold_the_storage_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The groups and committed offsets are asked of the coordinator lane from the event loop: while that lane is held
    a scrape answers 503 naming it, and the storage thread answers calls meanwhile (it was waiting inside the scrape's
    first call before)."""
    monkeypatch.setattr(metrics, "SCRAPE_TIMEOUT", 1.0)
    async with Gateway(_config(tmp_path / "data")) as gateway:
        async with held(gateway._coordinator):
            scrape = asyncio.create_task(get(gateway, "/metrics"))
            for _ in range(200):  # until the scrape waits for the coordinator lane (its storage call is done)
                if gateway._coordinator.queued:
                    break
                await asyncio.sleep(0.01)
            assert gateway._coordinator.queued and not scrape.done()
            assert await asyncio.wait_for(gateway._storage.call(lambda: "answered"), 0.5) == "answered"
            status, body = await scrape
            assert status == 503 and "coordinator lane did not answer" in body["desc"]
        assert (await get(gateway, "/metrics"))[0] == 200
