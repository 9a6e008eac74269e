"""How a node reaches its cluster's etcd: the :class:`~walgate.cluster.etcd.EtcdAccess` of a :class:`Config`'s
``cluster_etcd_*`` settings, its files read and checked at start-up (the combinations are :class:`Config`'s)."""

from __future__ import annotations

import ssl
from pathlib import Path

from walgate.cluster.etcd import EtcdAccess
from walgate.cluster.model import uses_tls
from walgate.gateway.config import Config, ConfigError

__all__ = ["etcd_access"]


def _read(setting: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{setting} {path}: cannot read it ({e.strerror or e})") from None


def _check_pem(cafile: Path | None, certfile: Path | None, keyfile: Path | None) -> None:
    """The CA file holds certificates and the client certificate goes with its unencrypted key, as OpenSSL reads
    them (raises :class:`ConfigError`): a bad file is named at start-up, not as a failed TLS handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if cafile is not None:
        try:
            context.load_verify_locations(cafile=cafile)
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(f"cluster_etcd_ssl_cafile {cafile}: not PEM CA certificates ({e})") from None
    if certfile is not None and keyfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile, password=lambda: b"")
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(f"cluster_etcd_ssl_certfile {certfile} and cluster_etcd_ssl_keyfile {keyfile}: not a "
                              f"PEM certificate and its unencrypted private key ({e})") from None


def etcd_access(config: Config) -> EtcdAccess:
    """The access of ``config`` (cluster mode: ``cluster_etcd_endpoints`` set) to its etcd; raises
    :class:`ConfigError` naming a file that cannot be read or is not what its setting says."""
    assert config.cluster_etcd_endpoints is not None
    files = {setting: path for setting in ("cluster_etcd_ssl_cafile", "cluster_etcd_ssl_certfile",
                                           "cluster_etcd_ssl_keyfile")
             if (path := getattr(config, setting)) is not None}
    pems = {setting: _read(setting, path) for setting, path in files.items()}
    _check_pem(config.cluster_etcd_ssl_cafile, config.cluster_etcd_ssl_certfile, config.cluster_etcd_ssl_keyfile)
    password = config.cluster_etcd_password
    if config.cluster_etcd_password_file is not None:
        text = _read("cluster_etcd_password_file", config.cluster_etcd_password_file)
        password = text.decode("utf-8", "replace").rstrip("\r\n")
    return EtcdAccess(tls=uses_tls(config.cluster_etcd_endpoints), ca=pems.get("cluster_etcd_ssl_cafile"),
                      cert_chain=pems.get("cluster_etcd_ssl_certfile"), key=pems.get("cluster_etcd_ssl_keyfile"),
                      user=config.cluster_etcd_user, password=password)
