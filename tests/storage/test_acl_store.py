"""The durable ACL store: catalog records create_acls/delete_acls under the catalog's damage and fault rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from faults import FAULT_KINDS, Faults

from walgate.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from walgate.storage import lines
from walgate.storage.catalog import Catalog
from walgate.storage.engine import Engine
from walgate.storage.errors import StorageUnavailable

A = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", Operation.READ, Permission.ALLOW)
B = AclBinding(ResourceType.GROUP, "g", PatternType.PREFIXED, "User:*", "10.0.0.1", Operation.ALL, Permission.DENY)
C = AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:bob", "*", Operation.ALTER,
               Permission.ALLOW)


def make(tmp_path: Path) -> Path:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1")
    e.catalog.change_acls("create_acls", [A, B])
    e.catalog.change_acls("create_acls", [C])
    e.catalog.change_acls("delete_acls", [B])
    e.close()
    return tmp_path / "catalog.log"


def bindings(tmp_path: Path) -> tuple[frozenset[AclBinding], list[object]]:
    e = Engine.open(tmp_path)
    try:
        return e.catalog.acls.current.bindings, e.damage()
    finally:
        e.close()


def test_acls_survive_a_restart_and_a_rewrite(tmp_path: Path):
    path = make(tmp_path)
    assert bindings(tmp_path) == ({A, C}, [])
    cat = Catalog.open(path)
    cat.rewrite()
    assert [r["op"] for _, _, r in lines.scan(path.read_bytes()).records][-1] == "create_acls"  # one record for all
    assert Catalog.open(path).acls.current.bindings == {A, C} and "d" in Catalog.open(path).databases


def test_a_torn_acl_record_is_dropped_whole(tmp_path: Path):
    path = make(tmp_path)
    data = path.read_bytes()
    record = lines.encode({"op": "create_acls", "acls": [B.to_json(), A.to_json()]})
    for cut in (1, len(record) // 2, len(record) - 1):
        path.write_bytes(data + record[:cut])
        assert bindings(tmp_path) == ({A, C}, [])


def test_a_flipped_byte_in_an_acl_record_loses_that_record_only_and_is_reported(tmp_path: Path):
    path = make(tmp_path)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rsplit(b"\n", 1)[1]  # delete_acls [B]: losing it keeps B, reported
    second = data.split(b"\n")[2]  # create_acls [C]
    for line, expect in ((second, {A}), (last, {A, B, C})):
        flipped = bytearray(data)
        flipped[data.index(line) + 12] ^= 0x20
        path.write_bytes(bytes(flipped))
        got, damage = bindings(tmp_path)
        assert got == expect and len(damage) == 1 and "catalog.log" in str(damage[0])
        path.write_bytes(data)


def test_acl_records_that_verify_but_cannot_be_applied_are_skipped(tmp_path: Path):
    path = make(tmp_path)
    bad = [{"op": "create_acls", "acls": [A.to_json()]},  # stored already
           {"op": "delete_acls", "acls": [B.to_json()]},  # not stored
           {"op": "create_acls", "acls": []},
           {"op": "create_acls", "acls": [[4, "not-the-cluster", 3, "User:x", "*", 7, 3]]},
           {"op": "create_acls", "acls": [[2, "t", 3, "nocolon", "*", 3, 3]]},
           {"op": "create_acls", "acls": [B.to_json(), B.to_json()]},
           {"op": "create_acls", "acls": [B.to_json(), [2, "t", 9, "User:x", "*", 3, 3]]}]  # one bad: none applied
    with open(path, "ab") as f:
        f.write(b"".join(lines.encode(r) for r in bad))
    got, damage = bindings(tmp_path)
    assert got == {A, C} and len(damage) == len(bad)
    assert bindings(tmp_path) == ({A, C}, [])  # rewritten: reported once


@pytest.mark.parametrize(("op", "kind"), [("write", k) for k in FAULT_KINDS] + [("fsync", "eio")])
def test_a_refused_acl_write_changes_nothing(tmp_path: Path, op: str, kind: str):
    path = make(tmp_path)
    cat = Catalog.open(path)
    before, size = cat.acls.current, path.stat().st_size
    faults = Faults()
    with faults.active():
        for change in (lambda: cat.change_acls("create_acls", [B]), lambda: cat.change_acls("delete_acls", [A, C])):
            faults.fail_kind(op, kind)
            with pytest.raises(StorageUnavailable):
                change()
            assert cat.acls.current is before and path.stat().st_size == size
        faults.clear()
        cat.change_acls("create_acls", [B])
    assert Catalog.open(path).acls.current.bindings == {A, B, C}
