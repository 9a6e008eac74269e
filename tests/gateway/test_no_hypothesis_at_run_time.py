"""hypothesis is a test dependency: ``walgate serve`` and its worker processes never import it, even where it is
installed (kio would, to register strategies for its types: walgate/__init__.py loads kio with it hidden)."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from livewalgate import WALGATE, running_walgate, walgate_env
from walgate.gateway.ingest_workers import IngestWorkers
from walgate.gateway.query_workers import QueryWorkers

_IN_WORKER = "'hypothesis' in __import__('sys').modules"
"""Evaluated in a worker (eval and a string pickle by value and name: the worker imports nothing more for it)."""


def _imported(stderr: str) -> list[str]:
    """The modules ``python -X importtime`` reported importing, in order, one entry per import (per process)."""
    return [line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")]


def _sql(http_url: str, statement: str) -> list[list[Any]]:
    request = urllib.request.Request(f"{http_url}/rest/sql", data=statement.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=60) as answer:
        return list(json.load(answer)["data"])


def test_the_cli_imports_kio_but_not_hypothesis() -> None:
    done = subprocess.run([WALGATE[0], "-X", "importtime", *WALGATE[1:], "--help"], capture_output=True, text=True,
                          env=walgate_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: walgate"), done.stdout  # the CLI's own parser ran
    imported = set(_imported(done.stderr))
    assert {"walgate.gateway.config", "kio.static._phantom"} <= imported  # kio's module that asks for hypothesis
    assert "hypothesis" not in imported  # its package never loads (only the refused hypothesis.strategies shows)


async def test_query_and_ingest_workers_do_not_import_hypothesis() -> None:
    for workers in (QueryWorkers(1, 0, 1 << 20), IngestWorkers(1)):
        try:
            assert workers._pool().submit(eval, _IN_WORKER).result(timeout=60) is False
            assert len(workers.pids) == 1
        finally:
            await workers.close()


def test_serve_and_its_query_worker_do_not_import_hypothesis(tmp_path: Path) -> None:
    env = walgate_env() | {"PYTHONPROFILEIMPORTTIME": "1"}  # -X importtime, inherited by the spawned workers
    with running_walgate(tmp_path, env=env) as server:
        for statement in ("CREATE DATABASE nh", "CREATE TABLE nh.t (ts TIMESTAMP, v INT)",
                          "INSERT INTO nh.t VALUES (1700000000000, 7)"):
            _sql(server.http_url, statement)
        assert _sql(server.http_url, "SELECT v FROM nh.t") == [[7]]  # run by a query worker
        imported = _imported(server.log())
    assert imported.count("walgate.gateway.query_workers") == 2, "the server and one query worker imported walgate"
    assert "hypothesis" not in imported  # only kio's refused hypothesis.strategies shows, once per process
