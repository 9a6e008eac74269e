"""Consumer groups survive a walgate restart (issue 17): real clients with static members see no rebalance.

walgate records each group's state (in its coordinator partition, ``coordinator/offsets-<p>.log``, fsynced before the
state is acknowledged) and rebuilds the groups at start, as Kafka's coordinator loads its group records. Four groups of two static members (``group.instance.id``)
read one 4-partition Kafka-native topic: Java kafka-clients 4.3 and confluent-kafka, each in a classic group and in a
KIP-848 (``group.protocol=consumer``) group. walgate is killed with SIGKILL, restarted on the same data dir and
port, then stopped cleanly (SIGTERM) and started again, records being produced after each start. Through both
restarts:

* no member's rebalance callback runs again (the clients print their assignment after every callback: nothing is
  revoked, lost or assigned after the first split), and the restarted server logs no rebalance and no member
  joining for these groups (the generation / group epoch stays the one of the first split);
* every record is read exactly once by each group.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_groups import CLIENTS, events, owned

from livewalgate import WalgateServer, free_port, running_walgate

TOPIC = "restart_t"
PARTITIONS = 4
BATCH = 40  # records produced after each start
JAVA_CONFIG = ("--set", "metadata.recovery.strategy=none")
"""Java's clients rebootstrap their metadata when no broker answers (KIP-899's default ``rebootstrap``): for a moment
they know the topic without partitions, and a classic member then rejoins by itself (``cached metadata has
changed``), whatever the broker remembers — against a one-broker Kafka as well. Turned off: the test is about what
the broker keeps."""
GROUPS = [("java", "classic"), ("java", "consumer"), ("ck", "classic"), ("ck", "consumer")]


@contextlib.contextmanager
def serve(tmp_path: Path, run: str, data_dir: Path, port: int) -> Iterator[WalgateServer]:
    with running_walgate(tmp_path / run, data_dir=data_dir, kafka_port=port) as server:
        yield server


def produce(bootstrap: str, first: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(first, first + BATCH):
        producer.produce(TOPIC, value=f"v-{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def values(bgs: list) -> Counter[str]:
    return Counter(r["value"] for bg in bgs for r in events(bg, "record"))


def wait(predicate, timeout: float, what: str, server: WalgateServer, members: dict) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    shown = "\n\n".join(bg.describe() for bgs in members.values() for bg in bgs)
    pytest.fail(f"{what}: not within {timeout} s\n{shown}\n--- walgate log ---\n{server.log()[-6000:]}")


def test_static_members_keep_their_groups_across_a_kill_and_a_clean_restart(tmp_path, background, java_argv):
    data_dir, port = tmp_path / "data", free_port()
    bootstrap = f"127.0.0.1:{port}"
    members: dict[str, list] = {}
    with serve(tmp_path, "run1", data_dir, port) as server:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        del admin  # (a client left open would retry the server while it is down, noisily)
        produce(bootstrap, 0)
        for client, protocol in GROUPS:
            group = f"restart-{client}-{protocol}"
            members[group] = []
            for k in range(2):
                instance = f"{client}-{protocol}-{k}"
                if client == "java":
                    argv = java_argv("GroupMember.java", bootstrap, TOPIC, group, "--protocol", protocol,
                                     "--timeout", "240", "--instance-id", instance, *JAVA_CONFIG)
                else:
                    argv = [sys.executable, str(CLIENTS / "ck_group.py"), bootstrap, TOPIC, group, "--timeout",
                            "240", "--session-timeout-ms", "30000", "--instance-id", instance,
                            *(("--protocol", "consumer") if protocol == "consumer" else ())]
                members[group].append(background(argv))

        def split_and_read(total: int) -> bool:
            for bgs in members.values():
                parts = [owned(bg) or [] for bg in bgs]
                if sorted(len(p) for p in parts) != [2, 2] or sorted(sum(parts, [])) != list(range(PARTITIONS)):
                    return False
                if sum(values(bgs).values()) < total:
                    return False
            return True

        wait(lambda: split_and_read(BATCH), 120, "every group split 2/2 and read the first records", server, members)
        time.sleep(1.0)  # a late callback would show now
        callbacks = {id(bg): len(events(bg, "assignment")) for bgs in members.values() for bg in bgs}
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)

    for run, total in (("run2", 2 * BATCH), ("run3", 3 * BATCH)):
        with serve(tmp_path, run, data_dir, port) as server:
            assert re.search(rf"loaded {len(GROUPS)} recorded group\(s\)", server.log()), server.log()
            produce(bootstrap, total - BATCH)
            wait(lambda total=total: split_and_read(total), 90, f"every group reading on after the restart ({run})",
                 server, members)
            time.sleep(2.0)  # a rebalance after the restart would show now
            for group, bgs in members.items():
                for bg in bgs:
                    assert len(events(bg, "assignment")) == callbacks[id(bg)], (
                        f"{group}: a rebalance callback ran after the restart ({run})\n{bg.describe()}")
                    assert not events(bg, "error"), bg.describe()
                for event in ("rebalance", "member joined"):
                    assert f"{event} group={group} " not in server.log(), server.log()
            if run == "run3":  # the members leave while a server answers their last commit and LeaveGroup
                for bg in (bg for bgs in members.values() for bg in bgs):
                    os.kill(bg.proc.pid, signal.SIGTERM)
                for bg in (bg for bgs in members.values() for bg in bgs):
                    assert bg.proc.wait(60) == 0 and events(bg, "closed"), bg.describe()
        # leaving the block stops the server with SIGTERM: run3 starts after a clean stop

    for group, bgs in members.items():
        read = values(bgs)
        assert read == Counter(f"v-{i}" for i in range(3 * BATCH)), f"{group}: not every record exactly once: {read}"
