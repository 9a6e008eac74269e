"""TLS with real clients: one ``walgate serve`` configured by a Kafka server.properties with three listeners —
PLAINTEXT, SSL (server certificate only; ``ssl.client.auth=requested``) and MTLS (an SSL listener with
``listener.name.mtls.ssl.client.auth=required``) — and trustme's CA, server and client certificates (PEM).

confluent-kafka (librdkafka: ``ssl.ca.location``, ``ssl.certificate.location`` / ``ssl.key.location``), Java
kafka-clients 4.3 and 3.9 (``ssl.truststore.type=PEM``, ``ssl.keystore.type=PEM``) and kcat each connect, are told the
listener's own address, produce and read back; a client certificate becomes the principal ``User:alice``
(``ssl.principal.mapping.rules``); a client that does not trust the server's CA, and a client without a
certificate on the MTLS listener, fail with the client's own SSL error; a client certificate of a CA the server does
not trust is refused with the TLS alert bad_certificate (42), as librdkafka's 0097_ssl_verify expects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from compat_procs import Run, wait_accepting

from livewalgate import free_port, running_walgate
from testcerts import Certs, make_certs


@dataclass
class Secure:
    certs: Certs
    plain: str
    ssl: str
    mtls: str
    log: Callable[[], str]
    work: Path


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    work = tmp_path_factory.mktemp("secure")
    certs = make_certs(work / "certs")
    plain, ssl_port, mtls = free_port(), free_port(), free_port()
    config = work / "server.properties"
    config.write_text(
        f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{ssl_port},MTLS://127.0.0.1:{mtls}\n"
        f"advertised.listeners=SSL://localhost:{ssl_port},MTLS://localhost:{mtls}\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={certs.server}\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
        "ssl.client.auth=requested\nlistener.name.mtls.ssl.client.auth=required\n"
        "ssl.principal.mapping.rules=RULE:^CN=([^,]*),.*$/$1/L,DEFAULT\n"
    )
    with running_walgate(work / "walgate", "--config", str(config)) as server:
        for port in (plain, ssl_port, mtls):
            assert wait_accepting(port, 10, server.proc), server.log()
        yield Secure(certs, f"127.0.0.1:{plain}", f"localhost:{ssl_port}", f"localhost:{mtls}", server.log, work)


def _events(run: Run, name: str) -> list[dict]:
    return [d for d in run.json_lines() if d.get("event") == name]


# ------------------------------------------------------------------------------------- confluent-kafka


def _ck_conf(secure: Secure, *, cert: bool = False, ca: Path | None = None) -> list[str]:
    conf = ["security.protocol=SSL", f"ssl.ca.location={ca or secure.certs.ca}"]
    if cert:
        conf += [f"ssl.certificate.location={secure.certs.client_cert}", f"ssl.key.location={secure.certs.client_key}"]
    return [arg for kv in conf for arg in ("-X", kv)]


def test_confluent_kafka_over_ssl(secure: Secure, pyclient, show) -> None:
    run = pyclient("ck_secure.py", secure.ssl, "ck_ssl", "30", "--size", "30000", *_ck_conf(secure), timeout=60)
    show(run)
    assert _events(run, "brokers") == [{"event": "brokers", "brokers": [secure.ssl]}], run.describe()
    assert _events(run, "consumed") == [{"event": "consumed", "count": 30, "values_ok": True}], run.describe()


def test_confluent_kafka_mtls_is_user_alice(secure: Secure, pyclient, show) -> None:
    run = pyclient("ck_secure.py", secure.mtls, "ck_mtls", "5", *_ck_conf(secure, cert=True),
                   "-X", "client.id=ck-mtls", timeout=60)
    show(run)
    assert _events(run, "consumed") == [{"event": "consumed", "count": 5, "values_ok": True}], run.describe()
    assert "client id 'ck-mtls', principal User:alice" in secure.log()


def test_confluent_kafka_rejects_an_untrusted_server_certificate(secure: Secure, pyclient, show) -> None:
    run = pyclient("ck_secure.py", secure.ssl, "ck_ssl", "1", "--timeout", "6",
                   *_ck_conf(secure, ca=secure.certs.other_ca), timeout=60, check=False)
    show(run)
    assert run.returncode == 2, run.describe()
    assert _events(run, "error") and not _events(run, "brokers"), run.describe()
    assert "SSL handshake failed" in run.stderr and "certificate verify failed" in run.stderr, run.describe()


def test_confluent_kafka_without_a_certificate_fails_where_one_is_required(secure: Secure, pyclient, show) -> None:
    run = pyclient("ck_secure.py", secure.mtls, "ck_mtls", "1", "--timeout", "6", *_ck_conf(secure),
                   timeout=60, check=False)
    show(run)
    assert run.returncode == 2, run.describe()
    assert _events(run, "error") and not _events(run, "brokers"), run.describe()
    assert "alert certificate required" in run.stderr, run.describe()  # the TLS alert reached the client


def test_confluent_kafka_with_an_untrusted_certificate_gets_alert_42(secure: Secure, pyclient, show) -> None:
    """librdkafka sends its certificate (walgate names no CAs in its request, so librdkafka's issuer check lets it
    through) and is refused with bad_certificate: the "SSL alert number 42" librdkafka's 0097_ssl_verify looks for
    (main: 48, unknown_ca)."""
    mallory = secure.work / "mallory"
    mallory.mkdir(exist_ok=True)
    pem = secure.certs.untrusted_client.read_text()
    start = pem.index("-----BEGIN CERTIFICATE-----")
    (mallory / "key.pem").write_text(pem[:start])
    (mallory / "cert.pem").write_text(pem[start:])
    run = pyclient("ck_secure.py", secure.mtls, "ck_mtls", "1", "--timeout", "6", *_ck_conf(secure),
                   "-X", f"ssl.certificate.location={mallory / 'cert.pem'}", "-X",
                   f"ssl.key.location={mallory / 'key.pem'}", timeout=60, check=False)
    show(run)
    assert run.returncode == 2, run.describe()
    assert _events(run, "error") and not _events(run, "brokers"), run.describe()
    assert "SSL alert number 42" in run.stderr, run.describe()


# ------------------------------------------------------------------------------------------- Java 4.3


def _java_conf(secure: Secure, name: str, *, keystore: Path | None = None, ca: Path | None = None) -> str:
    path = secure.work / f"{name}.properties"
    lines = ["security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={ca or secure.certs.ca}",
             f"client.id={name}"]
    if keystore:
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("clients", ["4.3.0", "3.9"])
def test_java_over_ssl_with_a_pem_truststore(secure: Secure, java, show, clients: str) -> None:
    run = java("SecureRoundTrip.java", secure.ssl, f"java_ssl_{clients}", "20", _java_conf(secure, "java-ssl"),
               clients=clients)
    show(run)
    assert _events(run, "cluster") == [{"event": "cluster", "nodes": [secure.ssl]}], run.describe()
    assert _events(run, "consumed") == [{"event": "consumed", "count": 20, "values_ok": True}], run.describe()


@pytest.mark.parametrize("clients", ["4.3.0", "3.9"])
def test_java_mtls_with_a_pem_keystore_is_user_alice(secure: Secure, java, show, clients: str) -> None:
    name = f"java-mtls-{clients}"
    run = java("SecureRoundTrip.java", secure.mtls, f"java_mtls_{clients}", "5",
               _java_conf(secure, name, keystore=secure.certs.client), clients=clients)
    show(run)
    assert _events(run, "consumed") == [{"event": "consumed", "count": 5, "values_ok": True}], run.describe()
    assert f"client id '{name}', principal User:alice" in secure.log()


@pytest.mark.parametrize("case", ["untrusted", "no-certificate"])
def test_java_fails_with_an_ssl_authentication_exception(secure: Secure, java, show, case: str) -> None:
    if case == "untrusted":
        bootstrap, conf = secure.ssl, _java_conf(secure, "java-untrusted", ca=secure.certs.other_ca)
    else:
        bootstrap, conf = secure.mtls, _java_conf(secure, "java-nocert")
    run = java("SecureRoundTrip.java", bootstrap, "java_refused", "1", conf, check=False)
    show(run)
    assert run.returncode == 2, run.describe()
    [error] = _events(run, "error")
    assert error["name"] == "SslAuthenticationException", run.describe()


@pytest.mark.parametrize("listener", ["mtls", "ssl"])
def test_java_with_an_untrusted_certificate_gets_bad_certificate(secure: Secure, java, show, listener: str) -> None:
    """A client certificate the truststore does not vouch for is refused with the TLS alert bad_certificate (42),
    where OpenSSL would send unknown_ca (48): on the MTLS listener (required) and the SSL one (requested: a
    certificate sent must still be valid)."""
    conf = _java_conf(secure, f"java-mallory-{listener}", keystore=secure.certs.untrusted_client)
    run = java("SecureRoundTrip.java", getattr(secure, listener), "java_refused", "1", conf, check=False)
    show(run)
    assert run.returncode == 2, run.describe()
    [error] = _events(run, "error")
    assert error["name"] == "SslAuthenticationException", run.describe()
    assert error["root"].endswith("Received fatal alert: bad_certificate"), run.describe()  # main: unknown_ca
    assert "client certificate refused (bad_certificate): unable to get local issuer certificate" in secure.log()
    assert "Traceback" not in secure.log()


# ----------------------------------------------------------------------------------------------- kcat


def test_kcat_over_ssl_and_mtls(secure: Secure, kcat, pyclient, show) -> None:
    tls = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={secure.certs.ca}"]
    run = kcat("-L", "-J", "-b", secure.ssl, *tls)
    show(run)
    assert '"name":"' + secure.ssl + '"' in run.stdout.replace(" ", ""), run.describe()
    pyclient("ck_secure.py", secure.plain, "kcat_ssl", "0")  # creates the topic
    lines = secure.work / "kcat-lines.txt"
    lines.write_text("one\ntwo\nthree\n")
    kcat("-P", "-l", "-b", secure.ssl, "-t", "kcat_ssl", "-p", "0", *tls, str(lines))
    mtls = [*tls, "-X", f"ssl.certificate.location={secure.certs.client_cert}",
            "-X", f"ssl.key.location={secure.certs.client_key}", "-X", "client.id=kcat-mtls"]
    run = kcat("-C", "-e", "-b", secure.mtls, "-t", "kcat_ssl", "-o", "beginning", "-f", "%s\n", *mtls)
    show(run)
    assert run.stdout.split() == ["one", "two", "three"], run.describe()
    assert "client id 'kcat-mtls', principal User:alice" in secure.log()
