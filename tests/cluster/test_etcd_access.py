"""A node reaches its etcd over TLS with a client certificate, and as an etcd user: real ``walgate serve`` nodes
(stopped by PID) over a real etcd 3.4 started here (``--client-cert-auth`` over certificates made here; ``auth
enable`` through etcd's own JSON gateway), what they wrote read back through that gateway, not walgate's client.

A node with the CA, certificate and key registers and a topic created through it is in the catalog (``walgate
cluster nodes`` with the same flags lists it; without a client certificate it exits 1); a node that does
not trust etcd's certificate, has no client certificate, or speaks plaintext to the TLS port stops with one error
line. A node with the etcd user's password (from a file) registers and creates a topic (``walgate cluster status``
reads the cluster as that user); a wrong password stops it
with one line. A session whose auth token expired authenticates again and its call (a write) is made once.
Bad combinations of the settings are refused before anything opens.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import etcd_binary, free_port
from serve_support import SESSION_MS, no_traceback

from livewalgate import WALGATE, running_walgate, walgate_env
from testcerts import Certs, make_certs
from walgate.cluster.etcd import EtcdAccess, EtcdSession
from walgate.cluster.model import ControlPlaneRefused, Keys
from walgate.gateway.config import Config, ConfigError
from walgate.gateway.etcd_access import etcd_access

ROOT_PASSWORD = "etcd-root-secret"


@dataclass
class TlsEtcd:
    url: str  # https://127.0.0.1:port
    certs: Certs
    context: ssl.SSLContext  # trusts etcd's certificate and presents the client one: the test's own reads

    def tls_args(self, *, ca: Path | None = None, client: bool = True) -> list[str]:
        args = ["--cluster-etcd-ssl-cafile", str(ca or self.certs.ca)]
        if client:
            args += ["--cluster-etcd-ssl-certfile", str(self.certs.client_cert),
                     "--cluster-etcd-ssl-keyfile", str(self.certs.client_key)]
        return args


def _post(url: str, path: str, body: dict[str, object], context: ssl.SSLContext | None = None,
          token: str | None = None) -> dict[str, object]:
    """etcd's JSON gateway (``/v3/...``): ``body``'s answer."""
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **({"Authorization": token}
                                                                                      if token else {})})
    with urllib.request.urlopen(request, timeout=10, context=context) as reply:
        answer: dict[str, object] = json.loads(reply.read())
        return answer


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _range(url: str, prefix: bytes, field: str, context: ssl.SSLContext | None, token: str | None) -> list[bytes]:
    """``field`` (key or value) of every key under ``prefix``, read through etcd's JSON gateway."""
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    answer = _post(url, "/v3/kv/range", {"key": _b64(prefix), "range_end": _b64(end)}, context, token)
    kvs = answer.get("kvs", [])
    assert isinstance(kvs, list)
    return [base64.b64decode(kv[field]) for kv in kvs]


def catalog_values(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> list[bytes]:
    """The catalog records etcd holds."""
    return _range(url, Keys("walgate").records, "value", context, token)


def node_keys(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> list[bytes]:
    """The keys of the live registrations."""
    return _range(url, Keys("walgate").nodes, "key", context, token)


@contextmanager
def one_etcd(work: Path, scheme: str, *args: str, context: ssl.SSLContext | None = None) -> Iterator[str]:
    """A one-member etcd serving clients at ``scheme``://127.0.0.1 (``args``: more flags), stopped by PID; its
    client URL. ``context``: how the test reaches an https:// one."""
    port, peer = free_port(), free_port()
    url, peer_url = f"{scheme}://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
    log_path = work / "etcd.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [etcd_binary(), "--name", "m0", "--data-dir", str(work / "m0"), "--listen-client-urls", url,
             "--advertise-client-urls", url, "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"m0={peer_url}", "--logger", "zap", "--log-outputs", "stderr", *args],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2, context=context) as reply:
                    if b'"true"' in reply.read():
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(0.1)
        yield url
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsEtcd]:
    """A one-member etcd serving clients over TLS only, with ``--client-cert-auth``."""
    work = tmp_path_factory.mktemp("etcd-tls")
    certs = make_certs(work / "certs")
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client))
    with one_etcd(work, "https", "--cert-file", str(certs.server), "--key-file", str(certs.server),
                  "--trusted-ca-file", str(certs.ca), "--client-cert-auth", context=context) as url:
        yield TlsEtcd(url, certs, context)


@pytest.fixture(scope="module")
def auth_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-member etcd with ``auth enable`` (user root) whose auth tokens expire after 1 s unused."""
    with one_etcd(tmp_path_factory.mktemp("etcd-auth"), "http", "--auth-token-ttl", "1") as url:
        enable_auth(url)
        yield url


def refused_start(tmp_path: Path, *args: str) -> str:
    """The stderr of a ``walgate serve --cluster`` that must stop with one error line (exit 1 or 2)."""
    result = subprocess.run([*WALGATE, "serve", "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1",
                             "--kafka-port", "0", "--http-port", "0", "--node-id", "9", *args],
                            capture_output=True, text=True, timeout=120, env=walgate_env(), stdin=subprocess.DEVNULL)
    assert result.returncode in (1, 2), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    failed = [line for line in result.stderr.splitlines() if "walgate failed" in line]
    assert len(failed) == 1, result.stderr
    return failed[0]


def create_topic(kafka_port: int, topic: str) -> None:
    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}"})
    for future in client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)]).values():
        future.result(timeout=60)


def test_a_node_with_a_client_certificate_registers_over_tls_and_its_topic_is_in_the_catalog(
        tls_etcd: TlsEtcd, tmp_path: Path) -> None:
    with running_walgate(tmp_path / "node1", "--cluster", f"etcd={tls_etcd.url}", "--node-id", "1",
                         "--override", f"broker.session.timeout.ms={SESSION_MS}", *tls_etcd.tls_args()) as server:
        assert Keys("walgate").node(1) in node_keys(tls_etcd.url, tls_etcd.context)
        create_topic(server.kafka_port, "over-tls")
        assert any(b"over-tls" in value for value in catalog_values(tls_etcd.url, tls_etcd.context))
        nodes = cluster_command("nodes", "--json", "--cluster", f"etcd={tls_etcd.url}", *tls_etcd.tls_args())
        assert nodes.returncode == 0, nodes.stderr  # walgate cluster reads etcd with serve's flags
        assert [(n["node_id"], n["live"]) for n in json.loads(nodes.stdout)] == [(1, True)]
        refused = cluster_command("nodes", "--cluster", f"etcd={tls_etcd.url}", *tls_etcd.tls_args(client=False))
        assert refused.returncode == 1 and "cannot read the cluster" in refused.stderr
        no_traceback(server)


def cluster_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``walgate cluster <args>`` run to completion (bounded)."""
    return subprocess.run([*WALGATE, "cluster", *args, "--timeout", "5"], capture_output=True, text=True,
                          timeout=120, env=walgate_env(), stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("case", "expected"), [
    ("wrong CA", "CERTIFICATE_VERIFY_FAILED"),
    ("no client certificate", "cluster.etcd.ssl.certfile/keyfile are a certificate it trusts"),
    ("plaintext", "a TLS etcd needs https:// and cluster.etcd.ssl.*"),
])
def test_a_node_that_cannot_speak_tls_to_etcd_stops_with_one_line(tls_etcd: TlsEtcd, tmp_path: Path, case: str,
                                                                  expected: str) -> None:
    if case == "wrong CA":
        args = ["--cluster", f"etcd={tls_etcd.url}", *tls_etcd.tls_args(ca=tls_etcd.certs.other_ca)]
    elif case == "no client certificate":
        args = ["--cluster", f"etcd={tls_etcd.url}", *tls_etcd.tls_args(client=False)]
    else:
        args = ["--cluster", "etcd=" + tls_etcd.url.replace("https://", "http://")]
    line = refused_start(tmp_path, *args)
    assert expected in line, line
    assert Keys("walgate").node(9) not in node_keys(tls_etcd.url, tls_etcd.context)


def enable_auth(url: str) -> None:
    """``user add root``, ``role add root``, ``user grant-role root root``, ``auth enable``, as etcdctl does them."""
    _post(url, "/v3/auth/user/add", {"name": "root", "password": ROOT_PASSWORD})
    _post(url, "/v3/auth/role/add", {"name": "root"})
    _post(url, "/v3/auth/user/grant", {"user": "root", "role": "root"})
    _post(url, "/v3/auth/enable", {})


def root_token(url: str) -> str:
    token = _post(url, "/v3/auth/authenticate", {"name": "root", "password": ROOT_PASSWORD})["token"]
    assert isinstance(token, str)
    return token


def test_a_node_with_the_etcd_users_password_registers_and_a_wrong_one_stops_it(auth_etcd: str,
                                                                                 tmp_path: Path) -> None:
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text(ROOT_PASSWORD + "\n")
    wrong.write_text("not-it\n")
    line = refused_start(tmp_path / "wrong-node", "--cluster", f"etcd={auth_etcd}", "--cluster-etcd-user", "root",
                         "--cluster-etcd-password-file", str(wrong))
    assert "refused" in line and "authentication failed" in line, line
    line = refused_start(tmp_path / "no-user", "--cluster", f"etcd={auth_etcd}")
    assert "user name is empty" in line, line
    with running_walgate(tmp_path / "node1", "--cluster", f"etcd={auth_etcd}", "--node-id", "1",
                         "--override", f"broker.session.timeout.ms={SESSION_MS}", "--cluster-etcd-user", "root",
                         "--cluster-etcd-password-file", str(right)) as server:
        token = root_token(auth_etcd)
        assert node_keys(auth_etcd, token=token) == [Keys("walgate").node(1)]
        create_topic(server.kafka_port, "as-root")
        assert any(b"as-root" in value for value in catalog_values(auth_etcd, token=token))
        status = cluster_command("status", "--json", "--cluster", f"etcd={auth_etcd}", "--cluster-etcd-user", "root",
                                 "--cluster-etcd-password-file", str(right))
        assert status.returncode == 0 and json.loads(status.stdout)["nodes"] == [1], status.stderr
        no_traceback(server)


def test_a_session_whose_token_expired_authenticates_again_and_a_wrong_password_is_refused(
        auth_etcd: str, caplog: pytest.LogCaptureFixture) -> None:
    host, port = auth_etcd.removeprefix("http://").split(":")

    async def main() -> None:
        session = EtcdSession([(host, int(port))], timeout=5.0, access=EtcdAccess(user="root", password=ROOT_PASSWORD))
        try:
            assert await session.get(b"/absent") is None
            await asyncio.sleep(3)  # unused for longer than --auth-token-ttl: etcd forgets the token
            lease = await session.grant(5)  # a write (never retried otherwise): refused for the token, then made
            await session.revoke(lease)
        finally:
            await session.close()
        wrong = EtcdSession([(host, int(port))], timeout=5.0, access=EtcdAccess(user="root", password="not-it"))
        try:  # refused, not unreachable: at once, and a running node's loops wait for it as for etcd
            with pytest.raises(ControlPlaneRefused, match="authentication failed"):
                await wrong.get(b"/absent")
        finally:
            await wrong.close()

    with caplog.at_level(logging.INFO, logger="walgate.cluster"):
        asyncio.run(main())
    assert caplog.text.count("the auth token is no longer valid: authenticating again") == 1, caplog.text


def test_bad_combinations_and_unreadable_files_are_refused_before_the_start(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    https = {"data_dir": tmp_path / "data", "cluster_etcd_endpoints": "https://127.0.0.1:2379"}
    refusals = [
        ({**https, "cluster_etcd_ssl_keyfile": certs.client_key}, "go together"),
        ({**https, "cluster_etcd_endpoints": "http://127.0.0.1:2379", "cluster_etcd_ssl_cafile": certs.ca},
         "need https:// etcd endpoints"),
        ({**https, "cluster_etcd_endpoints": "https://127.0.0.1:2379,http://127.0.0.1:2380"}, "all https:// or none"),
        ({**https, "cluster_etcd_user": "root"}, "go together"),
        ({**https, "cluster_etcd_password": "x", "cluster_etcd_password_file": certs.ca}, "either"),
    ]
    for settings, expected in refusals:
        with pytest.raises(ConfigError, match=expected):
            Config(**settings)  # type: ignore[arg-type]
    for settings, expected in [
        ({**https, "cluster_etcd_ssl_cafile": tmp_path / "missing.pem"}, "missing.pem: cannot read it"),
        ({**https, "cluster_etcd_ssl_cafile": certs.client_key}, "not PEM CA certificates"),
        ({**https, "cluster_etcd_ssl_certfile": certs.client_cert, "cluster_etcd_ssl_keyfile": certs.ca},
         "unencrypted private key"),
        ({**https, "cluster_etcd_user": "root", "cluster_etcd_password_file": tmp_path / "none"}, "cannot read"),
    ]:
        with pytest.raises(ConfigError, match=expected):
            etcd_access(Config(**settings))  # type: ignore[arg-type]
    access = etcd_access(Config(**{**https, "cluster_etcd_ssl_cafile": certs.ca,  # type: ignore[arg-type]
                                   "cluster_etcd_ssl_certfile": certs.client_cert,
                                   "cluster_etcd_ssl_keyfile": certs.client_key}))
    assert access.tls and access.ca == certs.ca.read_bytes() and access.key == certs.client_key.read_bytes()
