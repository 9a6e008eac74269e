"""Launching the client programs and peer brokers the compat tests drive.

One place for every external process: bounded timeouts everywhere, 127.0.0.1
only, every process stopped by its own PID (SIGTERM, then SIGKILL). A finished
client's output is returned as a :class:`Run`; a failure message always carries
the command, the exit code, stderr and the end of stdout.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from livewalgate import stop_process as stop

COMPAT = Path(__file__).resolve().parent
STOP_TIMEOUT = 10.0


def program_name(argv: Sequence[str]) -> str:
    """The program a command line runs: its script's file name, else the main class after ``java``'s ``-cp <path>``
    (``setup_clients.java_program``), else ""."""
    script = next((Path(a).name for a in argv if a.endswith((".py", ".java", ".js"))), None)
    if script is not None:
        return script
    after_cp = [argv[i + 2] for i, a in enumerate(argv[:-2]) if a == "-cp"]
    return after_cp[0] if after_cp else ""


@dataclass(frozen=True)
class Run:
    """A finished client process."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def headline(self) -> str:
        """One line saying what went wrong: the client's error event, else its last exception/error line."""
        for d in self.json_lines():
            if d.get("event") == "error":
                return json.dumps(d)[:400]
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        causes = [ln for ln in lines if ln.startswith("Caused by:")] or \
                 [ln for ln in lines if "Exception" in ln or "Error" in ln or "ERROR" in ln]
        return (causes[-1] if causes else lines[-1] if lines else "(no stderr)")[:400]

    def describe(self) -> str:
        tail = self.stdout[-6000:]
        name = f"{Path(self.argv[0]).name} {program_name(self.argv)}".strip()
        return (
            f"{name} (exit code {self.returncode}): {self.headline()}\n"
            f"$ {shlex.join(self.argv)}\nexit code {self.returncode}\n"
            f"--- stderr ---\n{self.stderr[-6000:]}\n--- stdout (last {len(tail)} chars) ---\n{tail}"
        )

    def json_lines(self) -> list[dict[str, Any]]:
        """stdout's lines that are JSON objects (others are ignored)."""
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [d for d in self.json_lines() if d.get("event") == name]


def run(argv: Sequence[str], timeout: float, *, check: bool = True, cwd: Path | None = None,
        env: dict[str, str] | None = None) -> Run:
    """Run ``argv`` to completion within ``timeout`` s (killed by PID after that; the test fails)."""
    proc = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        cwd=cwd, env=env, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate(timeout=STOP_TIMEOUT)
        result = Run(tuple(argv), proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
        pytest.fail(f"timed out after {timeout} s:\n{result.describe()}")
    result = Run(tuple(argv), proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
    if check and result.returncode != 0:
        pytest.fail(f"client failed:\n{result.describe()}")
    return result


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group that ``proc`` leads (it was started with start_new_session)."""
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass



@dataclass
class Background:
    """A long-running client whose stdout/stderr lines are collected by reader threads."""

    argv: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, argv: Sequence[str]) -> Background:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        bg = cls(tuple(argv), proc)
        for stream, sink in ((proc.stdout, bg.out), (proc.stderr, bg.err)):
            threading.Thread(target=_pump, args=(stream, sink), daemon=True).start()
        return bg

    def wait_for(self, predicate: Any, timeout: float, what: str) -> None:
        """Wait until ``predicate(self)`` is true; fail the test (showing the output) after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return
            if self.proc.poll() is not None and not predicate(self):
                break
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"{what}: not seen within {timeout} s\n{self.describe()}")

    def stop(self) -> None:
        stop(self.proc)

    def describe(self) -> str:
        return (f"$ {shlex.join(self.argv)}\nexit code {self.proc.poll()}\n--- stderr ---\n"
                + "".join(self.err)[-6000:] + "\n--- stdout ---\n" + "".join(self.out)[-6000:])


def _pump(stream: Any, sink: list[str]) -> None:
    for line in iter(stream.readline, b""):
        sink.append(line.decode(errors="replace"))
    stream.close()


def wait_accepting(port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """True once 127.0.0.1:``port`` accepts a TCP connection (False after ``timeout`` s or if ``proc`` died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False
