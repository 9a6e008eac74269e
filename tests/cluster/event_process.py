"""A helper process that reports what it does as JSON lines on stdout (node_helper.py, follower_helper.py), run
under any command prefix (``ip netns exec NS``, ``faketime``), followed by the test and stopped by its PID."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

__all__ = ["EventProcess", "WAIT_S", "first_event"]

WAIT_S = 60.0  # every wait for an event ends within this (an election after a lease TTL, a healed link), or fails
HERE = Path(__file__).parent


class EventProcess:
    """``python <script> ARGS`` under ``prefix``; ``seen`` keeps every event read so far, in order."""

    def __init__(self, name: str, script: str, args: Sequence[str], log_path: Path, prefix: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        with open(log_path, "wb") as err:
            self.proc = subprocess.Popen([*prefix, sys.executable, str(HERE / script), *args],
                                         stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                         env=None if env is None else {**os.environ, **env})
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.events.put(json.loads(line))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def wait(self, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first event from now on that ``pred`` accepts (the test fails after WAIT_S)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                state = "running" if self.proc.poll() is None else f"exited with {self.proc.returncode}"
                pytest.fail(f"{self.name}: no {what} within {WAIT_S:g} s ({state}; its last events: {self.seen[-10:]}); "
                            f"its log:\n{self.log()}")
            self.seen.append(event)
            if pred(event):
                return event

    def reported(self, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """The first event ever reported (seen already, or from now on) that ``pred`` accepts."""
        for event in self.drain():
            if pred(event):
                return event
        return self.wait(pred, what)

    def drain(self) -> list[dict[str, Any]]:
        """Every event seen, after reading those already printed."""
        while True:
            try:
                self.seen.append(self.events.get_nowait())
            except queue.Empty:
                return self.seen

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


def first_event(procs: Sequence[EventProcess], pred: Callable[[dict[str, Any]], bool], what: str
                ) -> tuple[EventProcess, dict[str, Any]]:
    """The first of ``procs`` to report an event that ``pred`` accepts, and that event."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for p in procs:
            try:
                event = p.events.get(timeout=0.05)
            except queue.Empty:
                continue
            p.seen.append(event)
            if pred(event):
                return p, event
    pytest.fail(f"no {what} within {WAIT_S:g} s")
