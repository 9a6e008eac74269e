"""confluent-kafka (librdkafka) cannot tell an unknown user from a known one by how long a failed login takes, over
SCRAM-SHA-512 or PLAIN.

The node's users, root and alice, both have one credential, SCRAM-SHA-512 with 16384 iterations (set through the
Admin's alterUserScramCredentials, KIP-554). Each case times pairs of failed logins (a wrong password), alice's and
an unknown name's, in alternating order, each from a new Producer to its ``_AUTHENTICATION`` error, and counts the
pairs where alice's took longer. A server whose two paths do different work shows it in nearly every pair: an
unknown name answered with ``i=4096`` saves the client three quarters of its PBKDF2, and a PLAIN check of an
unknown name that runs a 4096-iteration SHA-256 PBKDF2 instead of the user's 16384-iteration SHA-512 one saves the
server ~5 ms. With the same work on both paths the pairs are coin flips: the count stays within [8, 32] of 40
except with probability 4e-5 (two-sided sign test), however loaded the machine, since load slows both alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from sasl_node import ROOT_PASSWORD, SaslNode, check_clean_log, serve

ALICE_PASSWORD = "wonder-land"
PAIRS = 40
SLOWER = range(8, 33)  # how many of the pairs alice's login may take longer in: a fair coin's, at 1 - 4e-5
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslNode]:
    with serve(tmp_path_factory.mktemp("walgate-enumeration")) as node:
        admin = AdminClient(node.librdkafka())
        sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 16384)
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", sha512, ALICE_PASSWORD.encode()),
            UserScramCredentialUpsertion("root", sha512, ROOT_PASSWORD.encode()),
            UserScramCredentialDeletion("root", ScramMechanism.SCRAM_SHA_256)])
        for future in futures.values():
            future.result(timeout=TIMEOUT)
        yield node
        check_clean_log(node, ALICE_PASSWORD, "not-the-password")


def failed_login(node: SaslNode, mechanism: str, user: str) -> float:
    """Seconds from a new Producer to its authentication error (the password is wrong)."""
    errors: list[KafkaError] = []
    settings = {**node.librdkafka(mechanism, user, "not-the-password"), "error_cb": errors.append,
                "reconnect.backoff.ms": 10_000, "reconnect.backoff.max.ms": 10_000}
    start = time.perf_counter()
    producer = Producer(settings)
    while not errors and time.perf_counter() - start < TIMEOUT:
        producer.poll(0.05)  # returns as soon as the error is there
    took = time.perf_counter() - start
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "Invalid username or password" in errors[0].str()
    return took


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_a_failed_login_takes_as_long_for_an_unknown_user(node: SaslNode, mechanism: str) -> None:
    known: list[float] = []
    unknown: list[float] = []
    for i in range(PAIRS):
        for user in (["alice", f"nobody-{i}"] if i % 2 else [f"nobody-{i}", "alice"]):
            (known if user == "alice" else unknown).append(failed_login(node, mechanism, user))
    slower = sum(k > u for k, u in zip(known, unknown, strict=True))
    medians = (f"medians: alice {statistics.median(known) * 1000:.1f} ms, "
               f"unknown {statistics.median(unknown) * 1000:.1f} ms")
    assert slower in SLOWER, f"alice's failed login took longer in {slower} of {PAIRS} pairs ({medians})"
