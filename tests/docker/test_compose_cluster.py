"""docker/compose.cluster.yaml: three etcd members and three walgate nodes, TLS on, checked without a Docker engine.

- The certs service is the project's image running docker/make_certs.py (its command accepted by the script's
  parser) for every etcd member and node, into the certs volume, which every member and node mounts read-only.
- Each etcd service's command uses only flags the installed etcd (Debian's etcd-server, the version the image tag
  names) lists in ``etcd --help``; the members name each other in ``--initial-cluster`` with the peer URLs each
  advertises, each advertises its own service name over https, serves clients and peers with its own certificate
  and asks theirs, and keeps its data on a volume of its own.
- Each walgate service is the project's image; its command is accepted by ``walgate serve``'s own parser and, with
  the image's ENV and the service's environment, makes a configuration walgate accepts (protected mode included):
  distinct node ids, the etcd endpoints the members advertise (reached with the CA and the node's own certificate),
  a SASL_SSL listener with the node's certificate, advertised as its service name on the port it listens on and
  publishes, a healthcheck checking those ports, its data dir on a volume of its own.
- The generator's command is accepted by docker/generate.py's parser and points at node 1.
- The whole file runs here: the certs command, then every etcd and walgate command, with each service name
  replaced by a loopback address of its own (so the certificates name those addresses) and the container paths by
  temporary ones (a process that exits started again as its service's restart policy says), forms a cluster over
  TLS; a confluent-kafka client over SASL_SSL (SCRAM, trusting the made CA)
  bootstrapped on the three advertised addresses creates a topic whose partitions are led by the three nodes,
  produces to each and reads it back, and ``SHOW DNODES`` lists them.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from test_docker import (
    COMPOSE,
    DOCKER,
    ROOT_SECRET,
    SECRET_FILE,
    compose_env,
    image_env,
    is_bind,
    load_compose,
    load_generator,
    load_image,
    load_module,
    mounts,
)

from livewalgate import stop_process
from walgate.gateway.cli import parser, protected_mode_refusal, serve_config
from walgate.gateway.cluster_up import free_loopback_block
from walgate.gateway.config import Config
from walgate.gateway.root_user import ROOT_PASSWORD_FILE_ENV

COMPOSE_CLUSTER = COMPOSE.parent / "compose.cluster.yaml"
ETCD_SERVICES = ("etcd1", "etcd2", "etcd3")
NODE_SERVICES = ("walgate1", "walgate2", "walgate3")
ROOT_PASSWORD = "cluster-r00t"
START_S = 120.0
RESTARTS = 3  # the restarts of one service that its restart policy makes before the fixture gives up
PORTS = (2379, 2380, 9092, 9093, 9094, 6041, 6042, 6043)  # every port the file's services listen on
CERTS = "/certs"  # where the certs volume is mounted


def services() -> dict[str, Any]:
    return dict(load_compose(COMPOSE_CLUSTER)["services"])


def etcd_binary() -> str:
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.fail("etcd is not installed: install Debian's etcd-server (.ci/run does)")
    return etcd


def etcd_flags(service: dict[str, Any]) -> dict[str, str]:
    """The ``--flag value`` pairs of an etcd service's command (etcd itself first, each flag once; a boolean flag
    written ``--flag=true``, as Go's flag package needs)."""
    command = service["command"]
    assert PurePosixPath(command[0]).name == "etcd", command
    pairs = [part for arg in command[1:] for part in (arg.split("=", 1) if arg.startswith("--") else [arg])]
    assert len(pairs) % 2 == 0 and all(flag.startswith("--") for flag in pairs[::2]), command
    flags = dict(zip(pairs[::2], pairs[1::2]))
    assert len(flags) == len(pairs) // 2, f"a flag given twice: {command}"
    return flags


def certs_command(service: dict[str, Any]) -> Any:
    """The certs service's command through docker/make_certs.py's own parser (it is the script, bind-mounted)."""
    [script] = [t for s, t, _ in mounts(service) if s == "./make_certs.py"]
    assert service["entrypoint"] == ["python", script]
    return load_module(DOCKER / "make_certs.py").parser().parse_args(service["command"])


def data_mount(service: dict[str, Any]) -> tuple[str, str, str]:
    """The service's one volume besides the certs (its data)."""
    [(source, target, mode)] = [(s, t, m) for s, t, m in mounts(service) if s != "certs"]
    return source, target, mode


def node_config(service: dict[str, Any]) -> Config:
    """The configuration ``walgate serve`` makes of a walgate service: its command through walgate's own parser,
    the image's ENV and the service's environment (as the container gets them)."""
    args = parser().parse_args(service["command"])  # exits (fails) on an unknown flag
    assert args.command == "serve"
    return serve_config(args, env=load_image().env | compose_env(service))


def test_compose_cluster_has_three_members_three_nodes_a_generator_and_a_volume_each() -> None:
    compose = load_compose(COMPOSE_CLUSTER)
    assert set(compose["services"]) == {"certs", *ETCD_SERVICES, *NODE_SERVICES, "generator"}
    volumes = {name: [source for source, _, _ in mounts(s) if not is_bind(source) and source != "certs"]
               for name, s in compose["services"].items()}
    used = [v for vs in volumes.values() for v in vs]
    assert len(used) == len(set(used)) == 6, f"one data volume per member and node, none shared: {volumes}"
    assert set(used) | {"certs"} == set(compose["volumes"])
    certs = {name: [(t, m) for s, t, m in mounts(svc) if s == "certs"] for name, svc in compose["services"].items()}
    assert certs.pop("certs") == [(CERTS, "rw")] and certs.pop("generator") == []
    assert certs == {name: [(CERTS, "ro")] for name in (*ETCD_SERVICES, *NODE_SERVICES)}, "read-only elsewhere"
    assert set(compose["secrets"]) == {ROOT_SECRET} == {s for svc in compose["services"].values()
                                                         for s in svc.get("secrets", [])}


def test_compose_cluster_certs_are_made_once_for_every_member_and_node_before_etcd_starts() -> None:
    all_services = services()
    certs = all_services["certs"]
    args = certs_command(certs)
    assert str(args.dir) == CERTS and args.hosts == [*ETCD_SERVICES, *NODE_SERVICES]
    assert args.owner == "10001:10001", "the image's walgate user reads the keys"
    assert certs["build"] == all_services["walgate1"]["build"] and certs["restart"] == "no"
    for name in ETCD_SERVICES:
        assert all_services[name]["depends_on"] == {"certs": {"condition": "service_completed_successfully"}}


def test_compose_cluster_etcd_members_use_flags_the_installed_etcd_has_and_name_each_other() -> None:
    all_services = services()
    help_text = subprocess.run([etcd_binary(), "--help"], capture_output=True, text=True, timeout=30).stdout
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", help_text, re.M))
    assert "--initial-cluster" in known, help_text[:500]
    version = re.search(r"etcd Version: (\S+)", subprocess.run([etcd_binary(), "--version"], capture_output=True,
                                                                text=True, timeout=30).stdout)
    assert version is not None
    peers = {}
    for name in ETCD_SERVICES:
        service = all_services[name]
        assert service["image"].endswith(f":v{version[1]}"), "the image is the etcd version the tests run"
        flags = etcd_flags(service)
        assert set(flags) <= known, f"{name}: flags etcd does not have: {set(flags) - known}"
        assert flags["--name"] == name
        client_port = flags["--listen-client-urls"].rsplit(":", 1)[1]
        assert flags["--listen-client-urls"].startswith("https://") and flags["--listen-peer-urls"].startswith("https://")
        assert flags["--advertise-client-urls"] == f"https://{name}:{client_port}"
        assert flags["--initial-advertise-peer-urls"] == f"https://{name}:{flags['--listen-peer-urls'].rsplit(':', 1)[1]}"
        for side in ("", "peer-"):  # its own certificate, and clients' / peers' asked for and checked against the CA
            assert flags[f"--{side}cert-file"] == f"{CERTS}/{name}.crt" and flags[f"--{side}key-file"] == f"{CERTS}/{name}.key"
            assert flags[f"--{side}trusted-ca-file"] == f"{CERTS}/ca.crt" and flags[f"--{side}client-cert-auth"] == "true"
        assert f"--cert=/certs/{name}.crt" in service["healthcheck"]["test"]
        volume, target, mode = data_mount(service)
        assert flags["--data-dir"] == target and mode == "rw"
        peers[name] = flags["--initial-advertise-peer-urls"]
    initial = {etcd_flags(all_services[n])["--initial-cluster"] for n in ETCD_SERVICES}
    assert initial == {",".join(f"{n}={url}" for n, url in peers.items())}
    assert len({etcd_flags(all_services[n])["--initial-cluster-token"] for n in ETCD_SERVICES}) == 1


def test_compose_cluster_nodes_are_the_image_configured_as_one_cluster() -> None:
    all_services, image = services(), load_image()
    single = load_compose()["services"]["walgate"]
    members = ",".join(etcd_flags(all_services[n])["--advertise-client-urls"] for n in ETCD_SERVICES)
    node_ids, published = set(), []
    for name in NODE_SERVICES:
        service = all_services[name]
        assert service["build"] == single["build"] and service["image"] == single["image"], "the project's image"
        config = node_config(service)
        assert protected_mode_refusal(config) is None
        node_ids.add(config.node_id)
        assert config.cluster_etcd_endpoints == members
        assert (config.cluster_etcd_ssl_cafile, config.cluster_etcd_ssl_certfile, config.cluster_etcd_ssl_keyfile) == (
            Path(f"{CERTS}/ca.crt"), Path(f"{CERTS}/{name}.crt"), Path(f"{CERTS}/{name}.key"))
        assert config.offsets_topic_num_partitions == 50, "consumer groups spread over the nodes (Kafka's default)"
        [listener] = config.kafka_listeners()
        assert listener.info.name == "SASL_SSL" and listener.info.tls
        assert config.ssl_keystore_location == Path(f"{CERTS}/{name}.pem")
        assert config.ssl_truststore_location == Path(f"{CERTS}/ca.crt"), "other nodes' certificates checked"
        assert config.advertised_addresses() == {listener.name: (name, listener.port)}, "its own name and port"
        assert set(service["ports"]) == {f"{listener.port}:{listener.port}", f"{config.http_port}:{config.http_port}"}
        published += service["ports"]
        _, argv = image.healthcheck
        expected = [a.replace("6041", str(config.http_port)).replace("9092", str(listener.port)) for a in argv]
        assert service["healthcheck"]["test"] == ["CMD", *expected]
        volume, target, mode = data_mount(service)
        assert [target] == image.volumes and str(config.data_dir) == target and mode == "rw"
        assert compose_env(service)[ROOT_PASSWORD_FILE_ENV] == SECRET_FILE and service["secrets"] == [ROOT_SECRET]
        assert service["depends_on"] == {n: {"condition": "service_healthy"} for n in ETCD_SERVICES}
    assert node_ids == {1, 2, 3}
    assert len(published) == len(set(published)) == 6, "no two services publish the same host port"


def test_compose_cluster_generator_feeds_node_1() -> None:
    all_services = services()
    generator = all_services["generator"]
    args = load_generator().parser().parse_args(generator["command"])
    assert args.url == f"http://walgate1:{node_config(all_services['walgate1']).http_port}"
    assert args.user == "root" and str(args.password_file) == SECRET_FILE
    assert args.vgroups == 1, "one vgroup, on node 1 (the first placed): SQL INSERTs are not forwarded between nodes"
    assert generator["depends_on"] == {n: {"condition": "service_healthy"} for n in NODE_SERVICES}


# ====================================================================== the whole file, run here


class Localized:
    """The compose file's commands and environments for this machine: each service name, and ``0.0.0.0`` in its
    own command, become the service's loopback address; container paths become directories under ``root``."""

    def __init__(self, root: Path) -> None:
        base = free_loopback_block(6, PORTS, random.Random(os.getpid() ^ time.time_ns())).removesuffix("1")
        self.root = root
        self.address = {name: base + str(i) for i, name in enumerate((*ETCD_SERVICES, *NODE_SERVICES), 1)}
        self.secret = root / ROOT_SECRET
        self.secret.write_text(ROOT_PASSWORD + "\n")
        self.certs = root / "certs"

    def paths(self, service: str, mounted: list[tuple[str, str, str]]) -> dict[str, Path]:
        """Each volume's container path: the certs volume's one directory, any other the service's own."""
        return {target: self.certs if source == "certs" else self.root / service
                for source, target, _ in mounted if not is_bind(source)}

    def context(self) -> ssl.SSLContext:
        """A client's TLS context: the made CA trusted, node 1's certificate presented (etcd asks for one)."""
        context = ssl.create_default_context(cafile=self.certs / "ca.crt")
        node = self.address["walgate1"]
        context.load_cert_chain(self.certs / f"{node}.crt", self.certs / f"{node}.key")
        return context

    def text(self, service: str, value: str, paths: dict[str, Path]) -> str:
        for name, address in self.address.items():
            value = re.sub(rf"\b{name}\b", address, value)
        if "0.0.0.0" in value:
            value = value.replace("0.0.0.0", self.address[service])
        value = value.replace(SECRET_FILE, str(self.secret))
        for container_path, local in paths.items():
            value = value.replace(container_path, str(local))
        return value


@pytest.fixture(scope="module")
def compose_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Localized, dict[str, Any]]]:
    root = tmp_path_factory.mktemp("compose-cluster")
    local, all_services = Localized(root), services()
    procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    started: dict[str, tuple[list[str], dict[str, str] | None]] = {}  # service -> its command and environment
    restarts = dict.fromkeys(all_services, 0)

    def start(name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = root / f"{name}.log"
        started[name] = (argv, env)
        with log.open("ab") as out:  # (a restart's output after its earlier lives')
            procs.append((name, subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 env=env), log))

    def restarted(i: int) -> bool:
        """Docker's restart policy for the service whose process ``procs[i]`` exited: started again (at most
        :data:`RESTARTS` times) when the file says ``unless-stopped`` or ``always``: a node whose start found etcd
        not answering within 5 s (a loaded machine) exits, and its container is restarted so."""
        name = procs[i][0]
        if all_services[name].get("restart") not in ("unless-stopped", "always") or restarts[name] >= RESTARTS:
            return False
        restarts[name] += 1
        del procs[i]
        start(name, *started[name])
        return True

    def wait(urls: list[str], context: ssl.SSLContext | None = None) -> None:
        deadline = time.monotonic() + START_S
        while urls:
            for i, (name, proc, log) in reversed(list(enumerate(procs))):
                if proc.poll() is not None and not restarted(i):
                    pytest.fail(f"{name} exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"not ready within {START_S:g} s: {urls}")
            urls = [u for u in urls if not ok(u, context)]
            time.sleep(0.2)

    try:
        certs = all_services["certs"]
        made = subprocess.run([sys.executable, str(DOCKER / "make_certs.py"),
                               *(local.text("certs", a, local.paths("certs", mounts(certs))) for a in certs["command"])],
                              capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        for name in ETCD_SERVICES:
            service = all_services[name]
            argv = [local.text(name, a, local.paths(name, mounts(service))) for a in service["command"]]
            start(name, [etcd_binary(), *argv[1:]])
        wait([f"https://{local.address[n]}:2379/health" for n in ETCD_SERVICES], local.context())
        for name in NODE_SERVICES:
            service = all_services[name]
            paths = local.paths(name, mounts(service))
            env = {k: local.text(name, v, paths) for k, v in (image_env() | compose_env(service)).items()}
            argv = [local.text(name, a, paths) for a in load_image().command[:1] + service["command"]]
            assert shutil.which(argv[0], path=env["PATH"]), argv
            start(name, argv, env)
        wait([f"http://{local.address[n]}:{node_config(all_services[n]).http_port}/readyz" for n in NODE_SERVICES])
        yield local, all_services
    finally:
        for _, proc, _ in reversed(procs):  # the nodes, then etcd
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            stop_process(proc, 30)
        for name, _, log in procs:
            assert "Traceback" not in log.read_text(errors="replace"), name


def ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def ready_nodes(http_url: str) -> set[int]:
    """The node ids ``SHOW DNODES`` lists as ready on the node at ``http_url`` (as root: HTTP asks for Basic auth
    since the image's listener is SASL)."""
    request = urllib.request.Request(f"{http_url}/rest/sql", data=b"SHOW DNODES", method="POST")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"root:{ROOT_PASSWORD}".encode()).decode())
    with urllib.request.urlopen(request, timeout=30) as r:
        return {row[0] for row in json.load(r)["data"] if row[2] == "ready"}


def test_compose_cluster_runs_here_as_one_cluster_reached_through_the_advertised_addresses(
        compose_cluster: tuple[Localized, dict[str, Any]]) -> None:
    local, all_services = compose_cluster
    bootstrap = ",".join(
        local.text(n, compose_env(all_services[n])["WALGATE_ADVERTISED_LISTENERS"], {}).split("://", 1)[1]
        for n in NODE_SERVICES)
    client = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(local.certs / "ca.crt"),
              "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "root", "sasl.password": ROOT_PASSWORD}
    deadline = time.monotonic() + START_S
    http = {n: f"http://{local.address[n]}:{node_config(all_services[n]).http_port}" for n in NODE_SERVICES}
    # each node re-reads its membership view (which placement uses) every third of the session timeout
    while any(ready_nodes(url) != {1, 2, 3} for url in http.values()):
        assert time.monotonic() < deadline, {n: ready_nodes(url) for n, url in http.items()}
        time.sleep(0.5)
    admin = AdminClient(client)
    assert set(admin.list_topics(timeout=30).brokers) <= {1, 2, 3}
    admin.create_topics([NewTopic("spread", 3, 1)])["spread"].result(timeout=60)
    meta = admin.list_topics("spread", timeout=30)
    assert {p.leader for p in meta.topics["spread"].partitions.values()} == {1, 2, 3}
    producer = Producer({**client, "acks": "all"})
    for partition in range(3):
        producer.produce("spread", b"over TLS %d" % partition, partition=partition)
    assert producer.flush(60) == 0, "every record acknowledged, by each of the three nodes"
    consumer = Consumer({**client, "group.id": "compose-tls", "enable.auto.commit": False})
    consumer.assign([TopicPartition("spread", p, 0) for p in range(3)])
    got: set[bytes] = set()
    try:
        for _ in range(60):
            got |= {m.value() for m in consumer.consume(10, 1.0) if m.error() is None}
            if len(got) == 3:
                break
    finally:
        consumer.close()
    assert got == {b"over TLS %d" % p for p in range(3)}
