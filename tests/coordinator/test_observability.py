"""What the coordinator tells operators: GroupCoordinator.group_stats() and the walgate.groups log lines."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
from coordinator_helpers import sub
from kio.schema.errors import ErrorCode

from walgate.coordinator import (
    ClassicGroups,
    ConsumerGroups,
    GroupCoordinator,
    GroupStats,
)

TOPICS = {"t": 4}
ANON = "principal=User:ANONYMOUS"


class Node:
    """A GroupCoordinator on a fake clock (plain ints), with counters for member ids and request ids."""

    def __init__(self, coordinator: GroupCoordinator | None = None) -> None:
        ids = itertools.count(1)
        classic = ClassicGroups(member_id_suffix=lambda: str(next(ids)), initial_rebalance_delay_ms=0)
        self.c = coordinator or GroupCoordinator(classic, ConsumerGroups(
            new_member_id=lambda: f"k{next(ids)}", is_classic_group_in_use=classic.has_members))
        self.now = 0
        self.rids = itertools.count(1)
        self.answers: dict[int, dict[str, Any]] = {}

    def sleep(self, ms: int) -> None:
        target = self.now + ms
        while (d := self.c.next_deadline()) is not None and d <= target:
            self.now = max(self.now, d)
            self._collect(self.c.tick(self.now))
        self.now = target

    def _collect(self, completions: list[Any]) -> None:
        for c in completions:
            self.answers[c.request_id] = c.response

    def join(self, member_id: str = "", *, group: str = "c", protocol_type: str = "consumer") -> int:
        rid = next(self.rids)
        self._collect(self.c.join(
            rid, topic_partitions=TOPICS.get, group_id=group, member_id=member_id, group_instance_id=None,
            client_id="cli", client_host="/10.0.0.2", protocol_type=protocol_type, protocols=[("range", sub("t"))],
            session_timeout_ms=6_000, rebalance_timeout_ms=30_000, require_known_member_id=True,
            supports_skip_assignment=False, now_ms=self.now,
        ))
        return rid

    def join_classic(self, group: str = "c", protocol_type: str = "consumer") -> dict[str, Any]:
        """The JoinGroup v4+ dance, until the join phase completes; the join answer."""
        first = self.answers.pop(self.join(group=group, protocol_type=protocol_type))
        assert first["error_code"] == ErrorCode.member_id_required
        rid = self.join(first["member_id"], group=group, protocol_type=protocol_type)
        self.sleep(0)
        return self.answers.pop(rid)

    def sync(self, member_id: str, generation: int, group: str = "c") -> dict[str, Any]:
        rid = next(self.rids)
        self._collect(self.c.sync(
            rid, group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
            protocol_type="consumer", protocol_name="range", assignments={member_id: b""}, now_ms=self.now,
        ))
        return self.answers.pop(rid)

    def hb(self, member_id: str = "", epoch: int = 0, owned: list[int] | None = None, group: str = "k",
           instance_id: str | None = None, client_id: str = "kip") -> dict[str, Any]:
        response, completions = self.c.consumer_heartbeat(
            group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id, rack_id=None,
            rebalance_timeout_ms=60_000 if epoch == 0 else -1,
            subscribed_topic_names=["t"] if epoch == 0 else None, server_assignor=None,
            topic_partitions=TOPICS.get, owned=[] if epoch == 0 else [("t", owned or [])],
            client_id=client_id, client_host="/10.0.0.1", now_ms=self.now,
        )
        self._collect(completions)
        return response

    def stats(self) -> dict[str, GroupStats]:
        return {s.group: s for s in self.c.group_stats()}


def test_group_stats_of_both_protocols() -> None:
    n = Node()
    assert n.c.group_stats() == []

    joined = n.join_classic()
    member, generation = joined["member_id"], joined["generation_id"]
    assert n.stats() == {"c": GroupStats("c", "classic", "CompletingRebalance", 1, 1)}
    assert n.sync(member, generation)["error_code"] == ErrorCode.none
    assert n.stats()["c"] == GroupStats("c", "classic", "Stable", 1, 1)

    first = n.hb()
    assert n.stats()["k"] == GroupStats("k", "consumer", "Stable", 1, 1)
    second = n.hb()
    assert n.stats()["k"] == GroupStats("k", "consumer", "Reconciling", 2, 2)  # the first must revoke two
    n.hb(first["member_id"], -1)
    assert n.stats()["k"] == GroupStats("k", "consumer", "Assigning", 1, 3)  # the target is recomputed next
    n.hb(second["member_id"], second["member_epoch"])
    assert n.stats()["k"] == GroupStats("k", "consumer", "Stable", 1, 3)

    n.c.leave(group_id="c", members=[(member, None)], now_ms=n.now)
    assert n.stats()["c"] == GroupStats("c", "classic", "Empty", 0, 2)  # the join phase ended without members
    assert [s.protocol for s in n.c.group_stats()] == ["classic", "consumer"]


def test_an_upgraded_group_keeps_counting_from_its_generation() -> None:
    n = Node()
    joined = n.join_classic(group="g")
    n.sync(joined["member_id"], joined["generation_id"], group="g")
    n.hb(group="g")  # a KIP-848 member joins: the classic group (generation 1) becomes a consumer group
    assert n.stats() == {"g": GroupStats("g", "consumer", "Reconciling", 2, 2)}


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    lines = [r.getMessage() for r in caplog.records if r.name == "walgate.groups"]
    assert all("\n" not in line for line in lines)
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "walgate.groups")
    return lines


def test_classic_rebalances_joins_leaves_and_expiries_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    n = Node()
    caplog.set_level(logging.INFO, logger="walgate.groups")
    a = n.join_classic()
    ma = a["member_id"]
    who_a = f"member_id={ma} client_id=cli client_host=/10.0.0.2 {ANON}"
    assert _lines(caplog) == [
        f"member joined group=c type=classic {who_a}",
        f"rebalance group=c type=classic generation=1 members=1: [{who_a}]",
    ]
    caplog.clear()
    n.sync(ma, 1)
    rid = n.join()  # a second member: the leader must rejoin, then the join phase ends
    mb = n.answers.pop(rid)["member_id"]
    rid_b = n.join(mb)
    rid_a = n.join(ma)
    who_b = f"member_id={mb} client_id=cli client_host=/10.0.0.2 {ANON}"
    assert n.answers.pop(rid_a)["generation_id"] == n.answers.pop(rid_b)["generation_id"] == 2
    assert _lines(caplog) == [
        f"member joined group=c type=classic {who_b}",
        f"rebalance group=c type=classic generation=2 members=2: [{who_a}, {who_b}]",
    ]
    caplog.clear()
    n.c.leave(group_id="c", members=[(mb, None)], now_ms=n.now)
    assert _lines(caplog) == [f"member left group=c type=classic {who_b}"]
    caplog.clear()
    n.sleep(6_000)  # a's session timeout: it never synced generation 2 nor heartbeated
    assert _lines(caplog) == [
        f'member expired group=c type=classic {who_a} reason="session timeout (6000 ms)"',
        "rebalance group=c type=classic generation=3 members=0: []",
    ]


def test_consumer_group_epochs_joins_leaves_and_expiries_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    n = Node()
    caplog.set_level(logging.INFO, logger="walgate.groups")
    first = n.hb()
    second = n.hb()
    who = [f"member_id={r['member_id']} client_id=kip client_host=/10.0.0.1 {ANON}" for r in (first, second)]
    n.hb(second["member_id"], -1)
    n.sleep(45_000)  # the first member's session (45 s by default) ends
    assert _lines(caplog) == [
        f"member joined group=k type=consumer {who[0]}",
        f"rebalance group=k type=consumer epoch=1 members=1: [{who[0]}]",
        f"member joined group=k type=consumer {who[1]}",
        f"rebalance group=k type=consumer epoch=2 members=2: [{who[0]}, {who[1]}]",
        f"member left group=k type=consumer {who[1]}",
        f"rebalance group=k type=consumer epoch=3 members=1: [{who[0]}]",
        f'member expired group=k type=consumer {who[0]} reason="session timeout (45000 ms)"',
        "rebalance group=k type=consumer epoch=4 members=0: []",
    ]


def test_static_members_and_odd_client_ids_stay_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    n = Node()
    caplog.set_level(logging.INFO, logger="walgate.groups")
    first = n.hb(instance_id="i1", client_id="evil\nclient id")
    n.hb(first["member_id"], -2, instance_id="i1", client_id="evil\nclient id")
    n.hb("again", 0, instance_id="i1", client_id="c")
    who = f"client_id='evil\\nclient id' client_host=/10.0.0.1 {ANON}"
    assert _lines(caplog) == [
        f"member joined group=k type=consumer member_id={first['member_id']} {who}",
        f"rebalance group=k type=consumer epoch=1 members=1: [member_id={first['member_id']} {who}]",
        f"member left group=k type=consumer member_id={first['member_id']} {who} instance_id=i1 member_epoch=-2",
        (f"member joined group=k type=consumer member_id=again client_id=c client_host=/10.0.0.1 {ANON} "
         f"instance_id=i1 replaces={first['member_id']}"),
    ]


def test_an_upgrade_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    n = Node()
    joined = n.join_classic(group="g")
    n.sync(joined["member_id"], joined["generation_id"], group="g")
    caplog.set_level(logging.INFO, logger="walgate.groups")
    n.hb(group="g")
    assert _lines(caplog)[0] == "group upgraded group=g type=consumer from=classic epoch=1 members=1"


def test_the_default_coordinator_refuses_a_kip848_join_of_a_classic_group_of_another_protocol() -> None:
    n = Node(GroupCoordinator(ClassicGroups(initial_rebalance_delay_ms=0)))
    joined = n.join_classic(group="connect", protocol_type="connect")
    assert joined["error_code"] == ErrorCode.none
    assert n.hb(group="connect")["error_code"] == ErrorCode.group_id_not_found
    (described,) = n.c.consumer.describe(["connect"])
    assert described["error_message"] == "Group connect is not a consumer group."
