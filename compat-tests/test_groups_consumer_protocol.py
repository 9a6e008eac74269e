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

import pytest

import compat_data as data
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
