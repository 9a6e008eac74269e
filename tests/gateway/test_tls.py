"""TLS and several Kafka listeners on a real ``walgate serve`` started with a server.properties file: each listener
advertises its own address, records produced and fetched over TLS arrive byte for byte (the sendfile fallback),
a client certificate becomes the connection's principal through ssl.principal.mapping.rules, an untrusted server
certificate or a missing client certificate under ssl.client.auth=required fail the client's handshake, and the
HTTP API answers over HTTPS, a SASL_SSL listener speaks TLS. In process: the FrameWriter's TLS path on uvloop,
TLS contexts from files, inline PEM and encrypted keys, and the alert of a failed handshake reaching the client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import struct
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvloop
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from livewalgate import free_port, running_walgate, walgate_env
from testcerts import Certs, make_certs
from walgate.gateway.kafka.frame_writer import FrameWriter
from walgate.gateway.root_user import ROOT_PASSWORD_ENV
from walgate.storage.wal import FileRegion, SegmentFile

ROOT_PASSWORD = "tls-root-secret"

TOPIC = "secure"
VALUE = 40_000  # bytes per record: batches well over the 16 KiB served from the WAL file (sendfile when plain)


@dataclass
class Node:
    certs: Certs
    plain: str  # bootstrap of the PLAINTEXT listener
    ssl: str  # SSL, ssl.client.auth=requested, advertised as localhost
    mtls: str  # SSL, ssl.client.auth=required (listener.name.mtls.*)
    sasl_ssl: tuple[str, int]  # SASL_SSL: TLS here, SASL is the authentication module's
    https: str
    log: object  # () -> str


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    work = tmp_path_factory.mktemp("tls")
    certs = make_certs(work / "certs")
    plain, secure, mtls, sasl_ssl = free_port(), free_port(), free_port(), free_port()
    config = work / "server.properties"
    config.write_text(
        "# Kafka's names\n"
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure},MTLS://127.0.0.1:{mtls},"
        f"SASL_SSL://127.0.0.1:{sasl_ssl}\n"
        f"advertised.listeners=SSL://localhost:{secure}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_SSL:SASL_SSL\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={certs.server}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
        "ssl.client.auth=requested\n"
        "listener.name.mtls.ssl.client.auth=required\n"
        "ssl.enabled.protocols=TLSv1.2,TLSv1.3\n"
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*),OU=Testing.*$/$1/U,DEFAULT\n"
        "num.io.threads=8\n"
    )
    env = {**walgate_env(), ROOT_PASSWORD_ENV: ROOT_PASSWORD}  # a SASL_SSL listener: authentication is on
    with running_walgate(work / "walgate", "--config", str(config), "--override", "http.ssl.enabled=true",
                         env=env) as server:
        host, port = server.http_url.removeprefix("http://").split(":")
        yield Node(certs, f"127.0.0.1:{plain}", f"localhost:{secure}", f"localhost:{mtls}", ("localhost", sasl_ssl),
                   f"https://localhost:{port}", server.log)


def _ssl(node: Node, *, cert: bool = False, ca: Path | None = None) -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(ca or node.certs.ca)}
    if cert:
        conf |= {"ssl.certificate.location": str(node.certs.client_cert),
                 "ssl.key.location": str(node.certs.client_key)}
    return conf


def _brokers(bootstrap: str, **conf: str) -> list[str]:
    metadata = AdminClient({"bootstrap.servers": bootstrap, **conf}).list_topics(timeout=10)
    return [f"{b.host}:{b.port}" for b in metadata.brokers.values()]


def _read(bootstrap: str, count: int, **conf: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **conf})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []
        for _ in range(50):
            for message in consumer.consume(count - len(values), timeout=1):
                assert message.error() is None, message.error()
                values.append(message.value())
            if len(values) == count:
                return values
        raise AssertionError(f"read {len(values)} of {count} records from {bootstrap}")
    finally:
        consumer.close()


def test_each_listener_advertises_its_own_address(node: Node) -> None:
    assert _brokers(node.plain) == [node.plain]
    assert _brokers(node.ssl, **_ssl(node)) == [node.ssl]  # advertised.listeners
    port = node.mtls.rsplit(":", 1)[1]
    assert _brokers(node.mtls, **_ssl(node, cert=True)) == [f"127.0.0.1:{port}"]  # none advertised: its own


def test_records_produced_over_tls_are_fetched_byte_for_byte_over_tls_and_plaintext(node: Node) -> None:
    admin = AdminClient({"bootstrap.servers": node.ssl, **_ssl(node)})
    admin.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result(15)
    values = [os.urandom(VALUE) for _ in range(40)]
    producer = Producer({"bootstrap.servers": node.ssl, "linger.ms": 20, **_ssl(node)})
    for value in values:
        producer.produce(TOPIC, value)
    assert producer.flush(15) == 0
    assert _read(node.ssl, len(values), **_ssl(node)) == values  # pread + TLS writes
    assert _read(node.plain, len(values)) == values  # sendfile


def test_the_group_coordinator_is_found_through_the_listener_in_use(node: Node) -> None:
    """FindCoordinator names the advertised SSL address (localhost): a commit and its read-back go through it."""
    admin = AdminClient({"bootstrap.servers": node.ssl, **_ssl(node)})
    admin.create_topics([NewTopic("coordinated", 1)])["coordinated"].result(15)
    consumer = Consumer({"bootstrap.servers": node.ssl, "group.id": "tls-group", **_ssl(node)})
    try:
        consumer.commit(offsets=[TopicPartition("coordinated", 0, 5)], asynchronous=False)
        [committed] = consumer.committed([TopicPartition("coordinated", 0)], timeout=10)
        assert committed.offset == 5
    finally:
        consumer.close()


def test_a_client_certificate_is_the_principal_through_the_mapping_rules(node: Node) -> None:
    _brokers(node.ssl, **_ssl(node, cert=True), **{"client.id": "with-cert"})
    _brokers(node.ssl, **_ssl(node), **{"client.id": "without-cert"})
    log = node.log()  # type: ignore[operator]
    assert "client id 'with-cert', principal User:ALICE" in log
    assert "client id 'without-cert', principal User:ANONYMOUS" in log
    assert "num.io.threads accepted and not used" in log  # a Kafka setting of no use to walgate: one line


def test_required_client_auth_refuses_a_client_without_a_certificate(node: Node) -> None:
    with pytest.raises(KafkaException, match="_TRANSPORT|Broker transport failure"):
        AdminClient({"bootstrap.servers": node.mtls, **_ssl(node)}).list_topics(timeout=2)
    assert _brokers(node.mtls, **_ssl(node, cert=True))


def test_a_client_that_does_not_trust_the_certificate_fails(node: Node) -> None:
    with pytest.raises(KafkaException, match="_TRANSPORT|Broker transport failure"):
        AdminClient({"bootstrap.servers": node.ssl, **_ssl(node, ca=node.certs.other_ca)}).list_topics(timeout=2)
    assert "Traceback" not in node.log()  # type: ignore[operator]


def test_a_sasl_ssl_listener_speaks_tls(node: Node) -> None:
    """ApiVersions v0 (answered before any SASL exchange) over TLS; the connection's principal is not taken from a
    client certificate there (SASL sets it)."""
    import socket

    context = ssl.create_default_context(cafile=str(node.certs.ca))
    context.load_cert_chain(node.certs.client)
    with socket.create_connection(node.sasl_ssl, timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        client_id = b"tls-probe"
        body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
        tls.sendall(struct.pack(">i", len(body)) + body)
        size, correlation_id, error_code = struct.unpack(">iih", tls.recv(10))
        assert (correlation_id, error_code) == (7, 0)
    log = node.log()  # type: ignore[operator]
    assert "client id 'tls-probe', principal User:ANONYMOUS" in log


def test_plaintext_kafka_on_a_tls_listener_is_closed_and_nothing_breaks(node: Node) -> None:
    import socket

    port = int(node.ssl.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        body = struct.pack(">hhih", 18, 0, 1, 5) + b"plain"  # ApiVersions v0, as a PLAINTEXT client sends it
        raw.sendall(struct.pack(">i", len(body)) + body)
        answer = raw.recv(64)
    assert answer == b""  # closed at once: OpenSSL sends no alert to a peer that does not speak TLS
    assert _brokers(node.ssl, **_ssl(node)) == [node.ssl]  # the listener still serves
    log = node.log()  # type: ignore[operator]
    assert "TLS handshake failed" in log and "Traceback" not in log


def test_the_http_api_speaks_https_with_the_same_certificate(node: Node) -> None:
    context = ssl.create_default_context(cafile=str(node.certs.ca))
    with urllib.request.urlopen(node.https + "/healthz", timeout=10, context=context) as response:
        assert response.status == 200
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(node.https + "/healthz", timeout=10,
                               context=ssl.create_default_context(cafile=str(node.certs.other_ca)))


def test_walgate_sql_over_https_trusts_ssl_cert_file(node: Node) -> None:
    import subprocess

    from livewalgate import WALGATE

    def sql(ca: Path) -> subprocess.CompletedProcess[str]:
        env = {**walgate_env(), "SSL_CERT_FILE": str(ca), "WALGATE_USER": "root", "WALGATE_PASSWORD": ROOT_PASSWORD}
        return subprocess.run([*WALGATE, "sql", "--url", node.https, "--json", "SHOW DATABASES"], capture_output=True,
                              text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)

    trusted = sql(node.certs.ca)
    assert trusted.returncode == 0 and '"code":0' in trusted.stdout, trusted.stderr
    untrusted = sql(node.certs.other_ca)
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr


def test_frame_writer_sends_file_regions_through_tls(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    data = os.urandom(3 << 20)
    segment = tmp_path / "segment.log"
    segment.write_bytes(data)
    chunks = [struct.pack(">i", 9), FileRegion(SegmentFile(segment), 5, (2 << 20) + 1), b"tail"]
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(certs.server)
    client_context = ssl.create_default_context(cafile=str(certs.ca))

    async def main() -> bytes:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            out = FrameWriter(writer)
            try:
                await out.write(chunks)
            finally:
                out.close()
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("localhost", port, ssl=client_context)
        got = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        server.close()
        await server.wait_closed()
        return got

    assert uvloop.run(main()) == struct.pack(">i", 9) + data[5:5 + (2 << 20) + 1] + b"tail"


# ----------------------------------------------------------------------------- server_context, in process


def _encrypted(certs: Certs, password: bytes) -> tuple[str, str]:
    """(the server's certificate chain, its private key encrypted with ``password``) as PEM text."""
    from cryptography.hazmat.primitives import serialization

    pem = certs.server.read_text()
    start = pem.index("-----BEGIN CERTIFICATE-----")
    key = serialization.load_pem_private_key(pem[:start].encode(), password=None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(password)).decode()
    return pem[start:], encrypted


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> ssl.SSLObject:
    """The server side of one in-memory handshake."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (c, s):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    return s


def test_inline_pem_and_an_encrypted_key_with_its_password(tmp_path: Path) -> None:
    from walgate.gateway.config import Config, ConfigError
    from walgate.gateway.principal_mapping import PrincipalMapper
    from walgate.gateway.tls import peer_principal, server_context

    certs = make_certs(tmp_path / "certs")
    chain, key = _encrypted(certs, b"s3cret-pw")
    encrypted_file = tmp_path / "encrypted.pem"
    encrypted_file.write_text(key + chain)
    client = ssl.create_default_context(cafile=str(certs.ca))
    client.load_cert_chain(certs.client)
    for config in (
        Config(data_dir=tmp_path, ssl_keystore_location=encrypted_file, ssl_key_password="s3cret-pw",
               ssl_truststore_certificates=certs.ca.read_text(), ssl_client_auth="required"),
        Config(data_dir=tmp_path, ssl_keystore_certificate_chain=chain, ssl_keystore_key=key,
               ssl_key_password="s3cret-pw", ssl_truststore_location=certs.ca, ssl_client_auth="requested",
               ssl_enabled_protocols=("TLSv1.2",)),
    ):
        server = _handshake(server_context(config, "test"), client)
        assert server.version() == ("TLSv1.2" if config.ssl_enabled_protocols == ("TLSv1.2",) else "TLSv1.3")
        assert server.getpeercert(binary_form=True) is not None
    with pytest.raises(ConfigError) as error:
        server_context(Config(data_dir=tmp_path, ssl_keystore_location=encrypted_file, ssl_key_password="wrong-pw"),
                       "listener SSL")
    assert "listener SSL: cannot load the certificate and private key" in str(error.value)
    assert "wrong-pw" not in str(error.value)
    with pytest.raises(ConfigError, match="cannot load the certificate"):
        server_context(Config(data_dir=tmp_path, ssl_keystore_location=tmp_path / "missing.pem"), "http")
    mapper = PrincipalMapper("RULE:^CN=([^,]*),OU=(.*?),.*$/$2:$1/")
    requested = server_context(Config(data_dir=tmp_path, ssl_keystore_location=certs.server,
                                      ssl_truststore_location=certs.ca, ssl_client_auth="requested"), "t")
    assert peer_principal(_handshake(requested, client), mapper) == "User:Testing:alice"
    anonymous = ssl.create_default_context(cafile=str(certs.ca))  # no client certificate
    assert peer_principal(_handshake(requested, anonymous), mapper) == "User:ANONYMOUS"


def test_a_failed_handshake_sends_its_alert_before_failing(tmp_path: Path) -> None:
    """The server's handshake without the required client certificate: the loop is first asked to flush (the
    alert reaches the client, which fails with "certificate required"), then the failure is raised."""
    from walgate.gateway.config import Config
    from walgate.gateway.tls import server_context

    certs = make_certs(tmp_path / "certs")
    required = server_context(Config(data_dir=tmp_path, ssl_keystore_location=certs.server,
                                     ssl_truststore_location=certs.ca, ssl_client_auth="required"), "t")
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = ssl.create_default_context(cafile=str(certs.ca)).wrap_bio(c_in, c_out, server_hostname="localhost")
    s = required.wrap_bio(s_in, s_out, server_side=True)
    failure = None
    for _ in range(10):
        try:
            c.do_handshake()
        except ssl.SSLWantReadError:
            pass
        try:
            s.do_handshake()
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as e:  # raised once the alert went out (the call after "want read")
            failure = e
            break
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    assert failure is not None and failure.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
        c.read()  # TLS 1.3: the client finished first and learns of the refusal from the alert


def test_a_certificate_that_cannot_be_loaded_stops_serve_before_anything_opens(tmp_path: Path) -> None:
    import subprocess

    from livewalgate import WALGATE, walgate_env

    result = subprocess.run(
        [*WALGATE, "serve", "--data-dir", str(tmp_path / "data"), "--override", "listeners=SSL://127.0.0.1:0",
         "--override", f"ssl.keystore.location={tmp_path / 'missing.pem'}"],
        capture_output=True, text=True, timeout=60, env=walgate_env(), stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr
    assert "listener SSL: cannot load the certificate and private key" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(("client_auth", "version"), [("required", "TLSv1.3"), ("requested", "TLSv1.2")])
def test_an_untrusted_client_certificate_gets_bad_certificate(tmp_path: Path, client_auth: str,
                                                              version: str) -> None:
    """A client certificate of a CA the truststore lacks: the client receives bad_certificate (42), where OpenSSL
    alone sends unknown_ca (48); a trusted one is still accepted."""
    from walgate.gateway.config import Config
    from walgate.gateway.tls import server_context

    certs = make_certs(tmp_path / "certs")
    server = server_context(Config(data_dir=tmp_path, ssl_keystore_location=certs.server,
                                   ssl_truststore_location=certs.ca, ssl_client_auth=client_auth,
                                   ssl_enabled_protocols=(version,)), "t")
    mallory = ssl.create_default_context(cafile=str(certs.ca))
    mallory.load_cert_chain(certs.untrusted_client)
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = mallory.wrap_bio(c_in, c_out, server_hostname="localhost")
    s = server.wrap_bio(s_in, s_out, server_side=True)
    refused: list[ssl.SSLError] = []
    for _ in range(10):
        with contextlib.suppress(ssl.SSLWantReadError, ssl.SSLError):
            s.do_handshake()
        try:
            c.do_handshake() if not c.version() else c.read()  # TLS 1.3: the alert follows the client's Finished
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as e:
            refused.append(e)
            break
        s_in.write(c_out.read())
        c_in.write(s_out.read())
    assert refused and refused[0].reason == "SSLV3_ALERT_BAD_CERTIFICATE", refused
    alice = ssl.create_default_context(cafile=str(certs.ca))
    alice.load_cert_chain(certs.client)
    assert _handshake(server, alice).getpeercert(binary_form=True) is not None
