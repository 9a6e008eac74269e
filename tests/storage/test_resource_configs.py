"""Dynamic broker and group configs in the catalog (walgate/storage/resource_configs.py): which broker configs are
topic defaults, and the durable record under truncation, flipped bytes and refused writes (nothing half-written,
the catalog always opens again)."""

from __future__ import annotations

from pathlib import Path

import pytest
from faults import WRITE_FAULTS, Faults, flipped_in_line, refused, torn_last_line

from walgate.coordinator.group_configs import GroupTimeouts
from walgate.storage import lines
from walgate.storage.broker_configs import BROKER_SYNONYMS
from walgate.storage.catalog import Catalog
from walgate.storage.damage import DamageLog
from walgate.storage.resource_configs import topic_defaults

CLUSTER, NODE, NODE0, GROUP_G = ("broker", ""), ("broker", "1"), ("broker", "0"), ("group", "g")


def test_broker_configs_default_the_topic_configs_they_are_synonyms_of() -> None:
    assert BROKER_SYNONYMS["log.retention.ms"] == "retention.ms"
    assert BROKER_SYNONYMS["message.max.bytes"] == "max.message.bytes"  # Produce reads the broker default too
    assert BROKER_SYNONYMS["log.flush.interval.ms"] == "flush.ms"
    assert BROKER_SYNONYMS["compression.type"] == "compression.type"  # stored and described, a topic default too
    state = {CLUSTER: {"log.retention.ms": "1000", "log.segment.bytes": "2048", "background.threads": "12"},
             NODE: {"log.segment.bytes": "4096", "sasl.kerberos.min.time.before.relogin": "58000"},
             ("broker", "2"): {"log.retention.bytes": "5"}}
    assert topic_defaults(state, "1") == {"retention.ms": "1000", "segment.bytes": "4096"}  # the node's own wins
    assert topic_defaults(state, "7") == {"retention.ms": "1000", "segment.bytes": "2048"}


def test_group_configs_are_bounded_by_kafkas_defaults_and_the_brokers_own() -> None:
    timeouts = GroupTimeouts(45_000, 5_000, lambda g: {"consumer.heartbeat.interval.ms": "6000"} if g == "g" else {})
    assert timeouts.of("g") == (45_000, 6_000) and timeouts.of("h") == (45_000, 5_000)
    timeouts.validate({"consumer.session.timeout.ms": "60000", "consumer.heartbeat.interval.ms": "15000"})
    for bad, why in (({"consumer.session.timeout.ms": "44999"}, "45000..60000"),
                     ({"consumer.heartbeat.interval.ms": "15001"}, "5000..15000"),
                     ({"consumer.session.timeout.ms": "soon"}, "integer"),
                     ({"share.record.lock.duration.ms": "14999"}, "15000..60000"),
                     ({"share.isolation.level": "read_everything"}, "must be one of"),
                     ({"consumer.no.such.config": "1"}, "Unknown group config")):
        with pytest.raises(ValueError, match=why):
            timeouts.validate(bad)
    GroupTimeouts(6_000, 500).validate({"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "500"})


def make(tmp_path: Path) -> tuple[Path, dict[tuple[str, str], dict[str, str]]]:
    path = tmp_path / "catalog.log"
    cat = Catalog.open(path)
    cat.create_database("power", {"VGROUPS": 1}, 0)
    cat.set_resource_configs("broker", "", {"log.retention.ms": "1000", "background.threads": "12"})
    cat.set_resource_configs("group", "g", {"consumer.session.timeout.ms": "50000"})
    cat.set_resource_configs("broker", "1", {"log.segment.bytes": "2048"})
    cat.set_resource_configs("broker", "1", {})  # removed
    cat.set_resource_configs("broker", "0", {"sasl.kerberos.min.time.before.relogin": "58000",
                                             "listener.name.plain.ssl.keystore.password": "secret"})
    cat.set_resource_configs("group", "h", {"consumer.heartbeat.interval.ms": "6000"})
    return path, cat.resource_configs


def test_resource_configs_survive_a_restart_and_a_rewrite(tmp_path: Path) -> None:
    path, state = make(tmp_path)
    assert state == {CLUSTER: {"log.retention.ms": "1000", "background.threads": "12"},
                     GROUP_G: {"consumer.session.timeout.ms": "50000"},
                     NODE0: {"sasl.kerberos.min.time.before.relogin": "58000",
                             "listener.name.plain.ssl.keystore.password": "secret"},
                     ("group", "h"): {"consumer.heartbeat.interval.ms": "6000"}}
    cat = Catalog.open(path)
    assert cat.resource_configs == state and "power" in cat.databases
    cat.rewrite()
    assert Catalog.open(path).resource_configs == state


def test_a_torn_resource_configs_record_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    path, state = make(tmp_path)
    for whole in torn_last_line(path):
        damage = DamageLog(tmp_path)
        cat = Catalog.open(path, damage)
        assert cat.resource_configs == {k: v for k, v in state.items() if k != ("group", "h")}
        assert damage.records == [] and path.read_bytes() == whole


@pytest.mark.parametrize(("marker", "lost"), [(b"log.retention.ms", CLUSTER),
                                               (b"sasl.kerberos.min.time.before.relogin", NODE0)])
def test_a_flipped_byte_loses_that_record_only_and_is_reported(tmp_path: Path, marker: bytes,
                                                              lost: tuple[str, str]) -> None:
    path, state = make(tmp_path)
    index = next(i for i, line in enumerate(path.read_bytes().split(b"\n")) if marker in line)
    for _record in flipped_in_line(path, index):  # the cluster-wide or node 0's per-broker record
        damage = DamageLog(tmp_path)
        cat = Catalog.open(path, damage)
        assert cat.resource_configs == {k: v for k, v in state.items() if k != lost}
        assert len(damage.records) == 1 and "power" in cat.databases
        assert Catalog.open(path, DamageLog(tmp_path)).resource_configs == cat.resource_configs  # reported once


@pytest.mark.parametrize("bad", [
    {"op": "resource_configs", "kind": "topic", "name": "t", "configs": {}},
    {"op": "resource_configs", "kind": "broker", "name": 1, "configs": {}},
    {"op": "resource_configs", "kind": "group", "name": "g", "configs": {"consumer.session.timeout.ms": 50000}},
    {"op": "resource_configs", "kind": "group", "name": "g", "configs": ["x"]},
    {"op": "resource_configs", "kind": "group", "name": "g"},
])
def test_a_record_that_verifies_but_cannot_be_applied_is_skipped_and_reported(tmp_path: Path,
                                                                              bad: dict[str, object]) -> None:
    path, state = make(tmp_path)
    with path.open("ab") as f:
        f.write(lines.encode(bad))
    damage = DamageLog(tmp_path)
    assert Catalog.open(path, damage).resource_configs == state
    [report] = damage.records
    assert "cannot be applied" in report.reason


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_write_changes_nothing(tmp_path: Path, op: str, kind: str) -> None:
    path, state = make(tmp_path)
    cat = Catalog.open(path)
    size = path.stat().st_size
    faults = Faults()
    with faults.active():
        for change in (lambda: cat.set_resource_configs("broker", "", {"log.retention.ms": "5"}),
                       lambda: cat.set_resource_configs("broker", "0", {"sasl.kerberos.min.time.before.relogin": "1"}),
                       lambda: cat.set_resource_configs("group", "g", {}),
                       lambda: cat.set_resource_configs("broker", "1", {"log.segment.bytes": "4096"})):
            refused(faults, op, kind, change)
            assert cat.resource_configs == state and path.stat().st_size == size
        cat.set_resource_configs("group", "g", {})  # the disk has room again
    assert Catalog.open(path).resource_configs == {k: v for k, v in state.items() if k != GROUP_G}
