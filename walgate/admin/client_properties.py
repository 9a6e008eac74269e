"""The client settings of ``--command-config FILE`` and ``-X KEY=VALUE``, as the confluent-kafka (librdkafka)
clients the admin commands build take them.

The file is a Java properties file (Kafka tools' ``--command-config``, read with
:func:`walgate.gateway.properties.parse_properties`); ``-X`` settings (kcat's flag) come after it and win. Names
are librdkafka's (``security.protocol``, ``ssl.ca.location``, ``sasl.mechanism``, ``sasl.username``, ...) and
reach the client unchanged, so librdkafka itself refuses an unknown name or a bad value. The Java client's names
that have one librdkafka meaning are translated, so a Kafka tools config file works as it is:

- ``ssl.truststore.location`` (with ``ssl.truststore.type=PEM``) → ``ssl.ca.location``;
  ``ssl.truststore.certificates`` → ``ssl.ca.pem``;
- ``ssl.keystore.location`` with ``ssl.keystore.type=PEM`` (private key and certificate chain in one file) →
  ``ssl.key.location`` and ``ssl.certificate.location``; with ``PKCS12`` it is librdkafka's own
  ``ssl.keystore.location``; ``ssl.keystore.key`` → ``ssl.key.pem``, ``ssl.keystore.certificate.chain`` →
  ``ssl.certificate.pem``;
- ``ssl.endpoint.identification.algorithm=`` (empty: no host name check) → ``none``;
- ``sasl.jaas.config`` with ``PlainLoginModule`` or ``ScramLoginModule`` → ``sasl.username`` and
  ``sasl.password``.

Java settings librdkafka cannot honour (JKS stores, ``ssl.truststore.password``, ``ssl.enabled.protocols``, other
login modules, ...) are refused with the setting's name. No message ever contains a value: the file holds
passwords. Pure: the file's text in, a dict out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from walgate.gateway.properties import PropertiesError, parse_properties

__all__ = ["ClientPropertiesError", "client_properties"]

_RENAMED = {
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.key": "ssl.key.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
}

_UNMAPPED = {  # Java client settings without a librdkafka equivalent
    "ssl.truststore.password": "a PEM truststore has no password",
    "ssl.enabled.protocols": "librdkafka uses OpenSSL's TLS versions (ssl.min.version is not settable either)",
    "ssl.protocol": "librdkafka uses OpenSSL's TLS versions",
    "ssl.keymanager.algorithm": "a JSSE setting",
    "ssl.trustmanager.algorithm": "a JSSE setting",
    "ssl.secure.random.implementation": "a JSSE setting",
    "ssl.engine.factory.class": "a Java class",
    "sasl.login.callback.handler.class": "a Java class",
    "sasl.client.callback.handler.class": "a Java class",
    "sasl.login.class": "a Java class",
}

_PASSWORD_MODULES = (
    "org.apache.kafka.common.security.plain.PlainLoginModule",
    "org.apache.kafka.common.security.scram.ScramLoginModule",
)
_JAAS_OPTION = re.compile(r'([\w.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)')


class ClientPropertiesError(ValueError):
    """A setting that cannot be given to librdkafka; the message names the setting, never its value."""


def client_properties(file_text: str | None, overrides: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The librdkafka settings of a ``--command-config`` file's text (None: no file) and the ``-X`` pairs after
    it, Java names translated (see the module docstring)."""
    settings: dict[str, str] = {}
    if file_text is not None:
        try:
            settings = parse_properties(file_text)
        except PropertiesError as e:
            raise ClientPropertiesError(str(e)) from None
    settings.update(overrides)
    return _translate(settings)


def _translate(java: dict[str, str]) -> dict[str, str]:
    settings = dict(java)
    for name, reason in _UNMAPPED.items():
        if name in settings:
            raise ClientPropertiesError(f"{name} cannot be used: {reason}")
    out: dict[str, str] = {}
    truststore_type = settings.pop("ssl.truststore.type", "PEM" if "ssl.truststore.certificates" in settings else "JKS")
    if "ssl.truststore.location" in settings:
        if truststore_type.upper() != "PEM":
            raise ClientPropertiesError(
                f"ssl.truststore.type {truststore_type} cannot be read: set ssl.truststore.type=PEM with a PEM file "
                "of CA certificates (or use ssl.ca.location)")
        out["ssl.ca.location"] = settings.pop("ssl.truststore.location")
    keystore_type = settings.pop("ssl.keystore.type", None)
    if keystore_type is not None and "ssl.keystore.location" in settings:
        if keystore_type.upper() == "PEM":
            location = settings.pop("ssl.keystore.location")
            out["ssl.key.location"] = out["ssl.certificate.location"] = location
        elif keystore_type.upper() != "PKCS12":
            raise ClientPropertiesError(
                f"ssl.keystore.type {keystore_type} cannot be read: use PEM (key and certificate chain in one file) "
                "or PKCS12")
    for java_name, name in _RENAMED.items():
        if java_name in settings:
            out[name] = settings.pop(java_name)
    if settings.get("ssl.endpoint.identification.algorithm") == "":
        settings["ssl.endpoint.identification.algorithm"] = "none"
    if "sasl.jaas.config" in settings:
        out |= _jaas(settings.pop("sasl.jaas.config"))
    for name, value in out.items():
        if name in settings:
            raise ClientPropertiesError(f"{name} is given twice (once under its Java client name)")
        settings[name] = value
    return settings


def _jaas(text: str) -> dict[str, str]:
    """``sasl.username``/``sasl.password`` of a PLAIN or SCRAM ``sasl.jaas.config``."""
    module = text.split(None, 1)[0] if text.strip() else ""
    if module not in _PASSWORD_MODULES:
        raise ClientPropertiesError(
            "sasl.jaas.config: only PlainLoginModule and ScramLoginModule map to librdkafka (sasl.username, "
            "sasl.password); for OAUTHBEARER use librdkafka's sasl.oauthbearer.* settings")
    options = {key: _unquote(value) for key, value in _JAAS_OPTION.findall(text)}
    if "username" not in options or "password" not in options:
        raise ClientPropertiesError("sasl.jaas.config: username=\"...\" and password=\"...\" are both needed")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def _unquote(value: str) -> str:
    if value.startswith('"'):
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value
