"""ACLs with real clients (issue 16): Java kafka-clients 4.3 Admin creates, lists and deletes ACLs; confluent-kafka
(librdkafka) meets each denial as Kafka's error.

The clients do not authenticate (SASL is not on this listener), so their principal is User:ANONYMOUS, as on a
Kafka PLAINTEXT listener with an authorizer: a first walgate makes ANONYMOUS a super user (``super.users``) to set
ACLs up; the same data directory then restarts without it, and ANONYMOUS gets what its ACLs allow.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import setup_clients
from compat_brokers import serving_walgate
from compat_procs import run

AUTHORIZER = ("--authorizer-class-name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
SUPER = ("--super-users", "User:ANONYMOUS")
JAVA = Path(__file__).parent / "java"


def events(stdout: str, key: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            out[d.get(key) if key != "event" or d[key] != "produced" else f"produced-{d['topic']}"] = d
    return out


@pytest.fixture(scope="module")
def java43() -> list[str]:
    """The java command line running AclsAdmin on kafka-clients 4.3 (only that jar set is set up, not the whole
    matrix)."""
    binary = shutil.which("java")
    if binary is None:
        pytest.skip("java is not installed")
    failed = setup_clients.setup("kafka-clients-4.3.0")
    if failed:
        pytest.skip(failed)
    return [binary, "-Xmx512m", f"-Dlog4j2.configurationFile={JAVA / 'log4j2.properties'}",
            *setup_clients.java_program("kafka-clients-4.3.0", JAVA / "AclsAdmin.java")]


def test_java_admin_creates_lists_and_deletes_acls(tmp_path: Path, java43: list[str]):
    with serving_walgate(tmp_path, *AUTHORIZER, *SUPER) as walgate:
        got = run([*java43, walgate.bootstrap], 120, check=False)
    steps = events(got.stdout, "step")
    assert "error" not in steps, got.describe()
    assert steps["listed"]["acls"] == steps["created"]["acls"], got.describe()
    assert steps["matching_orders"]["acls"] == sorted([  # MATCH: the literal name and the wildcard
        ["TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"],
        ["TOPIC", "orders", "LITERAL", "User:bob", "*", "ALL", "DENY"],
        ["TOPIC", "*", "LITERAL", "User:*", "*", "DESCRIBE", "ALLOW"]])
    assert [a[3] for a in steps["of_alice"]["acls"]] == ["User:alice"] * 3
    assert steps["deleted"]["acls"] == steps["of_alice"]["acls"]
    assert sorted(steps["after_delete"]["acls"] + steps["deleted"]["acls"]) == steps["created"]["acls"]
    assert steps["bad_refused"]["class"] == "InvalidRequestException"


def test_confluent_kafka_meets_kafkas_authorization_errors(tmp_path: Path, pyclient):
    with serving_walgate(tmp_path, *AUTHORIZER, *SUPER) as walgate:
        setup = pyclient("ck_acls.py", walgate.bootstrap, "setup", timeout=60, check=False)
    assert events(setup.stdout, "event")["acls"]["acls"] == [
        ["GROUP", "readers", "READ", "ALLOW"], ["TOPIC", "open", "READ", "ALLOW"], ["TOPIC", "open", "WRITE", "ALLOW"]
    ], setup.describe()
    with serving_walgate(tmp_path, *AUTHORIZER) as walgate:  # the same data: ANONYMOUS is no super user now
        denied = pyclient("ck_acls.py", walgate.bootstrap, "denied", timeout=120, check=False)
    got = events(denied.stdout, "event")
    assert "error" not in got, denied.describe()
    assert got["produced-open"]["error"] == "NONE", denied.describe()
    assert got["produced-secret"]["error"] == "TOPIC_AUTHORIZATION_FAILED", denied.describe()
    assert got["listed"]["topics"] == ["open"], denied.describe()  # secret is hidden
    assert got["created"]["error"] == "TOPIC_AUTHORIZATION_FAILED", denied.describe()
    assert got["consumed"]["error"] == "GROUP_AUTHORIZATION_FAILED", denied.describe()
