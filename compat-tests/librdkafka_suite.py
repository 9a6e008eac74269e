"""Run librdkafka's own test suite (its ``tests/`` directory) against a live walgate: opt-in, not part of CI.

    .venv/bin/python compat-tests/librdkafka_suite.py [--source DIR] [--set single-broker|txn|compaction|all]
                                                       [--tests 0077,0103,...] [--local] [--jobs 2] [--report DIR]

The source is a librdkafka source tree (``--source`` or ``LIBRDKAFKA_SRC``; by default the one bundled in
``compat-tests/node/node_modules/@confluentinc/kafka-javascript/deps/librdkafka``, already built by
``setup_clients.py``, librdkafka 2.15.1). It is copied once into ``.cache/librdkafka-suite/src-<version>/`` (mtimes
kept, so an already built library is not rebuilt), configured if needed and built with ``nice -n 10 make -j2``
(0053 and 0098 again with RapidJSON when its headers are installed: :func:`with_rapidjson`).

Each of the suite's scenarios (:data:`SCENARIOS`: ``default`` = auto-created topics with 4 partitions,
``noautocreate``) gets its own ``walgate serve`` on 127.0.0.1 (a fresh data dir, ACLs on with everything allowed,
Kafka's default initial rebalance delay), one after the other. Every selected test number runs alone as
``TESTS=<number> TEST_SCENARIO=<scenario> test-runner -p1 -K -L`` (broker tests only, no known-issue tests;
``--quick`` adds ``-Q``, which skips every subtest not marked quick) with ``test.conf`` =
``bootstrap.servers=127.0.0.1:<port>`` and ``KAFKA_PATH`` = :func:`kafka_path`; a table of every test's PASSED /
FAILED / SKIPPED with the suite's own reason (a failure's subtest and assertion) is printed. The output of each test
number is in ``.cache/librdkafka-suite/run-<time>/<number>.log``, the servers' in ``<scenario>/walgate.log``; each
walgate is stopped by PID, also on Ctrl-C or SIGTERM.

Three tests need a secured listener, as trivup starts its cluster with ``--ssl`` or ``--sasl`` for them
(:data:`SECURED`): each runs against a walgate of its own (:func:`ssl_setup`, :func:`sasl_setup`), configured by a
``server.properties``, with the client settings in ``test.conf`` and trivup's environment variables:

- ``0097_ssl_verify``: an SSL listener with ``ssl.client.auth=required``, TLS 1.2 (trivup's broker has
  ``ssl.enabled.protocols=TLSv1.2,TLSv1.1,TLSv1``: the test expects a refused client certificate to fail the client's
  handshake, which under TLS 1.3 the client finishes before the broker's refusal arrives) and testcerts' CA, server
  and client certificates, given to the test as trivup does (``SSL_pkcs``: the client key, certificate and CA in PKCS#12;
  ``SSL_pub_der`` / ``SSL_priv_der`` / ``SSL_ca_der``, the PEM files, ``SSL_password``);
- ``0135_sasl_credentials`` and ``0142_reauthentication``: a SASL_PLAINTEXT listener with
  ``sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512`` and ``connections.max.reauth.ms=10000``, logged in as root with
  SCRAM-SHA-512 (0135 sets wrong credentials, then the right ones with ``rd_kafka_sasl_set_credentials``; both have
  share-consumer subtests, which run with ``--kafka-version 4.2.0``; their OAUTHBEARER subtests skip).

Which tests are in ``single-broker``: the suite's tests that need a broker (not ``TEST_F_LOCAL``, not named
``_mock``), are not manual or known issues, and whose minimum broker version is at most ``--kafka-version`` (4.1 by
default; ``--kafka-version 4.2.0`` adds the share-consumer tests 0170-0186, issue 27, e.g. ``--tests 0170,0171,...``),
minus :data:`NEEDS_MORE`, the tests that need what one walgate is not.
``--local`` adds the mock-cluster tests (they never talk to walgate). ``txn`` and ``compaction`` are
:data:`TRANSACTIONS` and :data:`COMPACTION`. The suite is run as it is but for one patch,
:func:`cap_replication_factor` (its topic-creating helper asks for replication factor 3 in 0098 and 0103).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from livewalgate import free_port, running_walgate, walgate_env  # noqa: E402

BUNDLED = ROOT / "compat-tests/node/node_modules/@confluentinc/kafka-javascript/deps/librdkafka"
CACHE = ROOT / ".cache/librdkafka-suite"
_RUNNING: set[subprocess.Popen[bytes]] = set()  # test-runner processes now running, killed on an interrupt
TEST_TIMEOUT = 900.0  # seconds, one test-runner invocation (the suite's own timeouts are shorter)
# Every walgate: ACLs on but everything allowed until a test adds an ACL (0109, 0115, 0119 deny a topic with
# kafka-acls.sh), Kafka's default initial rebalance delay (3 s; the suite's clusters keep it: 0089 needs both
# consumers in the group's first generation), and as run-all-tests.sh a share-group record lock down to 1 s (the
# share-consumer tests 0170-0185 set 3 s)
_COMMON_FLAGS = ("--authorizer-class-name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "--allow-everyone-if-no-acl-found", "true", "--group-initial-rebalance-delay-ms", "3000",
                 "--override", "group.share.min.record.lock.duration.ms=1000")
# The suite's scenarios this harness serves: walgate's flags and each test number's log file name.
SCENARIOS = {
    "default": ("--auto-create-topic-partitions", "4", *_COMMON_FLAGS),
    "noautocreate": _COMMON_FLAGS,  # walgate creates no topic on its own by default
}
LOG_NAME = {"default": "{}.log", "noautocreate": "{}-noautocreate.log"}

# The suite's broker tests that one walgate cannot serve, and why (read from each test's source).
NEEDS_MORE = {
    "0101": "fetch from follower: a replica on a broker in another rack",
    "0126": "SASL/OAUTHBEARER OIDC: needs an OIDC token endpoint (trivup)",
}
SECURED = {"0097": "ssl", "0135": "sasl", "0142": "sasl"}
"""Test number -> the secured listener its walgate has (see the module docstring)."""
REAUTH_MS = 10_000  # 0142: connections.max.reauth.ms, which the test reads with DescribeConfigs
_PASSWORD = "suite-s3cret"  # 0097's key store password, 0135's and 0142's root password
# The broker tests that use transactions (a transactional producer or a read_committed consumer), and idempotence
TRANSACTIONS = ("0055", "0061", "0090", "0094", "0098", "0103", "0129", "0137")
# The broker tests that use compacted topics: 0011 (keyless records refused with INVALID_RECORD), 0077, 0081 (configs)
COMPACTION = ("0011", "0077", "0081")

_SUMMARY = re.compile(r"^\|\s*(?P<name>\d{4}_\w+)\s*\|\s*(?P<state>[A-Z]+)\s*\|\s*(?P<secs>[\d.]+)s\s*\|"
                      r"\s*(?P<why>.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FAILED = re.compile(r'### Test "(?P<name>\w+)(?: \((?P<sub>.*)\))?" failed at (?P<where>\S+) at ')
_DONE = re.compile(r"={5,} Test (?P<name>\w+) (?P<state>PASSED|FAILED|SKIPPED) ={5,}")
_STAMP = re.compile(r"^\[(?P<name>\w+)\s*/\s*(?P<t>[\d.]+)s\]")
_SKIP_REASON = re.compile(r"^\[(?P<name>\w+)\s*/\s*[\d.]+s\].*SKIPPING TEST: (?P<why>.*)")


@dataclass(frozen=True)
class SuiteTest:
    """One entry of the suite's ``tests[]`` table in ``tests/test.c``."""

    name: str
    flags: str
    min_version: tuple[int, ...]
    scenarios: tuple[str, ...]  # the cluster set-ups it runs on (``.scenario``; ``default`` when unset)

    @property
    def number(self) -> str:
        return self.name[:4]


@dataclass(frozen=True)
class Outcome:
    name: str
    state: str
    seconds: float
    why: str


def suite_tests(tests_dir: Path) -> list[SuiteTest]:
    """The entries of ``tests[]`` (every ``_TEST(name, flags, ...)`` whose entries end a line)."""
    text = (tests_dir / "test.c").read_text()
    body = text[text.index("struct test tests[] = {"):]
    body = body[: body.index("\n};")]
    found = []
    for entry in re.split(r"\n(?=\s*_TEST\()", body):
        m = re.match(r"\s*_TEST\((\d{4}_\w+),\s*([^,)]*)", entry)
        if not m:
            continue
        ver = re.search(r"TEST_BRKVER\((\d+),\s*(\d+),\s*(\d+),\s*(\d+)\)", entry)
        version = tuple(int(v) for v in ver.groups()) if ver else (0, 0, 0, 0)
        scenario = re.search(r'\.scenario\s*=\s*"([^"]*)"', entry)
        found.append(SuiteTest(m[1], m[2].strip(), version, tuple(scenario[1].split(",") if scenario else ["default"])))
    return found


def select(tests: list[SuiteTest], which: str, version: tuple[int, ...], local: bool) -> list[str]:
    """The test numbers of set ``which``, in suite order."""
    numbers: list[str] = []
    for t in tests:
        if "TEST_F_MANUAL" in t.flags or "TEST_F_KNOWN_ISSUE" in t.flags.replace("TEST_F_KNOWN_ISSUE_", ""):
            continue
        if ("TEST_F_LOCAL" in t.flags or t.name.endswith("_mock")) and not local:  # 0139, 0150: mock, unflagged
            continue
        if t.min_version > version or t.number in numbers:
            continue
        if which == "txn" and t.number not in TRANSACTIONS:
            continue
        if which == "compaction" and t.number not in COMPACTION:
            continue
        if which == "single-broker" and t.number in NEEDS_MORE:
            continue
        numbers.append(t.number)
    return numbers


def prepare(source: Path) -> Path:
    """The ``tests/`` directory of a built copy of ``source`` under :data:`CACHE` (built once)."""
    header = (source / "src/rdkafka.h").read_text()
    hexver = int(re.search(r"#define RD_KAFKA_VERSION\s+0x([0-9a-fA-F]+)", header)[1], 16)  # type: ignore[index]
    version = f"{hexver >> 24}.{(hexver >> 16) & 0xFF}.{(hexver >> 8) & 0xFF}"
    tree = CACHE / f"src-{version}"
    runner = tree / "tests/test-runner"
    if runner.exists():
        with_rapidjson(tree / "tests")
        cap_replication_factor(tree / "tests")
        return tree / "tests"
    if not tree.exists():
        shutil.copytree(source, tree, symlinks=True)
    nice = ["nice", "-n", "10"]
    if not (tree / "Makefile.config").exists():
        subprocess.run(["./configure"], cwd=tree, check=True)
    subprocess.run([*nice, "make", "-j2", "libs"], cwd=tree, check=True)
    subprocess.run([*nice, "make", "-j2", "build"], cwd=tree / "tests", check=True)
    with_rapidjson(tree / "tests")
    cap_replication_factor(tree / "tests")
    return tree / "tests"


_CREATE_CALL = """        newt[0] =
            rd_kafka_NewTopic_new(topicname, partition_cnt, replication_factor,"""
_RF_CAP = """        if (test_getenv("TEST_MAX_REPLICATION_FACTOR", NULL) &&
            replication_factor > atoi(test_getenv("TEST_MAX_REPLICATION_FACTOR", NULL)))
                replication_factor = atoi(test_getenv("TEST_MAX_REPLICATION_FACTOR", NULL));
"""


def cap_replication_factor(tests_dir: Path) -> None:
    """The one change to the suite: its topic-creating helper ``test_admin_create_topic()`` asks for the
    replication factor its caller names, 3 in 0098 and 0103 (the suite's clusters have 3 brokers), which one broker
    refuses as Kafka does (INVALID_REPLICATION_FACTOR); patched to cap it at ``TEST_MAX_REPLICATION_FACTOR`` when
    that is set (the harness sets 1), then ``test.o`` is rebuilt. Tests that call CreateTopics themselves are as
    they were."""
    test_c = tests_dir / "test.c"
    text = test_c.read_text()
    if "TEST_MAX_REPLICATION_FACTOR" in text:
        return
    test_c.write_text(text.replace(_CREATE_CALL, _RF_CAP + _CREATE_CALL, 1))
    subprocess.run(["nice", "-n", "10", "make", "-j2", "build"], cwd=tests_dir, check=True)


def with_rapidjson(tests_dir: Path) -> None:
    """Rebuild the tests that need RapidJSON (they parse statistics or test data: 0053, 0098's transactions, 0101,
    0110) with it when its headers are installed (Debian ``rapidjson-dev``) but the tree was configured without:
    only those objects and the link, not the whole library that re-running ``configure`` would rebuild."""
    marker = tests_dir / ".with-rapidjson"
    config = (tests_dir.parent / "config.h").read_text()
    if marker.exists() or "WITH_RAPIDJSON" in config or not Path("/usr/include/rapidjson/document.h").exists():
        return
    for name in ("0053-stats_cb.o", "0098-consumer-txn.o", "0101-fetch-from-follower.o", "0110-batch_size.o",
                 "test-runner"):
        (tests_dir / name).unlink(missing_ok=True)
    flags = "CPPFLAGS=-g -O2 -fPIC -Wall -DWITH_RAPIDJSON=1"
    subprocess.run(["nice", "-n", "10", "make", "-j2", "build", flags], cwd=tests_dir, check=True)
    marker.touch()


KAFKA_TOOL_SH = """#!/bin/sh
exec "{python}" "{script}" {tool} "$@"
"""
KAFKA_RUN_CLASS_SH = """#!/bin/sh
exec java -cp "$CLASSPATH:$KAFKA_PATH/libs/*" "$@"
"""
KAFKA_JARS = ROOT / ".cache/jars/kafka-clients-4.3.0"  # setup_clients.py: kafka-clients 4.3 and its dependencies


def kafka_path(run_dir: Path) -> Path:
    """A ``KAFKA_PATH`` as the suite uses a Kafka distribution: ``bin/kafka-topics.sh`` is :func:`kafka_topics`
    (tests 0045, 0052, 0077), ``bin/kafka-acls.sh`` :func:`kafka_acls` (0109, 0115, 0119), ``bin/kafka-run-class.sh``
    runs a class on ``libs/`` = the kafka-clients 4.3 jars (0098's Java transactional producer,
    ``tests/java/TransactionProducerCli.java``)."""
    home = run_dir / "kafka"
    (home / "bin").mkdir(parents=True)
    (home / "libs").mkdir()
    script = Path(__file__).resolve()
    tools = {f"{tool}.sh": KAFKA_TOOL_SH.format(python=sys.executable, script=script, tool=tool)
             for tool in ("kafka-topics", "kafka-acls")}
    for name, text in {**tools, "kafka-run-class.sh": KAFKA_RUN_CLASS_SH}.items():
        (home / "bin" / name).write_text(text)
        (home / "bin" / name).chmod(0o755)
    for jar in KAFKA_JARS.glob("*.jar"):
        (home / "libs" / jar.name).symlink_to(jar)
    return home


def kafka_topics(argv: list[str]) -> int:
    """The ``kafka-topics.sh`` calls the suite makes (``--create`` with ``--partitions``, ``--replication-factor``,
    ``--config k=v``; ``--alter --partitions``; ``--delete``), done with confluent-kafka's AdminClient."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    p = argparse.ArgumentParser(prog="kafka-topics.sh")
    p.add_argument("--bootstrap-server", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--create", action="store_true")
    p.add_argument("--alter", action="store_true")
    p.add_argument("--delete", action="store_true")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--config", action="append", default=[])
    a = p.parse_args(argv)
    admin = AdminClient({"bootstrap.servers": a.bootstrap_server})
    if a.create:
        configs = dict(c.split("=", 1) for c in a.config)
        futures = admin.create_topics([NewTopic(a.topic, a.partitions, a.replication_factor, config=configs)])
    elif a.alter:
        futures = admin.create_partitions([NewPartitions(a.topic, a.partitions)])
    elif a.delete:
        futures = admin.delete_topics([a.topic])
    else:
        p.error("one of --create, --alter, --delete")
    return _finish(futures, p.prog)


def _finish(futures: Mapping[Any, Future[Any]], tool: str) -> int:
    """Wait for an AdminClient call; as the Kafka tools, print the error and exit non-zero on one."""
    try:
        for future in futures.values():
            future.result(30)
    except Exception as e:
        print(f"{tool}: {e}", file=sys.stderr)
        return 1
    return 0


def kafka_acls(argv: list[str]) -> int:
    """The ``kafka-acls.sh --add`` / ``--remove --force`` calls the suite makes (one principal allowed or denied
    ``--operation`` on a ``--topic`` from a host), done with confluent-kafka's AdminClient."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    p = argparse.ArgumentParser(prog="kafka-acls.sh")
    p.add_argument("--bootstrap-server", required=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    p.add_argument("--force", action="store_true")
    p.add_argument("--topic", required=True)
    p.add_argument("--operation", action="append", required=True)
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--allow-principal")
    who.add_argument("--deny-principal")
    p.add_argument("--allow-host", default="*")
    p.add_argument("--deny-host", default="*")
    a = p.parse_args(argv)
    allow = a.allow_principal is not None
    fields = [(ResourceType.TOPIC, a.topic, ResourcePatternType.LITERAL,
               a.allow_principal if allow else a.deny_principal, a.allow_host if allow else a.deny_host,
               AclOperation[op.upper()], AclPermissionType.ALLOW if allow else AclPermissionType.DENY)
              for op in a.operation]
    admin = AdminClient({"bootstrap.servers": a.bootstrap_server})  # kept until the futures are done
    if a.remove:
        return _finish(admin.delete_acls([AclBindingFilter(*f) for f in fields]), p.prog)
    return _finish(admin.create_acls([AclBinding(*f) for f in fields]), p.prog)


@dataclass(frozen=True)
class Setup:
    """A walgate for one secured test number: its ``walgate serve`` arguments and environment, its Kafka port, the
    client settings ``test.conf`` gets and the environment variables the test reads (trivup's)."""

    args: tuple[str, ...]
    walgate_env: dict[str, str]
    port: int
    client: dict[str, str]
    test_env: dict[str, str]


def _server_properties(directory: Path, settings: dict[str, str]) -> Path:
    path = directory / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def ssl_setup(directory: Path) -> Setup:
    """0097's walgate: an SSL listener requiring a client certificate (see the module docstring)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    from testcerts import make_certs

    certs = make_certs(directory / "certs")
    port = free_port()
    config = _server_properties(directory, {
        "listeners": f"SSL://127.0.0.1:{port}", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca), "ssl.client.auth": "required",
        "ssl.enabled.protocols": "TLSv1.2"})
    cert = x509.load_pem_x509_certificate(certs.client_cert.read_bytes())
    key = serialization.load_pem_private_key(certs.client_key.read_bytes(), password=None)
    ca = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    files = {
        "SSL_pkcs": pkcs12.serialize_key_and_certificates(b"client", key, cert, [ca],  # type: ignore[arg-type]
                                                          serialization.BestAvailableEncryption(_PASSWORD.encode())),
        "SSL_pub_der": cert.public_bytes(serialization.Encoding.DER),
        "SSL_priv_der": key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()),
        "SSL_ca_der": ca.public_bytes(serialization.Encoding.DER),
    }
    env = {"SSL_pub_pem": str(certs.client_cert), "SSL_priv_pem": str(certs.client_key),
           "SSL_all_cas_pem": str(certs.ca), "SSL_password": _PASSWORD}
    for name, data in files.items():
        (directory / f"{name}.bin").write_bytes(data)
        env[name] = str(directory / f"{name}.bin")
    client = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca),
              "ssl.certificate.location": str(certs.client_cert), "ssl.key.location": str(certs.client_key),
              "ssl.key.password": _PASSWORD}
    return Setup(("--config", str(config)), walgate_env(), port, client, env)


def sasl_setup(directory: Path) -> Setup:
    """0135's and 0142's walgate: a SASL_PLAINTEXT listener that re-authenticates every :data:`REAUTH_MS`."""
    port = free_port()
    config = _server_properties(directory, {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "connections.max.reauth.ms": str(REAUTH_MS)})
    client = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "root",
              "sasl.password": _PASSWORD}
    return Setup(("--config", str(config)), {**walgate_env(), "WALGATE_ROOT_PASSWORD": _PASSWORD}, port, client, {})


def run_one(tests_dir: Path, number: str, scenario: str, conf: Path, version: str, local: bool,
            quick: bool, test_env: Mapping[str, str] | None = None) -> list[Outcome]:
    """Run ``test-runner`` for one test number in ``scenario`` (``test_env``: more environment variables for the
    test); the outcomes of its tests."""
    bootstrap = conf.read_text().split("\n", 1)[0].split("=", 1)[1]
    env = {**os.environ, **(test_env or {}), "RDKAFKA_TEST_CONF": str(conf), "TEST_KAFKA_VERSION": version,
           "KAFKA_PATH": str(conf.parent / "kafka"), "BROKERS": bootstrap, "TEST_MAX_REPLICATION_FACTOR": "1",
           "LD_LIBRARY_PATH": f"{tests_dir.parent / 'src'}:{tests_dir.parent / 'src-cpp'}"}  # as run-test.sh
    env["TESTS"] = number  # not a positional argument: test-runner would free() it at exit and abort
    env["TEST_SCENARIO"] = scenario
    argv = ["nice", "-n", "10", "./test-runner", "-p1", "-K", *(["-Q"] if quick else []), *([] if local else ["-L"])]
    log = conf.parent / LOG_NAME[scenario].format(number)
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=tests_dir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        _RUNNING.add(proc)
        try:
            proc.wait(TEST_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return [Outcome(number, "TIMEOUT", time.monotonic() - started, f"killed after {TEST_TIMEOUT:.0f} s")]
        finally:
            _RUNNING.discard(proc)
    outcomes = parse_log(number, _ANSI.sub("", log.read_text(errors="replace")))
    if not outcomes:
        outcomes.append(Outcome(number, "NO-RESULT", time.monotonic() - started, f"exit code {proc.returncode}"))
    return outcomes


def parse_log(number: str, text: str) -> list[Outcome]:
    """The outcome of every test of ``number`` in a test-runner output: its summary table when it printed one
    (it does not when a test failed), else its ``Test <name> PASSED/SKIPPED`` lines and ``### Test "<name>" failed``
    blocks (the line after one is the reason)."""
    table = [m for m in map(_SUMMARY.match, text.splitlines()) if m and m["name"].startswith(number)]
    if table:
        found = [Outcome(m["name"], m["state"], float(m["secs"]), m["why"].strip()) for m in table]
        return [o for o in found if not _filtered(o)]
    states: dict[str, Outcome] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := _FAILED.search(line):
            why = f"{m['sub'] or m['where']}: {lines[i + 1].strip() if i + 1 < len(lines) else ''}"
            tool = [line for line in lines[:i] if line.startswith(("kafka-topics.sh: ", "kafka-acls.sh: "))]
            if "system(" in why and tool:  # a kafka-topics.sh / kafka-acls.sh call failed: its error says why
                why = f"{m['where']}: {tool[-1]}"
            states.setdefault(m["name"], Outcome(m["name"], "FAILED", _elapsed(lines, m["name"]), why))
        elif (m := _DONE.search(line)) and m["name"].startswith(number):
            reasons = [r["why"] for r in map(_SKIP_REASON.search, lines) if r and r["name"] == m["name"]]
            why = reasons[-1].strip() if m["state"] == "SKIPPED" and reasons else ""
            states.setdefault(m["name"], Outcome(m["name"], m["state"], _elapsed(lines, m["name"]), why))
    return [o for name, o in states.items() if name.startswith(number) and not _filtered(o)]


def _filtered(o: Outcome) -> bool:
    """A test of the number that the run's flags left out (e.g. the mock variant of a broker test under -L)."""
    return o.state == "SKIPPED" and o.why.startswith("Filtered due to")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _elapsed(lines: list[str], name: str) -> float:
    times = [float(m["t"]) for m in map(_STAMP.match, lines) if m and m["name"] == name]
    return max(times, default=0.0)


def main() -> int:
    if sys.argv[1:2] == ["kafka-topics"]:
        return kafka_topics(sys.argv[2:])
    if sys.argv[1:2] == ["kafka-acls"]:
        return kafka_acls(sys.argv[2:])
    signal.signal(signal.SIGTERM, _interrupt)  # stopped by PID: the same clean-up as Ctrl-C
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=Path(os.environ.get("LIBRDKAFKA_SRC", BUNDLED)),
                        help="librdkafka source tree (default: LIBRDKAFKA_SRC or the one bundled in node_modules)")
    parser.add_argument("--set", dest="which", default="single-broker",
                        choices=["single-broker", "txn", "compaction", "all"])
    parser.add_argument("--tests", default="", help="comma-separated test numbers (overrides --set)")
    parser.add_argument("--local", action="store_true", help="also run the mock-cluster (TEST_F_LOCAL) tests")
    parser.add_argument("--kafka-version", default="4.1.0", help="broker version the suite assumes")
    parser.add_argument("--timeout-multiplier", default="2", help="test.timeout.multiplier")
    parser.add_argument("--quick", action="store_true",
                        help="the suite's quick mode (-Q): skips every subtest not marked quick, so a pass proves less")
    parser.add_argument("--report", type=Path, help="only print the table of an earlier run directory's logs")
    parser.add_argument("--jobs", type=int, default=2, help="test-runner processes at a time")
    args = parser.parse_args()

    results: list[Outcome] = []
    if args.report:
        results = [o for log in sorted(args.report.glob("[0-9][0-9][0-9][0-9]*.log"))
                   for o in parse_log(log.stem[:4], _ANSI.sub("", log.read_text(errors="replace")))
                   or [Outcome(log.stem, "NO-RESULT", 0.0, "no outcome in the log")]]
        return summarize(results, args.report, None)
    tests_dir = prepare(args.source.resolve())
    suite = suite_tests(tests_dir)
    version = tuple(int(v) for v in (args.kafka_version.split(".") + ["0"] * 4)[:4])
    numbers = ([n.strip() for n in args.tests.split(",") if n.strip()] if args.tests
               else select(suite, args.which, version, args.local))
    numbers.sort(key=lambda n: n not in TRANSACTIONS + COMPACTION)  # issue 17's tests report first
    run_dir = CACHE / time.strftime("run-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True)
    kafka_path(run_dir)
    tracebacks = 0
    for scenario, flags in SCENARIOS.items():  # one walgate at a time
        names = {t.name for t in suite if scenario in t.scenarios}
        todo = [n for n in numbers if any(name.startswith(n) for name in names) and n not in SECURED]
        if not todo:
            continue
        outcomes, found = run_scenario(tests_dir, scenario, flags, todo, names, run_dir, args)
        results += outcomes
        tracebacks += found
    for number in (n for n in numbers if n in SECURED):
        outcomes, found = run_secured(tests_dir, number, {t.name for t in suite}, run_dir, args)
        results += outcomes
        tracebacks += found
    return summarize(results, run_dir, tracebacks)


def run_secured(tests_dir: Path, number: str, names: set[str], run_dir: Path,
                args: argparse.Namespace) -> tuple[list[Outcome], int]:
    """Run the secured test ``number`` against a walgate of its own (:data:`SECURED`); its outcomes and the
    tracebacks walgate logged."""
    directory = run_dir / f"{SECURED[number]}-{number}"  # a fresh walgate and data dir for each test
    directory.mkdir()
    setup = (ssl_setup if SECURED[number] == "ssl" else sasl_setup)(directory)
    flags = (*SCENARIOS["default"], *setup.args)
    with running_walgate(directory, *flags, env=setup.walgate_env, kafka_port=setup.port) as server:
        conf = run_dir / f"test-{SECURED[number]}-{number}.conf"  # beside the others: its log is <number>.log there
        conf.write_text(f"bootstrap.servers=127.0.0.1:{setup.port}\n"
                        f"test.timeout.multiplier={args.timeout_multiplier}\n"
                        + "".join(f"{k}={v}\n" for k, v in setup.client.items()))
        print(f"{number} ({SECURED[number]}): walgate pid {server.proc.pid} on 127.0.0.1:{setup.port}; logs in "
              f"{directory}", flush=True)
        outcomes = [o for o in run_one(tests_dir, number, "default", conf, args.kafka_version, args.local,
                                       args.quick, setup.test_env) if o.name in names or not o.name[4:]]
        for o in outcomes:
            print(f"{o.name:<48} {o.state:<9} {o.seconds:8.1f}s  {o.why[:110]}", flush=True)
        return outcomes, server.log().count("Traceback")


def run_scenario(tests_dir: Path, scenario: str, flags: tuple[str, ...], numbers: list[str], names: set[str],
                 run_dir: Path, args: argparse.Namespace) -> tuple[list[Outcome], int]:
    """Run ``numbers`` against one walgate started with ``flags``; the outcomes of their tests in ``names`` (those of
    the scenario; a number that gave none is a NO-RESULT) and the tracebacks walgate logged."""
    results = []
    with running_walgate(run_dir / scenario, *flags) as server:
        conf = run_dir / f"test-{scenario}.conf"
        conf.write_text(f"bootstrap.servers=127.0.0.1:{server.kafka_port}\n"
                        f"test.timeout.multiplier={args.timeout_multiplier}\n")
        print(f"scenario {scenario}: walgate pid {server.proc.pid} on 127.0.0.1:{server.kafka_port}; "
              f"{len(numbers)} test numbers; logs in {run_dir}", flush=True)
        pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
        try:
            futures = [pool.submit(run_one, tests_dir, n, scenario, conf, args.kafka_version, args.local, args.quick)
                       for n in numbers]
            for future in concurrent.futures.as_completed(futures):
                for o in future.result():
                    if o.name not in names and o.name[4:]:
                        continue
                    print(f"{o.name:<48} {o.state:<9} {o.seconds:8.1f}s  {o.why[:110]}", flush=True)
                    results.append(o)
        except BaseException:  # Ctrl-C: no new tests, the running ones killed, then walgate stopped
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in list(_RUNNING):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        pool.shutdown()
        return results, server.log().count("Traceback")


def summarize(results: list[Outcome], run_dir: Path, tracebacks: int | None) -> int:
    """Print the table in suite order and the counts; 0 when every test passed or was skipped."""
    print("\n== summary (suite order) ==")
    for o in sorted(results, key=lambda o: o.name):
        print(f"{o.name:<48} {o.state:<9} {o.seconds:8.1f}s  {o.why[:110]}")
    counts = {s: sum(o.state == s for o in results) for s in sorted({o.state for o in results})}
    print(" ".join(f"{s}={c}" for s, c in counts.items()),
          "" if tracebacks is None else f"walgate tracebacks={tracebacks}", f"logs: {run_dir}")
    return 0 if all(o.state in ("PASSED", "SKIPPED") for o in results) else 1


if __name__ == "__main__":
    sys.exit(main())
