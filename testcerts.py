"""Test TLS material for tests/ and compat-tests/ alike: a trustme CA and the PEM files each client kind reads.

:func:`make_certs` writes into a directory and returns a :class:`Certs` naming the files:

- ``ca`` (the CA certificate: a truststore for clients and for the server's client-certificate checks) and
  ``other_ca`` (an unrelated CA: a client trusting only it must reject the server);
- ``server`` (private key, PKCS#8, and certificate chain in one file: ``ssl.keystore.location``) for
  ``localhost`` and ``127.0.0.1``;
- ``client`` (key and chain in one file, PKCS#8: Java's ``ssl.keystore.type=PEM``) and ``client_cert`` /
  ``client_key`` apart (librdkafka's ``ssl.certificate.location`` / ``ssl.key.location``) for the subject
  ``CN=<client_cn>,OU=Testing,O=walgate tests``;
- ``untrusted_client`` (key and chain in one file, PKCS#8) for ``CN=mallory``, issued by ``other_ca``: a client
  certificate the server must refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization


@dataclass(frozen=True)
class Certs:
    ca: Path
    other_ca: Path
    server: Path
    client: Path
    client_cert: Path
    client_key: Path
    untrusted_client: Path
    client_dn: str  # the client certificate's subject, RFC 4514


def _pkcs8(key_pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(key_pem, password=None)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_certs(directory: Path, client_cn: str = "alice") -> Certs:
    """A fresh CA, server and client certificate under ``directory`` (see the module docstring)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="walgate tests")
    server = ca.issue_cert("localhost", "127.0.0.1")
    client = ca.issue_cert(f"{client_cn}@clients.example", common_name=client_cn,
                           organization_name="walgate tests", organization_unit_name="Testing")
    paths = {name: directory / f"{name}.pem" for name in ("ca", "other_ca", "server", "client", "client_cert",
                                                           "client_key", "untrusted_client")}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other_ca = trustme.CA()
    other_ca.cert_pem.write_to_path(str(paths["other_ca"]))
    chain = b"".join(blob.bytes() for blob in server.cert_chain_pems)
    paths["server"].write_bytes(_pkcs8(server.private_key_pem.bytes()) + chain)
    client_key = _pkcs8(client.private_key_pem.bytes())
    client_chain = b"".join(blob.bytes() for blob in client.cert_chain_pems)
    paths["client"].write_bytes(client_key + client_chain)
    paths["client_cert"].write_bytes(client_chain)
    paths["client_key"].write_bytes(client_key)
    mallory = other_ca.issue_cert("mallory@clients.example", common_name="mallory")
    paths["untrusted_client"].write_bytes(_pkcs8(mallory.private_key_pem.bytes())
                                          + b"".join(blob.bytes() for blob in mallory.cert_chain_pems))
    for path in paths.values():
        path.chmod(0o600)
    return Certs(**paths, client_dn=f"CN={client_cn},OU=Testing,O=walgate tests")
