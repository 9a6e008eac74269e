"""``walgate demo``: the one-command quick start streams rows, consumes them, stops cleanly (also on Ctrl-C)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from livewalgate import WALGATE, stop_process, walgate_env

DEMO_TIMEOUT = 120.0


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WALGATE, "demo", "--kafka-port", "0", *args], capture_output=True, text=True, timeout=DEMO_TIMEOUT,
        env=walgate_env(),
    )


def test_demo_streams_rows_consumes_them_and_shows_the_commands() -> None:
    result = run_demo("--duration", "3", "--rate", "100", "--consume")
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    out = result.stdout
    for expected in ("topic_meters", "topic_power", "kcat -b 127.0.0.1:", "kafka-console-consumer.sh --bootstrap-server",
                     "spark-submit --packages", "records received by demo-group", "SHOW SUBSCRIPTIONS",
                     "California.", "server stopped"):
        assert expected in out, expected
    written = int(next(line for line in out.splitlines() if "rows written" in line).split("│")[2].replace(",", ""))
    received = int(next(line for line in out.splitlines() if "records received" in line).split("│")[2].replace(",", ""))
    assert 150 <= written <= 450 and 0 < received <= written, (written, received)
    subscriptions = [line for line in out.splitlines() if line.lstrip("│ ").startswith("topic_meters")]
    assert len(subscriptions) == 4 and all("demo-group" in line for line in subscriptions)  # one per vgroup
    assert result.stderr == ""


def test_ctrl_c_stops_everything_cleanly() -> None:
    proc = subprocess.Popen([*WALGATE, "demo", "--kafka-port", "0", "--consume"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=walgate_env())
    try:
        deadline = time.monotonic() + 60
        seen = ""
        while "Consume it" not in seen and time.monotonic() < deadline:
            seen += proc.stdout.readline()  # type: ignore[union-attr]
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, f"stdout:\n{seen}{out}\nstderr:\n{err}"
    assert "server stopped" in out and err == ""


def test_demo_keeps_an_explicit_data_dir_and_can_run_again(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo-data"
    for _ in range(2):
        result = run_demo("--data-dir", str(data_dir), "--duration", "1")
        assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert any(data_dir.iterdir())
