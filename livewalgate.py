"""A real ``walgate serve`` subprocess on 127.0.0.1, for tests/ and compat-tests/ alike.

:func:`running_walgate` starts ``walgate serve`` (:data:`WALGATE`) with a fresh data
directory (HTTP on an ephemeral port read back from the ``walgate ready`` line,
Kafka on a free port), waits for the ready line with a bounded timeout, yields a
:class:`WalgateServer` (unpackable as ``http_url, kafka_port, data_dir, proc``) and
stops the process by PID afterwards: SIGTERM, then SIGKILL if it does not exit.
The server's stdout and stderr go to ``walgate.log`` in its work directory (a
file, not a pipe, so a chatty server can never block on a full pipe).
:meth:`WalgateServer.rss_mib` reads the process's resident memory, for tests that bound it.
:func:`soak_cycles` sizes the kill -9 loops: a bounded slice in CI, the long run under ``WALGATE_SOAK=1``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

READY_TIMEOUT = 60.0
"""The longest a ``walgate serve`` may take to print its ready line. A start takes 1-3 s on a quiet machine; on a
shared one under load (several test runs at once) a cluster node's took up to 25 s, and 30 s failed runs that had
found nothing wrong: a timeout that fails under load is a bug of the test."""
STOP_TIMEOUT = 15.0
WALGATE = [sys.executable, "-m", "walgate.gateway.cli"]
"""``walgate`` as installed: the console script's module (it never imports hypothesis, even where it is installed:
walgate/__init__.py)."""
SOAK = os.environ.get("WALGATE_SOAK") == "1"


def soak_cycles(ci: int, soak: int) -> int:
    """How many kill -9 cycles a crash loop runs: ``ci`` (each at a seeded random point, the suite's slice), or
    ``soak`` under ``WALGATE_SOAK=1`` (the long run)."""
    return soak if SOAK else ci


_READY = re.compile(r"walgate ready .*\bhttp=(?P<host>[^\s:]+):(?P<port>\d+) kafka=[^\s:]+:(?P<kafka>\d+)")


@dataclass(frozen=True)
class WalgateServer:
    """A running server; unpacks as ``(http_url, kafka_port, data_dir, proc)``."""

    http_url: str
    kafka_port: int
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path

    def __iter__(self) -> Iterator[Any]:
        return iter((self.http_url, self.kafka_port, self.data_dir, self.proc))

    def log(self) -> str:
        """Everything the server has written to stdout/stderr so far."""
        return self.log_path.read_text(errors="replace")

    def rss_mib(self) -> float:
        """The server process's resident set size (VmRSS) in MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no VmRSS for pid {self.proc.pid}")


_FIRST_PORT = 10_000


def _port_order() -> Iterator[int]:
    """The ports :func:`free_port` tries, each once: the kernel gives every outgoing connection a local port from
    ``ip_local_port_range`` (32768-60999 by default), so a port taken by binding 0 and handed to a server that binds
    it a moment later could meanwhile be a connection's ('address already in use': compat-tests' module node in
    123c4b2's CI run, a Jepsen node on 2026-12-01). Below that range only a server binds a port: this process's
    from ``_FIRST_PORT`` up, in a part of its own per xdist worker (``PYTEST_XDIST_WORKER``), from a point drawn by
    its pid, in turn."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32_768
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % workers
    size = (ephemeral - _FIRST_PORT) // workers
    if size < 100:  # (a machine whose ephemeral range starts low: the kernel's choice, as before)
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                yield int(s.getsockname()[1])
    first = _FIRST_PORT + worker * size
    start = random.Random(os.getpid()).randrange(size)
    for k in range(size):
        yield first + (start + k) % size


_PORTS = _port_order()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago, outside the range the kernel takes connections' local
    ports from, and that this process has not handed out before (:func:`_port_order`; two ports taken in a row for
    one server, say etcd's client and peer ports, must differ)."""
    for port in _PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # a server of another test (or process) has it
                continue
        return port
    raise AssertionError("no free port left in this process's part of the range")


def walgate_env() -> dict[str, str]:
    """The test process's environment without WALGATE_* overrides."""
    return {k: v for k, v in os.environ.items() if not k.startswith("WALGATE_")}


def dying_with_this_process(command: Sequence[str]) -> list[str]:
    """``command`` run so that it is killed (SIGKILL) when the test process dies: a test process that dies without
    running its finalizers (librdkafka's abort(), kill -9 of an xdist worker) would otherwise leave the servers it
    started running for the rest of the run. ``setpriv --pdeathsig`` (util-linux) keeps the PID: the child execs
    ``command``. Only from the main thread: Linux sends the signal when the thread that started the child ends, and
    only the main thread lasts as long as the process (elsewhere ``command`` is returned as it is)."""
    if threading.current_thread() is not threading.main_thread():
        return list(command)
    return ["setpriv", "--pdeathsig", "KILL", *command]


def stop_process(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> int:
    """SIGTERM ``proc`` (by PID), SIGKILL it if it has not exited within ``timeout``; returns its exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait(timeout)


@contextlib.contextmanager
def running_walgate(
    workdir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    data_dir: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
    kafka_port: int | None = None,
    prefix: Sequence[str] = (),
    host: str = "127.0.0.1",
) -> Iterator[WalgateServer]:
    """Run ``walgate serve`` in ``workdir`` until the block exits; ``args`` are extra flags, ``preexec_fn`` runs in
    the child before it starts (e.g. to lower a resource limit); ``kafka_port``: the port of the Kafka listener
    (by default 0: the port the kernel gives the listener, which its ready line names; a port taken free beforehand
    could be taken meanwhile by another process, as an outgoing connection's local port), for a caller that needs
    it before the start (a restart on the same port) or configures the listener itself; ``prefix``: what the server runs
    under (``ip netns exec NS``: a network namespace, where it listens on ``host``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = data_dir or workdir / "data"
    kafka_port = kafka_port or 0
    command = [
        *prefix, *WALGATE, "serve", "--data-dir", str(data_dir), "--host", host,
        "--http-port", "0", "--kafka-port", str(kafka_port), *args,
    ]
    log_path = workdir / "walgate.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            dying_with_this_process(command), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env or walgate_env(), preexec_fn=preexec_fn,
        )
    server = WalgateServer("", kafka_port, data_dir, proc, log_path)
    try:
        host, port, bound = _wait_ready(server)
        yield replace(server, http_url=f"http://{host}:{port}", kafka_port=kafka_port or bound)
    finally:
        stop_process(proc)


def _wait_ready(server: WalgateServer) -> tuple[str, int, int]:
    """(HTTP host, HTTP port, the first Kafka listener's port) of the server's ready line."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        match = _READY.search(server.log())
        if match:
            return match["host"], int(match["port"]), int(match["kafka"])
        if server.proc.poll() is not None:
            pytest.fail(f"walgate serve exited with {server.proc.returncode} before ready:\n{server.log()}")
        time.sleep(0.05)
    pytest.fail(f"walgate serve not ready within {READY_TIMEOUT} s:\n{server.log()}")
