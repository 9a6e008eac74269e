"""The catalog in cluster mode: shared records (users, ACLs, quotas, configs) are staged, never written by the node
itself, and come back through :meth:`Catalog.apply_shared` / :meth:`Catalog.restore_shared`, durable with their
sequence number; a disk that refuses a write changes nothing and the record is taken once it has room."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faults import WRITE_FAULTS, Faults, refused

from walgate.security.acl import AclBinding
from walgate.storage import quotas
from walgate.storage.catalog import Catalog
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, StorageUnavailable


def acl(principal: str) -> AclBinding:
    return AclBinding.from_json([2, "t", 3, principal, "*", 3, 3])  # TOPIC t LITERAL READ ALLOW


def acl_record(principal: str) -> dict[str, Any]:
    from walgate.storage.acls import acl_record as make

    return make("create_acls", [acl(principal)])


def quota_record(user: str, rate: float) -> dict[str, Any]:
    return quotas.record(quotas.entity([("user", user)]), {"producer_byte_rate": rate})


def cluster_catalog(tmp_path: Path) -> Catalog:
    cat = Catalog.open(tmp_path / "catalog.log")
    cat.cluster = True
    return cat


def test_a_staged_call_validates_shows_and_undoes_its_shared_changes(tmp_path: Path) -> None:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE local VGROUPS 1")  # a single node's data dir: its database stays its own
    e.close()
    e = Engine.open(tmp_path)
    e.cluster_mode()

    def change(engine: Engine) -> bool:
        engine.catalog.change_acls("create_acls", [acl("User:a")])
        engine.execute("CREATE STABLE local.st (ts TIMESTAMP, v INT) TAGS (t INT)")  # the node's own: written
        return acl("User:a") in engine.catalog.acls.current.bindings  # seen for the rest of the call

    seen, staged = e.staged(change, e)
    assert seen and staged == [acl_record("User:a")]
    assert not e.catalog.acls.current.bindings and ("local", "st") in e.catalog.stables
    with pytest.raises(StorageUnavailable, match="through the cluster's controller"):
        e.catalog.change_acls("create_acls", [acl("User:a")])  # outside a staged call: refused, nothing changed
    assert not e.catalog.acls.current.bindings
    with pytest.raises(InvalidValue):
        e.catalog.validate_shared([{"op": "delete_acls", "acls": [acl("User:z").to_json()]}])
    e.close()
    assert "create_acls" not in (tmp_path / "catalog.log").read_text()


def test_shared_records_apply_in_order_once_and_survive_a_restart(tmp_path: Path) -> None:
    cat = cluster_catalog(tmp_path)
    assert cat.apply_shared(1, acl_record("User:a")) and cat.apply_shared(2, quota_record("u", 10.0))
    assert not cat.apply_shared(2, quota_record("u", 99.0)), "a record applied already is not applied again"
    assert cat.apply_shared(3, {"op": "drop_user", "name": "nobody"}), "passed over, its sequence number kept"
    assert cat.shared_seq == 3
    again = Catalog.open(tmp_path / "catalog.log")
    assert again.shared_seq == 3 and acl("User:a") in again.acls.current.bindings
    assert again.client_quotas == {quotas.entity([("user", "u")]): {"producer_byte_rate": 10.0}}
    again.rewrite()  # the compacted file keeps the sequence number
    assert Catalog.open(tmp_path / "catalog.log").shared_seq == 3


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_shared_record_the_disk_refuses_changes_nothing_and_is_taken_later(tmp_path: Path, op: str,
                                                                           kind: str) -> None:
    cat = cluster_catalog(tmp_path)
    cat.apply_shared(1, acl_record("User:a"))
    size = (tmp_path / "catalog.log").stat().st_size
    faults = Faults()
    with faults.active():
        refused(faults, op, kind, lambda: cat.apply_shared(2, acl_record("User:b")))
        assert cat.shared_seq == 1 and acl("User:b") not in cat.acls.current.bindings
        assert (tmp_path / "catalog.log").stat().st_size == size
        assert cat.apply_shared(2, acl_record("User:b"))
    assert Catalog.open(tmp_path / "catalog.log").shared_seq == 2


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_snapshot_replaces_the_shared_state_whole_or_not_at_all(tmp_path: Path, op: str, kind: str) -> None:
    cat = Catalog.open(tmp_path / "catalog.log")
    cat.create_database("local", {}, 0)  # made as a single node: stays the node's own
    cat.cluster = True
    cat.apply_shared(1, acl_record("User:a"))
    snapshot = [acl_record("User:b"), quota_record("u", 5.0)]
    faults = Faults()
    with faults.active():
        refused(faults, op, kind, lambda: cat.restore_shared(40, snapshot))
        assert cat.shared_seq == 1 and cat.acls.current.bindings == {acl("User:a")}
    with pytest.raises(InvalidValue):
        cat.restore_shared(40, [{"op": "create_db", "name": "x"}])  # not a shared record: nothing restored
    cat.restore_shared(40, snapshot)
    reopened = Catalog.open(tmp_path / "catalog.log")
    assert reopened.shared_seq == 40 and reopened.acls.current.bindings == {acl("User:b")}
    assert "local" in reopened.databases and reopened.client_quotas


def test_a_torn_last_shared_record_is_applied_again_from_the_stream(tmp_path: Path) -> None:
    cat = cluster_catalog(tmp_path)
    cat.apply_shared(1, acl_record("User:a"))
    cat.apply_shared(2, acl_record("User:b"))
    path = tmp_path / "catalog.log"
    path.write_bytes(path.read_bytes()[:-5])  # a crash while appending record 2
    again = Catalog.open(path)
    again.cluster = True
    assert again.shared_seq == 1 and again.apply_shared(2, acl_record("User:b"))
