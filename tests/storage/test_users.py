"""Users: SQL CREATE/ALTER/DROP USER and SHOW USERS, KIP-554's credential changes, root's bootstrap, and their
records in the catalog log: durable, no secret in them or in SHOW, damage skipped and reported, refused writes
changing nothing (the catalog's rules)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from faults import WRITE_FAULTS, Faults, refused

from walgate.security.scram import credential_from_password
from walgate.storage import lines
from walgate.storage.catalog import Catalog
from walgate.storage.damage import DamageLog
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue, SqlSyntaxError
from walgate.storage.users import CredentialChange, UserAlreadyExists, UserNotFound

PASSWORD = "Tr0ub4dor&3"


def make(tmp_path: Path) -> Engine:
    e = Engine.open(tmp_path)
    e.execute("CREATE DATABASE d VGROUPS 1")
    e.execute(f"CREATE USER alice PASS '{PASSWORD}'")
    e.execute("CREATE USER bob PASS 'bobs''pw'")
    return e


def names(e: Engine) -> list[str]:
    return [row[0] for row in e.execute("SHOW USERS").rows]


def test_sql_statements_and_show_users(tmp_path: Path):
    e = make(tmp_path)
    shown = e.execute("SHOW USERS")
    assert [c[0] for c in shown.columns] == ["name", "super", "enable", "sysinfo", "createdb", "create_time"]
    assert [r[:5] for r in shown.rows] == [["alice", 0, 1, 1, 0], ["bob", 0, 1, 1, 0]]
    assert e.users.verify_password("bob", "bobs'pw") and e.users.verify_password("alice", PASSWORD)
    assert set(e.users.get("alice").scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    e.execute("ALTER USER alice PASS 'new-one'")
    assert e.users.verify_password("alice", "new-one") and not e.users.verify_password("alice", PASSWORD)
    e.execute("DROP USER bob")
    assert names(e) == ["alice"] and not e.users.verify_password("bob", "bobs'pw")
    e.execute("CREATE USER `Carol` PASS 'x'")  # back-quoted names keep their case, as other identifiers
    assert names(e) == ["Carol", "alice"]
    e.close()
    again = Engine.open(tmp_path)
    assert names(again) == ["Carol", "alice"] and again.users.verify_password("alice", "new-one")
    again.close()


def test_refusals(tmp_path: Path):
    e = make(tmp_path)
    with pytest.raises(UserAlreadyExists):
        e.execute("CREATE USER alice PASS 'again'")
    for sql in ("ALTER USER nobody PASS 'x'", "DROP USER nobody"):
        with pytest.raises(UserNotFound):
            e.execute(sql)
    for sql in ("CREATE USER dave PASS ''", "CREATE USER dave PASS 'tab\there'", f"CREATE USER `{'x' * 65}` PASS 'x'",
                "CREATE USER `a:b` PASS 'x'"):
        with pytest.raises(InvalidValue):
            e.execute(sql)
    with pytest.raises(SqlSyntaxError):
        e.execute("CREATE USER dave PASS unquoted")
    e.users.ensure_root("rootpw", 0)
    with pytest.raises(InvalidValue, match="root"):
        e.execute("DROP USER root")
    assert names(e) == ["alice", "bob", "root"]
    e.close()


def test_no_secret_is_stored_or_shown(tmp_path: Path):
    e = make(tmp_path)
    log = (tmp_path / "catalog.log").read_bytes()
    assert PASSWORD.encode() not in log and b"bobs" not in log
    shown = repr(e.execute("SHOW USERS")) + repr(e.users.get("alice"))
    assert PASSWORD not in shown and "stored_key" not in shown
    for user in e.catalog.users.values():
        for credential in user.scram.values():
            assert base64.b64encode(credential.stored_key) not in repr(e.execute("SHOW USERS")).encode()
    e.close()


def test_root_bootstrap(tmp_path: Path):
    e = Engine.open(tmp_path)
    assert e.users.ensure_root("given", 1) is None and e.users.verify_password("root", "given")
    assert e.users.get("root").super
    assert e.users.ensure_root("ignored", 2) is None and e.users.verify_password("root", "given")  # never changed
    e.close()
    other = Engine.open(tmp_path / "other")
    generated = other.users.ensure_root(None, 1)
    assert generated and len(generated) >= 20 and other.users.verify_password("root", generated)
    assert other.users.ensure_root(None, 2) is None
    assert other.execute("SHOW USERS").rows[0][:2] == ["root", 1]
    other.close()


def _upsert(user: str, mechanism: str | None, password: str = "pw", iterations: int = 4096) -> CredentialChange:
    salt = b"NaCl" + user.encode()
    salted = credential_from_password("SCRAM-SHA-256", password, salt, iterations)  # any bytes will do as the key
    return CredentialChange(user, mechanism, True, iterations, salt, salted.stored_key)


def test_kip554_alter_and_describe(tmp_path: Path):
    e = make(tmp_path)
    results = e.users.alter_scram([
        _upsert("kafka", "SCRAM-SHA-512", iterations=8192),
        CredentialChange("alice", "SCRAM-SHA-256", False),
        _upsert("few", "SCRAM-SHA-256", iterations=4095),
        _upsert("many", "SCRAM-SHA-256", iterations=16385),
        _upsert("odd", None),
        _upsert("twice", "SCRAM-SHA-256"), _upsert("twice", "SCRAM-SHA-256"),
        CredentialChange("nobody", "SCRAM-SHA-256", False),
        _upsert("", "SCRAM-SHA-256"),
        CredentialChange("empty", "SCRAM-SHA-256", True, 4096, b"", b""),
        # all of a user's changes or none: the deletion cannot be done, so the upsertion is not kept either
        _upsert("bob", "SCRAM-SHA-256", password="other"), CredentialChange("bob", "SCRAM-SHA-256", False),
    ], 5)
    assert results == [
        ("kafka", None, ""), ("alice", None, ""),
        ("few", "UNACCEPTABLE_CREDENTIAL", "Too few iterations"),
        ("many", "UNACCEPTABLE_CREDENTIAL", "Too many iterations"),
        ("odd", "UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism"),
        ("twice", "DUPLICATE_RESOURCE", "A user credential cannot be altered twice in the same request"),
        ("nobody", "RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist"),
        ("", "UNACCEPTABLE_CREDENTIAL", "Username must not be empty"),
        ("empty", "UNACCEPTABLE_CREDENTIAL", "The salt and the salted password must not be empty"),
        ("bob", "DUPLICATE_RESOURCE", "A user credential cannot be altered twice in the same request"),
    ]
    assert names(e) == ["alice", "bob", "kafka"]
    assert e.users.describe_scram(None) == [("alice", None, "", [("SCRAM-SHA-512", 4096)]),
                                            ("bob", None, "", [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)]),
                                            ("kafka", None, "", [("SCRAM-SHA-512", 8192)])]
    assert e.users.describe_scram(["kafka", "ghost", "bob", "bob"]) == [
        ("kafka", None, "", [("SCRAM-SHA-512", 8192)]),
        ("ghost", "RESOURCE_NOT_FOUND", "Attempt to describe a user credential that does not exist", []),
        ("bob", "DUPLICATE_RESOURCE", "Cannot describe SCRAM credentials for the same user twice in a single request",
         []),
    ]
    # a SQL user's password works for PLAIN whichever credential is left; deleting the last one drops the user
    assert e.users.verify_password("alice", PASSWORD)
    assert e.users.alter_scram([CredentialChange("alice", "SCRAM-SHA-512", False)], 6) == [("alice", None, "")]
    assert names(e) == ["bob", "kafka"]
    e.users.ensure_root("r", 0)
    assert e.users.alter_scram([CredentialChange("root", "SCRAM-SHA-256", False),
                                CredentialChange("root", "SCRAM-SHA-512", False)], 7)[0][1] == "UNACCEPTABLE_CREDENTIAL"
    e.close()
    again = Engine.open(tmp_path)
    assert again.users.describe_scram(["kafka"]) == [("kafka", None, "", [("SCRAM-SHA-512", 8192)])]
    again.close()


def _user_lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if b"_user" in line]


def test_a_torn_user_record_is_dropped_and_the_rest_kept(tmp_path: Path):
    make(tmp_path).close()
    path = tmp_path / "catalog.log"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # bob's record, torn by a crash while it was appended
    e = Engine.open(tmp_path)
    assert names(e) == ["alice"] and "d" in e.catalog.databases and e.damage() == []
    e.close()


def test_a_flipped_byte_in_a_user_record_loses_that_user_only(tmp_path: Path):
    make(tmp_path).close()
    path = tmp_path / "catalog.log"
    data = bytearray(path.read_bytes())
    pos = data.index(_user_lines(path)[0]) + 30  # inside alice's record
    data[pos] ^= 0x20
    path.write_bytes(bytes(data))
    e = Engine.open(tmp_path)
    assert names(e) == ["bob"] and "d" in e.catalog.databases
    [damage] = e.damage()
    assert damage.file == "catalog.log" and "checksum" in damage.reason and damage.action == "skipped"
    e.execute("CREATE USER alice PASS 'again'")
    e.close()
    again = Engine.open(tmp_path)  # reported once, and alice is back
    assert again.damage() == [] and names(again) == ["alice", "bob"]
    again.close()


@pytest.mark.parametrize("record", [
    {"op": "put_user", "name": "x", "created_ms": 0, "super": False, "scram": {}},
    {"op": "put_user", "name": "x", "created_ms": 0, "super": False, "scram": {"MD5": {}}},
    {"op": "put_user", "name": "x", "created_ms": 0, "super": "yes", "scram": {"SCRAM-SHA-256": {}}},
    {"op": "put_user", "name": "x", "created_ms": 0, "super": False,
     "scram": {"SCRAM-SHA-256": {"salt": "!!", "iterations": 4096, "stored_key": "", "server_key": ""}}},
    {"op": "put_user", "name": "x", "created_ms": 0, "super": False,
     "scram": {"SCRAM-SHA-256": {"salt": "", "iterations": True, "stored_key": "", "server_key": ""}}},
    {"op": "put_user", "name": "", "created_ms": 0, "super": False, "scram": {}},
    {"op": "drop_user", "name": "never_created"},
])
def test_user_records_that_cannot_be_applied_are_skipped_and_reported(tmp_path: Path, record: dict):
    make(tmp_path).close()
    with (tmp_path / "catalog.log").open("ab") as f:
        f.write(lines.encode(record))
    e = Engine.open(tmp_path)
    assert names(e) == ["alice", "bob"] and len(e.damage()) == 1 and "cannot be applied" in e.damage()[0].reason
    e.close()


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_refused_user_write_changes_nothing(tmp_path: Path, op: str, kind: str):
    e = make(tmp_path)
    path = tmp_path / "catalog.log"
    before, size = dict(e.catalog.users), path.stat().st_size
    faults = Faults()
    with faults.active():
        for change in (lambda: e.execute("CREATE USER carol PASS 'x'"), lambda: e.execute("ALTER USER alice PASS 'y'"),
                       lambda: e.execute("DROP USER bob"), lambda: e.users.ensure_root(None, 0)):
            refused(faults, op, kind, change)
            assert e.catalog.users == before and path.stat().st_size == size
        faults.fail_kind(op, kind)
        assert e.users.alter_scram([_upsert("kafka", "SCRAM-SHA-512")], 0)[0][1] == "KAFKA_STORAGE_ERROR"
        assert e.catalog.users == before
        faults.clear()
        e.execute("CREATE USER carol PASS 'x'")  # the disk has room again
    e.close()
    damage = DamageLog(tmp_path)
    cat = Catalog.open(path, damage)
    assert sorted(cat.users) == ["alice", "bob", "carol"] and damage.records == []


def test_unknown_names_get_a_mock_credential_that_survives_restarts(tmp_path: Path):
    e = make(tmp_path)
    e.users.alter_scram([_upsert("carol", "SCRAM-SHA-512", iterations=16384)], 1)  # carol: SCRAM-SHA-512 only
    alice, known = e.users.answer_credential("alice", "SCRAM-SHA-512")
    assert known and alice == e.users.credential("alice", "SCRAM-SHA-512")
    assert e.users.answer_credential("carol") == (e.users.credential("carol", "SCRAM-SHA-512"), True)  # PLAIN's
    mocks = {name: e.users.answer_credential(name, "SCRAM-SHA-256") for name in ("ghost", "carol", "nobody")}
    assert all(not known for _, known in mocks.values())  # carol has no SCRAM-SHA-256 credential: a mock too
    assert not e.users.verify_password("ghost", "pw") and e.users.verify_password("alice", PASSWORD)
    e.close()
    again = Engine.open(tmp_path)
    assert {name: again.users.answer_credential(name, "SCRAM-SHA-256") for name in mocks} == mocks
    assert again.damage() == []
    again.close()


def test_a_damaged_users_key_is_reported_and_replaced(tmp_path: Path):
    e = make(tmp_path)
    ghost = e.users.answer_credential("ghost", "SCRAM-SHA-256")
    e.close()
    key = tmp_path / "users.key"
    key.write_bytes(key.read_bytes().replace(b"mock_key", b"mock_kez"))
    again = Engine.open(tmp_path)
    [damage] = again.damage()
    assert damage.file == "users.key" and damage.action == "reset"
    replaced = again.users.answer_credential("ghost", "SCRAM-SHA-256")
    assert replaced[0].salt != ghost[0].salt and not replaced[1]
    again.close()
    third = Engine.open(tmp_path)
    assert third.users.answer_credential("ghost", "SCRAM-SHA-256") == replaced and third.damage() == []
    third.close()
