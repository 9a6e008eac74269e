"""Real etcd clusters for the control-plane tests: Debian's ``etcd`` (etcd-server 3.4) members on 127.0.0.1, or on
the addresses of network namespaces (netns.py).

Each member runs in its own data dir, on free ports, and is stopped by its PID (SIGKILL for :meth:`Member.kill`,
SIGTERM then SIGKILL at teardown); its log is under the test's tmp dir. The data dirs are on ``/dev/shm`` (a
tmpfs) when it has room, removed when the cluster closes: on a disk that the other tests load, etcd's fdatasync
stalled for 3.3 s (its log: "slow fdatasync"), its writes missed the sessions' 3-5 s timeouts and its leases lapsed,
failing tests that exercise walgate, not etcd's disk (etcd's durability across kill -9 is the same: what a killed
process wrote is in the page cache either way). When ``etcd`` is not installed the fixture fails with how to
install it: these tests are never skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from livewalgate import dying_with_this_process, free_port

__all__ = ["EtcdCluster", "Member", "etcd_cluster", "free_port"]

_START_S = 30.0  # a member answering /health, on a loaded machine
_TMPFS = Path("/dev/shm")
_TMPFS_FREE = 2 << 30  # bytes it must have free to take a cluster's data dirs (each member's WAL preallocates 64 MiB)


def etcd_binary() -> str:
    path = shutil.which("etcd") or ("/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)
    if path is None:
        pytest.fail("etcd is not installed: the cluster tests run real etcd members. Install Debian's etcd-server"
                    " (`apt-get install etcd-server`; .ci/run does)")
    return path


class Member:
    """One etcd member; :meth:`start` (again after :meth:`kill`/:meth:`stop`) keeps its data dir and ports."""

    def __init__(self, name: str, root: Path, initial_cluster: str, token: str, host: str = "127.0.0.1",
                 prefix: Sequence[str] = (), data_root: Path | None = None) -> None:
        self.name = name
        self.host = host
        self.prefix = list(prefix)  # what the member runs under (e.g. ``ip netns exec NS``)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = (data_root or root) / name
        self.log_path = root / f"{name}.log"
        self.initial_cluster = initial_cluster
        self.token = token
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    @property
    def client_url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, f"{self.name} is running"
        args = [*self.prefix, etcd_binary(), "--name", self.name, "--data-dir", str(self.data_dir),
                "--listen-client-urls", self.client_url, "--advertise-client-urls", self.client_url,
                "--listen-peer-urls", self.peer_url, "--initial-advertise-peer-urls", self.peer_url,
                "--initial-cluster", self.initial_cluster, "--initial-cluster-token", self.token,
                "--initial-cluster-state", "new", "--heartbeat-interval", "100", "--election-timeout", "1000",
                "--logger", "zap", "--log-outputs", "stderr"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(dying_with_this_process(args), stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)

    def healthy(self) -> bool:
        """Whether the member answers /health with a leader (a quorum)."""
        try:
            with urllib.request.urlopen(self.client_url + "/health", timeout=2) as r:
                return b'"true"' in r.read()
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL by PID (a process crash: what it wrote stays, as in the page cache of a disk; no power loss)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""


class EtcdCluster:
    """``size`` members; member i listens on ``hosts[i]`` and runs under ``prefixes[i]`` when given (a network
    namespace: netns.py), else on 127.0.0.1."""

    def __init__(self, root: Path, size: int, hosts: Sequence[str] = (), prefixes: Sequence[Sequence[str]] = ()
                 ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        names = [f"m{i}" for i in range(size)]
        self.members: list[Member] = []
        token = f"walgate-test-{os.getpid()}-{free_port()}"
        self.tmpfs = _tmpfs_dir()  # the members' data dirs' parent when on the tmpfs; removed by :meth:`close`
        for i, name in enumerate(names):
            self.members.append(Member(name, root, "", token, hosts[i] if hosts else "127.0.0.1",
                                       prefixes[i] if prefixes else (), self.tmpfs))
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            m.initial_cluster = initial

    @property
    def endpoints(self) -> list[tuple[str, int]]:
        return [(m.host, m.client_port) for m in self.members]

    @property
    def spec(self) -> str:
        return ",".join(m.client_url for m in self.members)

    def start(self) -> None:
        for m in self.members:
            m.start()
        self.wait_healthy(self.members)

    def wait_healthy(self, members: list[Member]) -> None:
        deadline = time.monotonic() + _START_S
        while not all(m.healthy() for m in members):
            for m in members:
                if m.proc is not None and m.proc.poll() is not None:
                    pytest.fail(f"etcd member {m.name} exited ({m.proc.returncode}):\n{m.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail("etcd did not become healthy within "
                            f"{_START_S:g} s:\n" + "\n".join(m.log_tail() for m in members))
            time.sleep(0.1)

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def close(self) -> None:
        """Every member stopped, and the data dirs on the tmpfs removed (they hold its memory)."""
        self.stop()
        if self.tmpfs is not None:
            shutil.rmtree(self.tmpfs, ignore_errors=True)


def _tmpfs_dir() -> Path | None:
    """A new directory on :data:`_TMPFS` when it is a directory with :data:`_TMPFS_FREE` bytes free, else None."""
    try:
        stat = os.statvfs(_TMPFS)
    except OSError:
        return None
    if stat.f_bavail * stat.f_frsize < _TMPFS_FREE:
        return None
    return Path(tempfile.mkdtemp(prefix="walgate-etcd-", dir=_TMPFS))


@contextmanager
def etcd_cluster(root: Path, size: int = 1, hosts: Sequence[str] = (), prefixes: Sequence[Sequence[str]] = ()
                 ) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(root, size, hosts, prefixes)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
