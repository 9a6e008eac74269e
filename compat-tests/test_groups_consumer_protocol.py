"""The TDengine seed's consumer-group table with real clients, on both group protocols (issue 4).

walgate only (Tansu's coordinator hangs, and it has no ConsumerGroupHeartbeat). A 4-vgroup topic consumed
by 1, 2, 3 and 5 members of one group: 4 partitions, 2+2, 2+1+1, and one idle member of 5; the union of
what the members read is every record exactly once when no one crashes.

* classic protocol: confluent-kafka, kafka-python and Java kafka-clients 4.3 (their default range
  assignors give the even split);
* KIP-848 consumer protocol (``group.protocol=consumer``, the server assigns: the TDengine mnode model):
  confluent-kafka (librdkafka 2.x) and Java kafka-clients 4.3; plus what the admin tools see of such a
  group (ConsumerGroupDescribe through Admin, SHOW CONSUMERS) and a member leaving / being killed.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import compat_data as data
import pytest
from compat_brokers import serving_walgate
from compat_data import check_exactly, records
from test_groups import (  # noqa: F401 (broker: the walgate-only fixture)
    CLIENTS,
    TOPIC,
    broker,
    by_offset,
    close,
    consumer_groups,
    describe_rows,
    ends,
    group_name,
    jlines,
    owned,
    wait_until,
)

SESSION_MS = 8000  # group.consumer.session.timeout.ms of this module's walgate (45 s by default)
# classic members started together join one generation within group.initial.rebalance.delay.ms (the default here,
# not the compat brokers' 0): no member reads before the split, so every record is read exactly once
INITIAL_DELAY_MS = 2000


@pytest.fixture(scope="module")
def walgate(tmp_path_factory):
    with serving_walgate(tmp_path_factory.mktemp("walgate"), "--group-consumer-session-timeout-ms", str(SESSION_MS),
                         "--group-consumer-heartbeat-interval-ms", "1000",
                         "--group-initial-rebalance-delay-ms", str(INITIAL_DELAY_MS)) as server:
        yield server


SPLITS = [(1, [4]), (2, [2, 2]), (3, [1, 1, 2]), (5, [0, 1, 1, 1, 1])]
MEMBERS = [("ck", "classic"), ("kp", "classic"), ("java", "classic"), ("ck", "consumer"), ("java", "consumer")]


@pytest.fixture
def start_member(background, java_argv, power):
    """start_member(client, protocol, group) -> a running group member printing records and assignments."""

    def start(client: str, protocol: str, group: str):
        if client == "java":
            argv = java_argv("GroupMember.java", power.bootstrap, TOPIC, group, "--protocol", protocol, "--timeout", "120")
        else:
            script = {"ck": "ck_group.py", "kp": "kp_group.py"}[client]
            extra = ("--protocol", protocol) if protocol == "consumer" else ()
            argv = [sys.executable, str(CLIENTS / script), power.bootstrap, TOPIC, group, "--timeout", "120", *extra]
        return background(argv)

    return start


def split_of(bgs) -> list[int]:
    return sorted(len(owned(b) or []) for b in bgs)


def read_all(bgs):
    return by_offset([r for b in bgs for r in records(jlines(b))])


@pytest.mark.parametrize("client, protocol", MEMBERS, ids=[f"{c}-{p}" for c, p in MEMBERS])
@pytest.mark.parametrize("n, want_split", SPLITS, ids=[f"{n}members" for n, _ in SPLITS])
def test_members_split_partitions_evenly_and_read_everything_once(power, start_member, client, protocol, n, want_split):
    want = power.expected[TOPIC]
    group = group_name(f"{client}-{protocol}-{n}")
    bgs = [start_member(client, protocol, group) for _ in range(n)]

    def done() -> bool:
        parts = [p for b in bgs for p in (owned(b) or [])]
        return (split_of(bgs) == want_split and sorted(parts) == list(range(data.VGROUPS))
                and len(read_all(bgs)) >= len(want))

    wait_until(done, 90, f"{n} members splitting 4 partitions as {want_split} and reading every record", *bgs)
    time.sleep(1.0)  # a duplicate delivered late would show up now
    check_exactly(read_all(bgs), want, first_offsets={p: 0 for p in range(data.VGROUPS)})
    for b in bgs:
        close(b)


MIXED = [
    ("ck", "classic", "ck", "consumer"),  # a consumer-protocol member upgrades a live classic group
    ("ck", "consumer", "ck", "classic"),  # a classic member joins a consumer group, assigned by the server
    ("kp", "classic", "ck", "consumer"),
    ("ck", "consumer", "kp", "classic"),
    ("java", "classic", "java", "consumer"),
    ("java", "consumer", "java", "classic"),
]


@pytest.mark.parametrize("first_client, first_protocol, second_client, second_protocol", MIXED,
                         ids=[f"{a}-{b}-then-{c}-{d}" for a, b, c, d in MIXED])
def test_mixed_protocol_group(power, start_member, first_client, first_protocol, second_client, second_protocol):
    """Kafka 4: members of both protocols in one group share it; the group keeps every record once."""
    want = power.expected[TOPIC]
    group = group_name("mixed")
    first = start_member(first_client, first_protocol, group)
    wait_until(lambda: owned(first) == list(range(data.VGROUPS)), 60, "the first member owning all 4", first)
    second = start_member(second_client, second_protocol, group)

    def split() -> bool:
        a, b = owned(first) or [], owned(second) or []
        return len(a) == 2 and len(b) == 2 and sorted(a + b) == list(range(data.VGROUPS))

    wait_until(split, 60, "the two members owning 2 partitions each", first, second)
    wait_until(lambda: len(read_all([first, second])) >= len(want), 30, "every record read", first, second)
    time.sleep(1.0)
    check_exactly(read_all([first, second]), want, first_offsets={p: 0 for p in range(data.VGROUPS)})
    close(second)
    wait_until(lambda: owned(first) == list(range(data.VGROUPS)), 60, "the first member owning all 4 again",
               first, second)
    close(first)


def test_consumer_protocol_member_killed_expires_and_partitions_move(power, start_member):
    want = power.expected[TOPIC]
    group = group_name("kip848-kill")
    a, b = start_member("ck", "consumer", group), start_member("ck", "consumer", group)
    wait_until(lambda: split_of([a, b]) == [2, 2] and len(read_all([a, b])) >= len(want), 60,
               "two members owning 2 partitions each and every record read", a, b)
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait(10)
    took = wait_until(lambda: owned(b) == list(range(data.VGROUPS)), 30,
                      "the survivor owning all 4 partitions after SIGKILL of the other member", a, b)
    assert took >= SESSION_MS / 2000, f"moved {took:.1f} s after SIGKILL: before the session timeout?\n{b.describe()}"
    got = {(r.key, r.timestamp) for r in read_all([a, b])}
    assert got == {(r.key, r.timestamp) for r in want}  # at least once
    close(b)


def test_admin_tools_see_a_consumer_protocol_group(power, start_member, java, walgate):
    """kafka-consumer-groups --describe (Admin: ConsumerGroupDescribe) and SHOW CONSUMERS on a live KIP-848 group."""
    want = power.expected[TOPIC]
    group = group_name("kip848-admin")
    a, b = start_member("ck", "consumer", group), start_member("java", "consumer", group)
    wait_until(lambda: split_of([a, b]) == [2, 2] and len(read_all([a, b])) >= len(want), 90,
               "two members owning 2 partitions each and every record read", a, b)
    desc = consumer_groups(java, power, "4.3.0", "--describe", "--group", group)
    rows = describe_rows(desc)
    owners = {p: r["CONSUMER-ID"] for p, r in rows.items()}
    assert sorted(owners) == list(range(data.VGROUPS)) and len(set(owners.values())) == 2, desc.describe()
    assert "STATE STABLE" in desc.stdout.upper(), desc.describe()
    shown = [r for r in walgate.sql("SHOW CONSUMERS")["data"] if r[1] == group]
    assert len(shown) == 2 and all(r[4] == "ready" for r in shown), shown
    assert {r[0] for r in shown} == set(owners.values()), (shown, owners)
    close(a)
    close(b)
    desc = consumer_groups(java, power, "4.3.0", "--describe", "--group", group)
    assert "STATE EMPTY" in desc.stdout.upper(), desc.describe()
    assert {p: int(r["LAG"]) for p, r in describe_rows(desc).items()} == {p: 0 for p in range(data.VGROUPS)}, \
        desc.describe()
