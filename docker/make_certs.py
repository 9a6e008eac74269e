"""Make the certificates of docker/compose.cluster.yaml: one CA and a certificate for each host named.

    python make_certs.py --dir /certs [--owner UID:GID] etcd1 etcd2 etcd3 walgate1 walgate2 walgate3

In ``--dir``: ``ca.crt`` (the CA clients and every process trust) and, for each HOST, ``HOST.crt`` and ``HOST.key``
(its certificate and unencrypted private key, PEM, as etcd reads them) and ``HOST.pem`` (the key and certificate in
one file, as walgate's ``ssl.keystore.location`` reads them). Each certificate names HOST (a DNS name, or an IP
address when HOST is one), ``localhost`` and ``127.0.0.1`` (a container's healthcheck connects there), and serves
both as a server's and as a client's (etcd's peers and clients present them with ``--client-cert-auth``). Run again,
it keeps what is there: the CA and the certificates of hosts made before are never replaced, a new host's is
signed by the same CA. Keys are written mode 0600, the hosts' chowned to ``--owner`` when run as root (the image's
``walgate`` user, 10001:10001, reads them; etcd's container runs as root); the CA's key stays root's. Needs only the ``cryptography`` package (walgate's
own dependency, so the project's image has it).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 3650


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Make a CA and a certificate per host (docker/compose.cluster.yaml)")
    p.add_argument("--dir", type=Path, required=True, help="where the files are written (made when missing)")
    p.add_argument("--owner", help="UID:GID the files are chowned to when run as root")
    p.add_argument("hosts", nargs="+", help="one certificate each: a DNS name or an IP address")
    return p


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, data: bytes, secret: bool, owner: tuple[int, int] | None) -> None:
    """``data`` in ``path``, whole (a temporary file renamed), mode 0600 when ``secret``."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if owner is not None:
        os.chown(tmp, *owner)
    os.replace(tmp, path)


def _dated(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    """``builder`` valid from 5 minutes ago (clocks a little behind) for :data:`VALID_DAYS`."""
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(VALID_DAYS))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _ca(directory: Path, owner: tuple[int, int] | None) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA in ``directory``, made when it has none."""
    crt, key_file = directory / "ca.crt", directory / "ca.key"
    if crt.exists() and key_file.exists():
        key = serialization.load_pem_private_key(key_file.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), f"{key_file} is not an EC key"
        return x509.load_pem_x509_certificate(crt.read_bytes()), key
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_dated(x509.CertificateBuilder()).subject_name(_name("walgate compose CA"))
            .issuer_name(_name("walgate compose CA"))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    _write(key_file, _key_pem(key), True, None)  # root's alone: the containers that read the volume sign nothing
    _write(crt, cert.public_bytes(serialization.Encoding.PEM), False, owner)
    return cert, key


def _host(directory: Path, host: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
          owner: tuple[int, int] | None) -> None:
    """``host``'s certificate and key, made when it has none."""
    if all((directory / f"{host}.{ext}").exists() for ext in ("crt", "key", "pem")):
        return
    try:
        names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(host))]
    except ValueError:
        names = [x509.DNSName(host)]
    names += [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_dated(x509.CertificateBuilder()).subject_name(_name(host)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .add_extension(x509.SubjectAlternativeName(list(dict.fromkeys(names))), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_pem, key_pem = cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)
    _write(directory / f"{host}.key", key_pem, True, owner)
    _write(directory / f"{host}.crt", cert_pem, False, owner)
    _write(directory / f"{host}.pem", key_pem + cert_pem, True, owner)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    owner = None
    if args.owner and os.geteuid() == 0:
        uid, gid = args.owner.split(":")
        owner = int(uid), int(gid)
    args.dir.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca(args.dir, owner)
    for host in args.hosts:
        _host(args.dir, host, ca, ca_key, owner)
    print(f"certificates of {', '.join(args.hosts)} in {args.dir} (CA: {args.dir / 'ca.crt'})", flush=True)


if __name__ == "__main__":
    main()
