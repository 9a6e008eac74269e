"""``walgate demo``: the one-command quick start runs end to end and cleans up."""

from __future__ import annotations

import subprocess
from pathlib import Path

from livewalgate import WALGATE, walgate_env

DEMO_TIMEOUT = 120.0


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WALGATE, "demo", *args], capture_output=True, text=True, timeout=DEMO_TIMEOUT, env=walgate_env()
    )


def test_demo_runs_and_shows_topics_and_data() -> None:
    result = run_demo()
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    out = result.stdout
    for expected in ("topic_meters", "topic_power", "meters", "d1001", "California.LosAngeles", "server stopped"):
        assert expected in out, expected
    assert result.stderr == ""
    assert len(out.splitlines()) < 120  # short and readable


def test_demo_keeps_an_explicit_data_dir_and_can_run_again(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo-data"
    for _ in range(2):
        result = run_demo("--data-dir", str(data_dir))
        assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert any(data_dir.iterdir())
