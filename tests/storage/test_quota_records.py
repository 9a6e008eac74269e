"""Client quotas in the catalog (walgate/storage/quotas.py): Kafka's validation and filter rules, and the durable
record under truncation, flipped bytes and refused writes (nothing half-written, the catalog always opens again)."""

from __future__ import annotations

from pathlib import Path

import pytest
from faults import WRITE_FAULTS, Faults, flipped_in_line, refused, torn_last_line

from walgate.storage import lines, quotas
from walgate.storage.catalog import Catalog
from walgate.storage.damage import DamageLog
from walgate.storage.errors import InvalidValue
from walgate.storage.quotas import MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, UnsupportedFilter, entity

ALICE = entity([("user", "alice")])
ALICE_APP = entity([("client-id", "app"), ("user", "alice")])
DEFAULT_USER = entity([("user", None)])
APP = entity([("client-id", "app")])


def test_entities_are_validated_and_normalised() -> None:
    assert entity([("user", "alice"), ("client-id", "app")]) == ALICE_APP == (("client-id", "app"), ("user", "alice"))
    for bad, why in (([], "empty"), ([("user", "a"), ("user", "b")], "duplicate"), ([("group", "g")], "Unhandled"),
                     ([("user", "")], "Empty user"), ([("ip", "10.0.0.1")], "not supported")):
        with pytest.raises(InvalidValue, match=why):
            entity(bad)


def test_alter_validates_every_value_and_changes_nothing_on_error() -> None:
    current = {ALICE: {"producer_byte_rate": 1024.0}}
    assert quotas.alter(current, ALICE, [("consumer_byte_rate", 2048, False), ("producer_byte_rate", 0, True)]) == \
        {"consumer_byte_rate": 2048.0}
    assert quotas.alter(current, APP, [("request_percentage", 12.5, False), ("consumer_byte_rate", 0, True)]) == \
        {"request_percentage": 12.5}
    for ops, why in (([("producer_byte_rate", 0, False)], "greater than 0"),
                     ([("producer_byte_rate", -1, False)], "greater than 0"),
                     ([("producer_byte_rate", 1.5, False)], "not a valid integer"),
                     ([("consumer_byte_rate", 1e30, False)], "too large"),
                     ([("request_percentage", float("nan"), False)], "greater than 0"),
                     ([("controller_mutation_rate", 1, False)], "Invalid configuration key"),
                     ([("producer_byte_rate", 1, False), ("producer_byte_rate", 2, True)], "Duplicate quota key")):
        with pytest.raises(InvalidValue, match=why):
            quotas.alter(current, ALICE, ops)
    assert current == {ALICE: {"producer_byte_rate": 1024.0}}


def test_describe_filters_as_kafka_does() -> None:
    state = {ALICE: {"producer_byte_rate": 1.0}, ALICE_APP: {"consumer_byte_rate": 2.0},
             DEFAULT_USER: {"request_percentage": 3.0}, APP: {"producer_byte_rate": 4.0}}

    def names(components: list[tuple[str, int, str | None]], strict: bool = False) -> set[quotas.Entity]:
        return {e for e, _ in quotas.describe(state, components, strict)}

    assert names([]) == set(state)
    assert names([], strict=True) == set()
    assert names([("user", MATCH_EXACT, "alice")]) == {ALICE, ALICE_APP}
    assert names([("user", MATCH_EXACT, "alice")], strict=True) == {ALICE}
    assert names([("user", MATCH_DEFAULT, None)]) == {DEFAULT_USER}
    assert names([("user", MATCH_SPECIFIED, None)]) == {ALICE, ALICE_APP, DEFAULT_USER}
    assert names([("client-id", MATCH_EXACT, "app")], strict=True) == {APP}
    assert names([("user", MATCH_SPECIFIED, None), ("client-id", MATCH_SPECIFIED, None)], strict=True) == {ALICE_APP}
    for bad in ([("user", MATCH_EXACT, None)], [("user", MATCH_DEFAULT, "x")], [("user", 7, None)],
                [("user", MATCH_DEFAULT, None), ("user", MATCH_SPECIFIED, None)], [("", MATCH_SPECIFIED, None)],
                [("ip", MATCH_SPECIFIED, None), ("user", MATCH_SPECIFIED, None)]):
        with pytest.raises(InvalidValue):
            names(bad)
    with pytest.raises(UnsupportedFilter):
        names([("group", MATCH_SPECIFIED, None)])


def make(tmp_path: Path) -> tuple[Path, dict[quotas.Entity, quotas.QuotaValues]]:
    path = tmp_path / "catalog.log"
    cat = Catalog.open(path)
    cat.create_database("power", {"VGROUPS": 1}, 0)
    cat.set_client_quota(ALICE, {"producer_byte_rate": 1024.0})
    cat.set_client_quota(DEFAULT_USER, {"consumer_byte_rate": 4096.0, "request_percentage": 50.0})
    cat.set_client_quota(APP, {"producer_byte_rate": 10.0})
    cat.set_client_quota(APP, {})  # removed
    cat.set_client_quota(ALICE_APP, {"consumer_byte_rate": 8.0})
    return path, cat.client_quotas


def test_quotas_survive_a_restart_and_a_rewrite(tmp_path: Path) -> None:
    path, state = make(tmp_path)
    assert state == {ALICE: {"producer_byte_rate": 1024.0}, ALICE_APP: {"consumer_byte_rate": 8.0},
                     DEFAULT_USER: {"consumer_byte_rate": 4096.0, "request_percentage": 50.0}}
    cat = Catalog.open(path)
    assert cat.client_quotas == state and "power" in cat.databases
    cat.rewrite()
    assert Catalog.open(path).client_quotas == state


def test_a_torn_quota_record_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    path, state = make(tmp_path)
    for whole in torn_last_line(path):
        damage = DamageLog(tmp_path)
        cat = Catalog.open(path, damage)
        assert cat.client_quotas == {k: v for k, v in state.items() if k != ALICE_APP} and damage.records == []
        assert path.read_bytes() == whole  # cut back to the last whole record


def test_a_flipped_byte_in_a_quota_record_loses_that_record_only_and_is_reported(tmp_path: Path) -> None:
    path, state = make(tmp_path)
    for record in flipped_in_line(path, 1):  # alice's producer_byte_rate
        assert b"alice" in record
        damage = DamageLog(tmp_path)
        cat = Catalog.open(path, damage)
        assert cat.client_quotas == {k: v for k, v in state.items() if k != ALICE}
        assert len(damage.records) == 1 and "power" in cat.databases
        assert Catalog.open(path, DamageLog(tmp_path)).client_quotas == cat.client_quotas  # rewritten: reported once


@pytest.mark.parametrize("bad", [
    {"op": "client_quota", "entity": [["user", "bob"]], "values": {"producer_byte_rate": -5}},
    {"op": "client_quota", "entity": [["user", "bob"]], "values": {"producer_byte_rate": "fast"}},
    {"op": "client_quota", "entity": [["user", "bob"]], "values": {"producer_byte_rate": True}},
    {"op": "client_quota", "entity": [["user", "bob"]], "values": {"bogus": 1}},
    {"op": "client_quota", "entity": [["user"]], "values": {"producer_byte_rate": 1}},
    {"op": "client_quota", "entity": [], "values": {"producer_byte_rate": 1}},
    {"op": "client_quota", "entity": "user=bob", "values": {}},
    {"op": "client_quota", "entity": [["ip", "1.2.3.4"]], "values": {}},
])
def test_a_quota_record_that_verifies_but_cannot_be_applied_is_skipped_and_reported(tmp_path: Path,
                                                                                    bad: dict[str, object]) -> None:
    path, state = make(tmp_path)
    with path.open("ab") as f:
        f.write(lines.encode(bad))
    damage = DamageLog(tmp_path)
    cat = Catalog.open(path, damage)
    assert cat.client_quotas == state
    [report] = damage.records
    assert "cannot be applied" in report.reason


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_quota_write_changes_nothing(tmp_path: Path, op: str, kind: str) -> None:
    path, state = make(tmp_path)
    cat = Catalog.open(path)
    size = path.stat().st_size
    faults = Faults()
    with faults.active():
        for change in (lambda: cat.set_client_quota(ALICE, {"producer_byte_rate": 1.0}),
                       lambda: cat.set_client_quota(DEFAULT_USER, {}),
                       lambda: cat.set_client_quota(APP, {"request_percentage": 5.0})):
            refused(faults, op, kind, change)
            assert cat.client_quotas == state and path.stat().st_size == size
        cat.set_client_quota(APP, {"request_percentage": 5.0})  # the disk has room again
    assert Catalog.open(path).client_quotas == {**state, APP: {"request_percentage": 5.0}}
