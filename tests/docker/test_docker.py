"""docker/: what can be checked without a Docker engine.

- docker/compose.yaml parses (PyYAML) and wires what it says: walgate built from docker/Dockerfile with its
  ports, volume and healthcheck; the generator's and Spark's commands name scripts that exist in the repo
  (through their bind mounts) with arguments their own argparse accepts, pointed at the walgate service and
  logging in as root with the password of the Docker secret walgate reads root's first password from;
  docker/compose.sasl-ssl.yaml, merged over it, is a valid walgate configuration with a SASL_SSL listener.
- docker/Dockerfile parses into instructions (a small parser below): python:3.11-slim, pip install of the
  project, a non-root USER, VOLUME for the data dir, EXPOSE 9092 6041, a HEALTHCHECK in exec form; the
  root .dockerignore lets through what the COPYs need, and that context builds the walgate wheel.
- The image's entry command (ENTRYPOINT + CMD, with the Dockerfile's ENV) really runs here: the data dir
  swapped for a temporary one, 0.0.0.0 for 127.0.0.1 and the ports for free ones, root's password in a
  file named by WALGATE_ROOT_PASSWORD_FILE (as compose's secret); its HEALTHCHECK passes against it (and
  fails with nothing listening), a SCRAM client with that password is told the advertised address, a
  client without SASL, with PLAIN or with a wrong password is refused, HTTP without credentials gets 401,
  and the compose generator's command (with the secret file) feeds topic_meters, read back with
  confluent-kafka over SASL.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from livewalgate import free_port, stop_process, walgate_env
from pipeline import meters
from testcerts import make_certs
from walgate.gateway.cli import protected_mode_refusal
from walgate.gateway.config import load_config
from walgate.gateway.root_user import ROOT_PASSWORD_FILE_ENV

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE = DOCKER / "compose.yaml"
COMPOSE_SASL_SSL = DOCKER / "compose.sasl-ssl.yaml"
DOCKERIGNORE = REPO / ".dockerignore"
VENV_BIN = Path(sys.executable).parent  # the venv running the tests: its `walgate` and `python` stand in for the image's
READY_TIMEOUT = 30.0
KAFKA_PORT, HTTP_PORT = "9092", "6041"
ROOT_SECRET = "walgate_root_password"
SECRET_FILE = f"/run/secrets/{ROOT_SECRET}"  # where compose mounts a service's secret
ROOT_PASSWORD = "docker-r00t"
KNOWN_INSTRUCTIONS = {
    "ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK", "LABEL", "MAINTAINER",
    "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR",
}


# ------------------------------------------------------------------ Dockerfile parsing


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case
    args: str  # everything after the keyword, continuation lines joined
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions of a Dockerfile: comments and blank lines dropped, ``\\`` continuations joined."""
    instructions: list[Instruction] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):  # also inside a continuation, as Docker does
            continue
        if pending is None:
            start, pending = number, ""
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        instructions.append(Instruction(keyword.upper(), args.strip(), start))
        pending = None
    assert pending is None, f"line {start}: continuation runs off the end of the file"
    return instructions


def exec_form(args: str) -> list[str]:
    """The JSON (exec) form of CMD / ENTRYPOINT / HEALTHCHECK CMD; fails on the shell form."""
    assert args.startswith("["), f"not in exec form (a shell would be PID 1 and swallow SIGTERM): {args}"
    argv = json.loads(args)
    assert isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv), args
    return argv


def duration_s(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert match, text
    return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


@dataclass(frozen=True)
class Image:
    """What the Dockerfile makes of the image."""

    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"no {keyword} in the Dockerfile"
        return found[-1]

    @property
    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for token in shlex.split(instruction.args):
                key, sep, value = token.partition("=")
                assert sep, f"line {instruction.line}: ENV without key=value: {instruction.args}"
                values[key] = value
        return values

    @property
    def command(self) -> list[str]:
        """ENTRYPOINT + CMD: what the container runs."""
        return exec_form(self.last("ENTRYPOINT").args) + exec_form(self.last("CMD").args)

    @property
    def volumes(self) -> list[str]:
        return [v for i in self.all("VOLUME") for v in (json.loads(i.args) if i.args.startswith("[") else i.args.split())]

    @property
    def exposed(self) -> set[str]:
        return {port.removesuffix("/tcp") for i in self.all("EXPOSE") for port in i.args.split()}

    @property
    def healthcheck(self) -> tuple[dict[str, str], list[str]]:
        """(options, argv) of the HEALTHCHECK."""
        match = re.fullmatch(r"((?:--[a-z-]+=\S+\s+)*)CMD\s+(.*)", self.last("HEALTHCHECK").args, re.S)
        assert match, f"HEALTHCHECK is not OPTIONS CMD ...: {self.last('HEALTHCHECK').args}"
        options = dict(option[2:].split("=", 1) for option in match[1].split())
        return options, exec_form(match[2])


def load_image() -> Image:
    return Image(parse_dockerfile(DOCKERFILE.read_text()))


def option(argv: list[str], flag: str) -> str:
    """The value after ``flag`` in ``argv`` (exactly once)."""
    assert argv.count(flag) == 1, f"{flag} must appear exactly once in {argv}"
    return argv[argv.index(flag) + 1]


# ------------------------------------------------------------------ compose parsing


def load_compose(path: Path = COMPOSE) -> dict[str, Any]:
    compose = yaml.safe_load(path.read_text())
    assert isinstance(compose, dict) and isinstance(compose.get("services"), dict), "no services"
    return compose


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment", {})
    assert isinstance(environment, dict), "use the mapping syntax for environment"
    return {key: str(value) for key, value in environment.items()}


def mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, mode) of a service's short-syntax volumes."""
    out = []
    for spec in service.get("volumes", []):
        assert isinstance(spec, str), f"use the short volume syntax: {spec}"
        source, target, *mode = spec.split(":")
        out.append((source, target, mode[0] if mode else "rw"))
    return out


def is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def repo_path(service: dict[str, Any], container_path: str) -> Path:
    """The repository file a container path shows through the service's bind mounts."""
    for source, target, _ in mounts(service):
        if is_bind(source) and PurePosixPath(container_path).is_relative_to(target):
            return (DOCKER / source / PurePosixPath(container_path).relative_to(target)).resolve()
    raise AssertionError(f"{container_path} is not under a bind mount of {mounts(service)}")


def writable_volume_target(service: dict[str, Any], container_path: str) -> str:
    """The named volume mount holding ``container_path`` (writable, kept across runs)."""
    for source, target, mode in mounts(service):
        if not is_bind(source) and mode == "rw" and PurePosixPath(container_path).is_relative_to(target):
            return target
    raise AssertionError(f"{container_path} is not on a writable named volume: {mounts(service)}")


def load_module(path: Path) -> ModuleType:
    """A script of docker/ imported as a module (its ``main`` not run)."""
    spec = importlib.util.spec_from_file_location(f"walgate_docker_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_generator() -> ModuleType:
    return load_module(DOCKER / "generate.py")


def pinned(package: str) -> str:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    requirements = pyproject["project"]["dependencies"] + [r for extra in pyproject["project"]["optional-dependencies"].values() for r in extra]
    versions = [r.split("==", 1)[1] for r in requirements if r.split("==", 1)[0].lower() == package]
    assert len(versions) == 1, f"{package} is not pinned exactly once in pyproject.toml"
    return versions[0]


# ====================================================================== (a) compose.yaml


def test_compose_has_the_three_services_and_declares_its_named_volumes() -> None:
    compose = load_compose()
    assert set(compose["services"]) == {"walgate", "generator", "spark"}
    declared = set(compose.get("volumes") or {})
    used = {source for service in compose["services"].values() for source, _, _ in mounts(service) if not is_bind(source)}
    assert used and used == declared, (used, declared)
    secrets = {name for service in compose["services"].values() for name in service.get("secrets", [])}
    assert secrets == {ROOT_SECRET} == set(compose["secrets"]), "every service's secret is declared"
    assert compose["secrets"][ROOT_SECRET] == {"environment": "WALGATE_ROOT_PASSWORD"}
    for service in compose["services"].values():
        for source, _, _ in mounts(service):
            if is_bind(source):
                assert (DOCKER / source).resolve().exists(), f"bind mount source {source} does not exist"


def test_compose_walgate_service_is_the_image_with_its_ports_volume_and_healthcheck() -> None:
    image, walgate = load_image(), load_compose()["services"]["walgate"]
    assert (DOCKER / walgate["build"]["context"]).resolve() == REPO
    assert (DOCKER / walgate["build"]["context"] / walgate["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert "command" not in walgate and "entrypoint" not in walgate, "runs the image's own `walgate serve`"
    assert set(walgate["ports"]) == {f"{p}:{p}" for p in image.exposed} == {"9092:9092", "6041:6041"}
    [(volume, target, mode)] = mounts(walgate)
    assert not is_bind(volume) and mode == "rw" and [target] == image.volumes
    # other containers reach it by its service name: that is what Kafka clients must be told
    env = compose_env(walgate)
    assert env["WALGATE_ADVERTISED_LISTENERS"] == f"SASL_PLAINTEXT://walgate:{KAFKA_PORT}"
    assert image.env["WALGATE_LISTENERS"] == f"SASL_PLAINTEXT://0.0.0.0:{KAFKA_PORT}"
    # root's first password: the secret's file, never a value in the compose file
    assert walgate["secrets"] == [ROOT_SECRET] and env[ROOT_PASSWORD_FILE_ENV] == SECRET_FILE
    assert not any("PASSWORD" in key and key != ROOT_PASSWORD_FILE_ENV for key in env), env
    options, argv = image.healthcheck
    assert walgate["healthcheck"]["test"] == ["CMD", *argv]
    assert duration_s(walgate["healthcheck"]["timeout"]) == duration_s(options["timeout"])


def test_compose_generator_runs_docker_generate_py_against_the_walgate_service() -> None:
    services = load_compose()["services"]
    walgate, generator = services["walgate"], services["generator"]
    assert generator["image"] == walgate["image"] and generator["build"] == walgate["build"]
    interpreter, script = generator["entrypoint"]
    assert interpreter == "python" and repo_path(generator, script) == DOCKER / "generate.py"
    args = load_generator().parser().parse_args(generator["command"])  # exits (fails) on an unknown argument
    assert args.url == f"http://walgate:{HTTP_PORT}" and args.duration == 0 and args.rate > 0
    assert args.user == "root" and str(args.password_file) == SECRET_FILE and generator["secrets"] == [ROOT_SECRET]
    # the image's healthcheck (walgate's ports) would never pass here: it must be replaced by the ready file
    assert generator["healthcheck"]["test"] == ["CMD", "test", "-f", str(args.ready_file)]
    assert generator["depends_on"] == {"walgate": {"condition": "service_healthy"}}


def test_compose_spark_submits_pipeline_meters_py_with_its_real_arguments() -> None:
    services = load_compose()["services"]
    spark = services["spark"]
    version = pinned("pyspark")
    assert spark["image"] == f"apache/spark:{version}-python3", "Spark in the image = the pinned pyspark"
    command = spark["command"]
    assert command[0] == "/opt/spark/bin/spark-submit"
    script_at = next(i for i, arg in enumerate(command) if arg.endswith(".py"))
    submit_options = command[1:script_at]
    assert len(submit_options) % 2 == 0 and all(flag.startswith("--") for flag in submit_options[::2])
    assert option(submit_options, "--packages") == f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
    confs = dict(value.split("=", 1) for flag, value in zip(submit_options[::2], submit_options[1::2]) if flag == "--conf")
    writable_volume_target(spark, confs["spark.jars.ivy"])  # the image's user has no home for Ivy's default

    script = repo_path(spark, command[script_at])
    assert script == REPO / "pipeline" / "meters.py" and script.is_file()
    assert ("../pipeline", "/opt/pipeline", "ro") in mounts(spark)
    # the image's python3 is Ubuntu 22.04's 3.10
    ast.parse(script.read_text(), feature_version=(3, 10))
    args = meters.parser().parse_args(command[script_at + 1:])  # exits (fails) on an unknown argument
    assert not args.batch and args.checkpoint, "streaming needs --checkpoint (meters.main)"
    advertised = compose_env(services["walgate"])["WALGATE_ADVERTISED_LISTENERS"]
    assert f"SASL_PLAINTEXT://{args.bootstrap}" == advertised == f"SASL_PLAINTEXT://walgate:{KAFKA_PORT}"
    # Spark's Kafka source logs in as root with the secret, with a mechanism the image enables
    assert args.sasl_user == "root" and str(args.sasl_password_file) == SECRET_FILE and spark["secrets"] == [ROOT_SECRET]
    assert dict(o.split("=", 1) for o in args.kafka_option) == {"security.protocol": "SASL_PLAINTEXT",
                                                                 "sasl.mechanism": "SCRAM-SHA-512"}
    assert "SCRAM-SHA-512" in load_image().env["WALGATE_SASL_ENABLED_MECHANISMS"].split(",")
    generator_args = load_generator().parser().parse_args(services["generator"]["command"])
    assert args.topic == "topic_meters" and args.topic in " ".join(load_generator().setup())
    assert generator_args.url.startswith("http://walgate:")
    assert writable_volume_target(spark, args.out) == writable_volume_target(spark, args.checkpoint)
    assert spark["depends_on"] == {"walgate": {"condition": "service_healthy"},
                                   "generator": {"condition": "service_healthy"}}


def test_compose_sasl_ssl_override_adds_a_sasl_ssl_listener_with_the_mounted_certificate(tmp_path: Path) -> None:
    """docker/compose.sasl-ssl.yaml merged over compose.yaml (environment by key, lists appended, as compose
    merges) and the image's ENV make a configuration walgate accepts: SASL_SSL on 9093 with the secret's PEM."""
    base, override = load_compose(), load_compose(COMPOSE_SASL_SSL)
    assert set(override["services"]) == {"walgate"}
    walgate, extra = base["services"]["walgate"], override["services"]["walgate"]
    [(keystore_secret, source)] = override["secrets"].items()
    assert source["file"].startswith("${WALGATE_TLS_KEYSTORE:?")  # compose stops without the certificate
    assert walgate["secrets"] + extra["secrets"] == [ROOT_SECRET, keystore_secret]
    assert set(extra["ports"]) == {"9093:9093"} and not set(extra["ports"]) & set(walgate["ports"])
    env = load_image().env | compose_env(walgate) | compose_env(extra)
    keystore = f"/run/secrets/{keystore_secret}"
    assert env["WALGATE_SSL_KEYSTORE_LOCATION"] == keystore
    certs = make_certs(tmp_path)
    env["WALGATE_SSL_KEYSTORE_LOCATION"] = str(certs.server)
    env["WALGATE_ADVERTISED_LISTENERS"] = env["WALGATE_ADVERTISED_LISTENERS"].replace("${WALGATE_TLS_HOST:-localhost}",
                                                                                     "localhost")
    config = load_config(None, env=env, overrides={"data_dir": tmp_path / "data"})
    assert [(lst.name, lst.port) for lst in config.kafka_listeners()] == [("SASL_PLAINTEXT", 9092), ("SASL_SSL", 9093)]
    assert config.advertised_addresses() == {"SASL_PLAINTEXT": ("walgate", 9092), "SASL_SSL": ("localhost", 9093)}
    assert protected_mode_refusal(config) is None and config.http_auth == "basic"


# ====================================================================== (b) Dockerfile


def test_dockerfile_parses_into_known_instructions_from_python_3_11_slim() -> None:
    image = load_image()
    assert image.instructions, "empty Dockerfile"
    unknown = [(i.line, i.keyword) for i in image.instructions if i.keyword not in KNOWN_INSTRUCTIONS]
    assert not unknown, unknown
    assert [i.args for i in image.all("FROM")] == ["python:3.11-slim"]
    assert image.instructions[0].keyword == "FROM"


def test_dockerfile_parser_reads_continuations_and_exec_forms() -> None:
    instructions = parse_dockerfile('# c\nRUN a \\\n  # inside\n    b\nCMD ["x", "y z"]\n')
    assert instructions == [Instruction("RUN", "a b", 2), Instruction("CMD", '["x", "y z"]', 5)]
    assert exec_form(instructions[1].args) == ["x", "y z"]
    with pytest.raises(AssertionError):
        exec_form("walgate serve")
    with pytest.raises(AssertionError):
        parse_dockerfile("RUN a \\\n")


def test_dockerfile_installs_the_project_with_pip() -> None:
    image = load_image()
    copied: dict[str, list[str]] = {}
    for instruction in image.all("COPY"):
        *sources, destination = instruction.args.split()
        assert not any(s.startswith("--") for s in sources), instruction
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            copied.setdefault(destination.rstrip("/"), []).append(source)
    install_dirs = [d for d, sources in copied.items() if "pyproject.toml" in sources]
    assert len(install_dirs) == 1, copied
    assert any(re.search(rf"\bpip install {re.escape(install_dirs[0])}(\s|/?$)", i.args) for i in image.all("RUN"))
    assert "README.md" in copied[install_dirs[0]], "pyproject.toml names README.md as the readme"


def test_dockerfile_runs_as_a_non_root_user_it_creates() -> None:
    image = load_image()
    user = image.last("USER").args
    uid = user.split(":")[0]
    assert uid not in ("root", "0"), user
    creates = [i for i in image.all("RUN") if "useradd" in i.args]
    assert creates and re.search(rf"--uid[ =]{re.escape(uid)}\b", creates[-1].args), "USER is not the created user"
    entry = image.last("ENTRYPOINT")
    assert image.last("USER").line < entry.line


def test_dockerfile_volume_is_the_data_dir_owned_by_the_user() -> None:
    image = load_image()
    [data_dir] = image.volumes
    assert option(image.command, "--data-dir") == data_dir == "/var/lib/walgate"
    volume_line = image.last("VOLUME").line
    assert any("chown" in i.args and data_dir in i.args and i.line < volume_line for i in image.all("RUN")), \
        "the data dir must be chowned before VOLUME (later changes to it are discarded)"


def test_dockerfile_listens_on_all_interfaces_with_sasl_and_without_allow_insecure(tmp_path: Path) -> None:
    image = load_image()
    command = image.command
    assert command[:2] == ["walgate", "serve"]
    assert image.exposed == {KAFKA_PORT, HTTP_PORT}
    assert option(command, "--http-port") == HTTP_PORT and option(command, "--host") == "0.0.0.0"
    # listeners and advertised listeners are ENV, so compose / docker run -e replace them (flags would win)
    assert "--allow-insecure" not in command and "--override" not in command and "--advertised-host" not in command
    assert image.env["WALGATE_LISTENERS"] == f"SASL_PLAINTEXT://0.0.0.0:{KAFKA_PORT}"
    assert image.env["WALGATE_ADVERTISED_LISTENERS"] == f"SASL_PLAINTEXT://localhost:{KAFKA_PORT}"
    assert "PLAIN" not in image.env["WALGATE_SASL_ENABLED_MECHANISMS"].split(","), "no clear-text passwords"
    assert not any("PASSWORD" in key for key in image.env), "no password baked into the image"
    config = load_config(None, env=image.env, overrides={"data_dir": tmp_path, "host": option(command, "--host")})
    assert [lst.info.sasl for lst in config.kafka_listeners()] == [True] and config.http_auth == "basic"
    assert protected_mode_refusal(config) is None  # every Kafka client authenticates: nothing for it to refuse


def test_dockerfile_healthcheck_is_python_checking_both_ports() -> None:
    options, argv = load_image().healthcheck
    assert argv[:2] == ["python", "-c"] and len(argv) == 3  # python:3.11-slim has python, not curl or wget
    compile(argv[2], "<healthcheck>", "exec")
    assert f"127.0.0.1:{HTTP_PORT}/healthz" in argv[2] and f"'127.0.0.1', {KAFKA_PORT}" in argv[2]
    assert set(options) <= {"interval", "timeout", "start-period", "start-interval", "retries"}
    assert 0 < duration_s(options["timeout"]) <= duration_s(options["interval"]) and int(options["retries"]) >= 1


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, regex) per .dockerignore line, Docker's pattern syntax (``*``, ``?``, ``**``, ``!``)."""
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        exclude = not line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = "".join(
            ".*" if token == "**" else "[^/]*" if token == "*" else "[^/]" if token == "?" else re.escape(token)
            for token in re.split(r"(\*\*|\*|\?)", pattern)
        ).replace(".*/", "(?:.*/)?")
        rules.append((exclude, re.compile(regex)))
    return rules


def in_context(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether ``path`` (relative to the repository) is in the build context: the last matching rule wins,
    a rule matching a parent directory matches what is under it."""
    parts = PurePosixPath(path).parts
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    included = True
    for exclude, regex in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            included = not exclude
    return included


def build_context(rules: list[tuple[bool, re.Pattern[str]]]) -> list[str]:
    files = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in (".git", ".venv")]
        for name in names:
            path = (Path(root) / name).relative_to(REPO).as_posix()
            if in_context(path, rules):
                files.append(path)
    return sorted(files)


def test_dockerignore_keeps_what_the_copies_need_and_nothing_else() -> None:
    rules = dockerignore_rules()
    context = build_context(rules)
    sources = [s for i in load_image().all("COPY") for s in i.args.split()[:-1]]
    for source in sources:
        assert any(f == source or f.startswith(source.rstrip("/") + "/") for f in context), f"COPY {source}: ignored"
    package = [p.relative_to(REPO).as_posix() for p in (REPO / "walgate").rglob("*")
               if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".so")]  # not built files
    assert package and set(package) <= set(context), sorted(set(package) - set(context))[:5]
    assert any(f.endswith(".lark") for f in context), "the SQL grammar is package data"
    for outside in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "data/x", "walgate/__pycache__/x.pyc",
                    "walgate.egg-info/PKG-INFO", "docker/Dockerfile", "walgate/wire/_record_check.cpython-311-x86_64-linux-gnu.so"):
        assert not in_context(outside, rules), outside
    allowed = {"pyproject.toml", "setup.py", "README.md", *package}
    assert set(context) <= allowed, set(context) - allowed


def test_build_context_builds_the_walgate_wheel(tmp_path: Path) -> None:
    """The COPYs' files (as the .dockerignore filters them) are enough for the image's `pip install`."""
    rules = dockerignore_rules()
    context = build_context(rules)
    copies = [i.args.split() for i in load_image().all("COPY")]
    [destination] = {c[-1].rstrip("/") for c in copies if "pyproject.toml" in c}
    staged = tmp_path / "src"
    for *sources, target in copies:  # Docker's COPY: a directory's contents into target, a file into target/
        target_dir = staged / PurePosixPath(target).relative_to(destination)
        for source in sources:
            if (REPO / source).is_dir():
                files = {f: target_dir / PurePosixPath(f).relative_to(source) for f in context
                         if f.startswith(source.rstrip("/") + "/")}
            else:
                assert source in context, f"COPY {source}: not in the build context"
                files = {source: target_dir / PurePosixPath(source).name if target.endswith("/") else target_dir}
            for path, dest in files.items():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(REPO / path, dest)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path / "wheels"), str(staged)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [wheel] = (tmp_path / "wheels").glob("walgate-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "walgate = walgate.gateway.cli:main" in entry_points
    assert any(n.startswith("walgate/storage/sql/") and n.endswith(".lark") for n in names)
    assert "walgate/gateway/server.py" in names


# ====================================================================== (c) the entry command, run here


@dataclass(frozen=True)
class EntryServer:
    kafka_port: int
    http_port: int
    env: dict[str, str]
    proc: subprocess.Popen[bytes]
    log_path: Path

    def localize(self, argv: list[str]) -> list[str]:
        """A command meant for inside the container, with this server's ports."""
        return [a.replace(HTTP_PORT, str(self.http_port)).replace(KAFKA_PORT, str(self.kafka_port)) for a in argv]

    def kafka(self, **settings: str) -> dict[str, Any]:
        """librdkafka settings reaching this server, logging in as root with SCRAM-SHA-512 unless ``settings``
        say otherwise."""
        return {"bootstrap.servers": f"127.0.0.1:{self.kafka_port}", "broker.address.family": "v4",
                "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "root",
                "sasl.password": ROOT_PASSWORD, **settings}


def image_env() -> dict[str, str]:
    """The test's environment (no WALGATE_* of its own) + the Dockerfile's ENV, the venv's bin first on PATH."""
    env = walgate_env() | load_image().env
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return env


def healthcheck(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    options, _ = load_image().healthcheck
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=duration_s(options["timeout"]) + 10)


@pytest.fixture(scope="module")
def entry_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EntryServer]:
    image = load_image()
    workdir = tmp_path_factory.mktemp("entry")
    kafka_port, http_port = free_port(), free_port()
    assert kafka_port != http_port
    [data_dir] = image.volumes
    substitutions = {data_dir: str(workdir / "data"), "0.0.0.0": "127.0.0.1", HTTP_PORT: str(http_port)}
    command = image.command
    missing = [original for original in substitutions if original not in command]
    assert not missing, f"the entry command {command} does not contain {missing}"
    command = [substitutions.get(arg, arg) for arg in command]
    env = image_env()
    for name in ("WALGATE_LISTENERS", "WALGATE_ADVERTISED_LISTENERS"):  # the Kafka port: from the image's ENV
        assert f":{KAFKA_PORT}" in env[name], env[name]
        env[name] = env[name].replace("0.0.0.0", "127.0.0.1").replace(f":{KAFKA_PORT}", f":{kafka_port}")
    secret = workdir / ROOT_SECRET
    secret.write_text(ROOT_PASSWORD + "\n")  # as `echo` writes a secret file
    env[ROOT_PASSWORD_FILE_ENV] = str(secret)  # as compose.yaml sets it
    assert shutil.which(command[0], path=env["PATH"]) == str(VENV_BIN / "walgate")
    log_path = workdir / "walgate.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=workdir)
    server = EntryServer(kafka_port, http_port, env, proc, log_path)
    try:
        ready = re.compile(rf"walgate ready http=127\.0\.0\.1:{http_port} kafka=\S+:{kafka_port}")
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready.search(log_path.read_text(errors="replace")):
            if proc.poll() is not None:
                pytest.fail(f"{command} exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"{command} not ready within {READY_TIMEOUT} s:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.05)
        yield server
    finally:
        code = stop_process(proc)
    assert code == 0, f"SIGTERM (docker stop) must stop it cleanly, got {code}:\n{log_path.read_text(errors='replace')}"


def test_entry_command_passes_the_healthcheck(entry_server: EntryServer) -> None:
    _, argv = load_image().healthcheck
    result = healthcheck(entry_server.localize(argv), entry_server.env)
    assert result.returncode == 0, result.stderr
    assert entry_server.proc.poll() is None


def test_healthcheck_fails_with_nothing_listening() -> None:
    _, argv = load_image().healthcheck
    dead = [a.replace(HTTP_PORT, str(free_port())).replace(KAFKA_PORT, str(free_port())) for a in argv]
    assert dead != argv
    result = healthcheck(dead, image_env())
    assert result.returncode != 0


def test_entry_command_logs_root_in_with_the_secret_and_tells_the_advertised_address(entry_server: EntryServer) -> None:
    admin = AdminClient(entry_server.kafka())
    brokers = list(admin.list_topics(timeout=15).brokers.values())
    advertised = load_image().env["WALGATE_ADVERTISED_LISTENERS"].removeprefix("SASL_PLAINTEXT://").split(":")[0]
    assert [(b.host, b.port) for b in brokers] == [(advertised, entry_server.kafka_port)] == [("localhost", entry_server.kafka_port)]
    log = entry_server.log_path.read_text(errors="replace")
    assert f"created user root with the password of {ROOT_PASSWORD_FILE_ENV}" in log and ROOT_PASSWORD not in log


def login_errors(settings: dict[str, Any], timeout: float) -> list[KafkaError]:
    """What librdkafka reports (its error callback, then the failed Metadata) when ``settings`` cannot log in."""
    errors: list[KafkaError] = []
    config: dict[str, Any] = {**settings, "error_cb": errors.append, "log_level": 0}
    admin = AdminClient(config)
    with pytest.raises(KafkaException) as metadata_failed:
        admin.list_topics(timeout=timeout)
    admin.poll(0.5)  # serves the error callback
    return [*errors, metadata_failed.value.args[0]]


@pytest.mark.parametrize(("case", "settings", "error"), [
    # the broker answers only ApiVersions and SASL before a login, and closes the connection on anything else
    ("no SASL", {"security.protocol": "PLAINTEXT"}, "Broker transport failure"),
    ("PLAIN", {"sasl.mechanism": "PLAIN"}, "Unsupported SASL mechanism"),  # SCRAM only: no clear-text password
    ("wrong password", {"sasl.password": "not-the-password"}, "Invalid username or password"),
])
def test_entry_command_refuses_clients_that_do_not_log_in(entry_server: EntryServer, case: str,
                                                          settings: dict[str, str], error: str) -> None:
    errors = login_errors(entry_server.kafka(**settings), timeout=5)
    assert any(error in e.str() for e in errors), errors
    if case == "no SASL":  # the server, alive, closed the connection on purpose
        assert "before SASL authentication; closing the connection" in entry_server.log_path.read_text()
    if case == "wrong password":
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    request = urllib.request.Request(f"http://127.0.0.1:{entry_server.http_port}/rest/sql", data=b"SHOW USERS")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401


def test_compose_generator_feeds_topic_meters_through_the_entry_command(entry_server: EntryServer, tmp_path: Path) -> None:
    generator = load_compose()["services"]["generator"]
    interpreter, script = generator["entrypoint"]
    ready_file = tmp_path / "generator.ready"
    args = list(generator["command"])
    args[args.index("--url") + 1] = f"http://127.0.0.1:{entry_server.http_port}"
    args[args.index("--ready-file") + 1] = str(ready_file)
    args[args.index("--password-file") + 1] = entry_server.env[ROOT_PASSWORD_FILE_ENV]
    command = [interpreter, str(repo_path(generator, script)), *args]
    log_path = tmp_path / "generator.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=entry_server.env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not ready_file.exists():
            assert proc.poll() is None, f"generator exited with {proc.returncode}:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"generator not ready within 60 s:\n{log_path.read_text()}"
            time.sleep(0.05)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)  # docker stop
        assert proc.wait(30) == 0, log_path.read_text()
    finally:
        stop_process(proc)
    written = re.search(r"stopped: ([\d,]+) rows written", log_path.read_text())
    assert written and int(written[1].replace(",", "")) > 0, log_path.read_text()

    consumer = Consumer(entry_server.kafka(**{"group.id": f"docker-test-{uuid.uuid4().hex}",
                                              "auto.offset.reset": "earliest", "enable.auto.commit": "false"}))
    try:
        consumer.subscribe(["topic_meters"])
        deadline = time.monotonic() + 30
        message = None
        while message is None or message.error():
            assert time.monotonic() < deadline, "no record from topic_meters within 30 s"
            message = consumer.poll(1.0)
    finally:
        consumer.close()
    row = json.loads(message.value())
    columns = [field.split()[0] for field in meters.VALUE_SCHEMA.split(",")]
    assert set(columns) <= set(row), (columns, row)
    assert message.key().decode().startswith("d1") and row["voltage"] > 200
