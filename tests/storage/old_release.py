"""Data dirs made by an older release's own code, for the migration tests (``format1_datadir.py``,
``format2_datadir.py``): :func:`main` is such a script's entry point, :func:`made_by` runs one with the release's
``walgate`` first on ``PYTHONPATH``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

REPO = Path(__file__).parent.parent.parent


def main(out: Path, make: Callable[[Path], None], summary: Callable[[Any], Any]) -> None:
    """``make`` a data dir in ``out/data``, then write ``out/expected.json``: ``summary`` of it, as that code answers."""
    from walgate.storage.engine import Engine

    make(out / "data")
    e = Engine.open(out / "data")
    try:
        (out / "expected.json").write_bytes(orjson.dumps(summary(e), option=orjson.OPT_INDENT_2))
    finally:
        e.close()


def made_by(commit: str, script: Path, tmp_path: Path) -> tuple[Path, Any]:
    """Run ``script`` with the code of ``commit`` (skipped when this clone does not have it): (its data dir, the
    summary it wrote)."""
    old = tmp_path / "old"
    old.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "walgate"], capture_output=True)
    if archive.returncode:
        pytest.skip(f"commit {commit} is not in this clone")
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(old)}
    subprocess.run([sys.executable, str(script), str(out)], env=env, cwd=tmp_path, check=True, timeout=120)
    return out / "data", orjson.loads((out / "expected.json").read_bytes())


def killed_when_paused(script: str, *args: str) -> None:
    """Run ``script`` (``python -c``, ``args`` its argv, walgate from this checkout) until it prints ``paused``, then
    kill it with SIGKILL (a real kill -9 at the point it paused at) and wait for it to end."""
    child = subprocess.Popen([sys.executable, "-c", script, *args], cwd=REPO, stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"paused\n"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
