"""A ``walgate serve`` with one SASL Kafka listener, for the SASL compat tests (test_security_sasl.py over
SASL_PLAINTEXT, test_security_sasl_ssl.py over SASL_SSL).

The node's one Kafka listener is ``<protocol>://127.0.0.1:PORT`` (``WALGATE_LISTENERS``), advertised as
``<protocol>://<host>:PORT``; root's password comes from ``WALGATE_ROOT_PASSWORD``; users are made with SQL over
HTTP Basic auth as root (:meth:`SaslNode.sql`). Over SASL_SSL the node's certificate is testcerts' server one (for
``localhost`` and ``127.0.0.1``) and clients trust ``ca``.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat_procs import Run

from livewalgate import WalgateServer, free_port, running_walgate, walgate_env

ROOT_PASSWORD = "compat-r00t"


@dataclass
class SaslNode:
    server: WalgateServer
    host: str = "127.0.0.1"
    ca: Path | None = None  # the CA clients trust: set for a SASL_SSL node

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.server.kafka_port}"

    @property
    def protocol(self) -> str:
        return "SASL_PLAINTEXT" if self.ca is None else "SASL_SSL"

    def librdkafka(self, mechanism: str = "SCRAM-SHA-512", user: str = "root",
                   password: str = ROOT_PASSWORD) -> dict[str, Any]:
        """librdkafka settings logging in to this node."""
        tls = {} if self.ca is None else {"ssl.ca.location": str(self.ca)}
        return {"bootstrap.servers": self.bootstrap, "security.protocol": self.protocol, "sasl.mechanism": mechanism,
                "sasl.username": user, "sasl.password": password, **tls}

    def sql(self, statement: str, user: str = "root", password: str = ROOT_PASSWORD) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.server.http_url}/rest/sql", data=statement.encode())
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())  # type: ignore[no-any-return]


@contextmanager
def serve(workdir: Path, protocol: str = "SASL_PLAINTEXT", host: str = "127.0.0.1", ca: Path | None = None,
          **settings: str) -> Iterator[SaslNode]:
    """The node (module docstring); ``settings`` are more ``WALGATE_<NAME>`` variables (e.g.
    ``ssl_keystore_location``)."""
    port = free_port()
    env = {**walgate_env(), "WALGATE_LISTENERS": f"{protocol}://127.0.0.1:{port}",
           "WALGATE_ADVERTISED_LISTENERS": f"{protocol}://{host}:{port}", "WALGATE_ROOT_PASSWORD": ROOT_PASSWORD,
           "WALGATE_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
           **{f"WALGATE_{k.upper()}": v for k, v in settings.items()}}
    with running_walgate(workdir, env=env, kafka_port=port) as server:
        yield SaslNode(server, host, ca)


def create_topic(node: SaslNode, name: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(node.librdkafka())
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=30)


def check_clean_log(node: SaslNode, *passwords: str) -> None:
    """No traceback and none of ``passwords`` (nor root's) in the node's log."""
    log = node.server.log()
    assert "Traceback" not in log
    for password in [ROOT_PASSWORD, *passwords]:
        assert password not in log


def events(run: Run) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
