"""Users: one durable store of SCRAM credentials, seen from SQL (TDengine) and from Kafka (KIP-554).

A user is a name, its creation time, whether it is a super user (``root``, TDengine's first administrator, is the
only one made here; Kafka's ``super.users`` setting adds principals in the gateway) and at most one
:class:`~walgate.security.scram.ScramCredential` per SCRAM mechanism. The password itself is never kept: SQL
``CREATE USER`` / ``ALTER USER ... PASS`` store a credential for both SCRAM-SHA-256 and SCRAM-SHA-512, and PLAIN /
HTTP Basic passwords are checked by recomputing a stored credential from them (:meth:`Users.verify_password`).
A user whose last credential is deleted (AlterUserScramCredentials) no longer exists, as in Kafka.

A name without a credential gets a mock one (:meth:`Users.answer_credential`,
:func:`walgate.security.scram.mock_credential` keyed by the data dir's ``users.key``,
:mod:`walgate.storage.users_key`), modelled on the real users' credentials, so that no answer tells whether a user
exists. Both ways do the same work: the models are gathered and the mock made for known names too.

Durability: users are records of the catalog log (:mod:`walgate.storage.catalog`, which dispatches the ops in
:data:`USER_OPS` here), so they share its crash and damage rules: a change is applied in memory only once its record
is fsynced, a damaged record is quarantined and skipped, never fatal. Records (binary values in base64):

* ``{"op": "put_user", "name", "created_ms", "super", "scram": {mechanism: {"salt", "iterations", "stored_key",
  "server_key"}}}``: the whole user, created or replaced;
* ``{"op": "drop_user", "name"}``.

Names: 1..64 characters, none of them a control character or ``:`` (HTTP Basic's separator). Passwords given in SQL:
1..128 characters, no control character.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from walgate.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_password,
    credential_from_salted_password,
    mock_credential,
    password_credential,
    verify_password,
)
from walgate.storage.clock import SYSTEM_CLOCK, Clock
from walgate.storage.errors import AlreadyExists, InvalidValue, NotFound, StorageError
from walgate.storage.result import Result, affected
from walgate.storage.sql import ast
from walgate.storage.values import format_timestamp

if TYPE_CHECKING:
    from walgate.storage.catalog import Catalog  # which imports this module

__all__ = [
    "ROOT", "USER_OPS", "CredentialChange", "User", "UserAlreadyExists", "UserNotFound", "Users", "apply_user_record",
    "user_records", "validate_user_name",
]

ROOT = "root"
USER_OPS = ("put_user", "drop_user")
_MAX_NAME = 64
_MAX_PASSWORD = 128
_GENERATED_PASSWORD_BYTES = 18  # 24 characters of URL-safe base64


class UserAlreadyExists(AlreadyExists):
    code = 0x0350  # TSDB_CODE_MND_USER_ALREADY_EXIST


class UserNotFound(NotFound):
    code = 0x0351  # TSDB_CODE_MND_USER_NOT_EXIST


@dataclass(frozen=True)
class User:
    name: str
    created_ms: int
    super: bool = False
    scram: Mapping[str, ScramCredential] = field(default_factory=dict, repr=False)


def validate_user_name(name: str) -> None:
    """Raise :class:`InvalidValue` unless ``name`` can name a user (module docstring)."""
    if not 0 < len(name) <= _MAX_NAME or any(c == ":" or not c.isprintable() for c in name):
        raise InvalidValue(f"Invalid user name: 1 to {_MAX_NAME} printable characters, no ':'")


def _validate_password(password: str) -> None:
    if not 0 < len(password) <= _MAX_PASSWORD or any(not c.isprintable() for c in password):
        raise InvalidValue(f"Invalid password: 1 to {_MAX_PASSWORD} printable characters")


# ------------------------------------------------------------------ records


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(raw: Any, what: str) -> bytes:
    if not isinstance(raw, str):
        raise ValueError(f"{what} is {raw!r}")
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error:
        raise ValueError(f"{what} is not base64") from None


def _put_record(user: User) -> dict[str, Any]:
    return {"op": "put_user", "name": user.name, "created_ms": user.created_ms, "super": user.super,
            "scram": {m: {"salt": _b64(c.salt), "iterations": c.iterations, "stored_key": _b64(c.stored_key),
                          "server_key": _b64(c.server_key)} for m, c in user.scram.items()}}


def _credential(mechanism: str, raw: Any) -> ScramCredential:
    if mechanism not in MECHANISMS or not isinstance(raw, dict):
        raise ValueError(f"bad credential of mechanism {mechanism!r}")
    iterations = raw.get("iterations")
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise ValueError(f"iterations is {iterations!r}")
    return ScramCredential(mechanism, _unb64(raw.get("salt"), "salt"), iterations,
                           _unb64(raw.get("stored_key"), "stored_key"), _unb64(raw.get("server_key"), "server_key"))


def apply_user_record(users: dict[str, User], r: Mapping[str, Any]) -> None:
    """Apply one ``put_user`` / ``drop_user`` record to ``users``; raises ``ValueError`` (changing nothing) when it
    cannot be applied."""
    name = r.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"user name is {name!r}")
    if r.get("op") == "drop_user":
        if users.pop(name, None) is None:
            raise ValueError(f"drop of an unknown user {name}")
        return
    created, is_super, raw = r.get("created_ms"), r.get("super"), r.get("scram")
    if not isinstance(created, int) or isinstance(created, bool) or not isinstance(is_super, bool):
        raise ValueError(f"user {name}: created_ms {created!r}, super {is_super!r}")
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"user {name}: no credentials")
    users[name] = User(name, created, is_super, {m: _credential(m, c) for m, c in raw.items()})


def user_records(users: Mapping[str, User]) -> list[dict[str, Any]]:
    """Records that rebuild ``users``."""
    return [_put_record(u) for u in users.values()]


# ------------------------------------------------------------------ the store


@dataclass(frozen=True)
class CredentialChange:
    """One KIP-554 change of ``user``'s credential for ``mechanism`` (None: a mechanism type walgate does not know):
    an upsertion (``iterations``, ``salt``, ``salted_password``) or, with ``upsertion`` False, a deletion."""

    user: str
    mechanism: str | None
    upsertion: bool
    iterations: int = 0
    salt: bytes = b""
    salted_password: bytes = field(default=b"", repr=False)


class _Refused(Exception):
    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


class Users:
    """The users of the catalog (called on the storage thread); SQL statements and Kafka's SCRAM APIs."""

    def __init__(self, catalog: Catalog, mock_key: bytes | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        """``mock_key``: the secret of mock credentials (:func:`~walgate.storage.users_key.load_users_key`; None: a
        random one, for this object's life); ``clock``: CREATE USER's creation time."""
        self.catalog = catalog
        self._mock_key = secrets.token_bytes(32) if mock_key is None else mock_key
        self.clock = clock

    @property
    def all(self) -> Mapping[str, User]:
        return self.catalog.users

    def get(self, name: str) -> User | None:
        """The user named ``name`` (None: none)."""
        return self.all.get(name)

    def credential(self, name: str, mechanism: str) -> ScramCredential | None:
        """``name``'s credential for ``mechanism`` (None: no such user or credential)."""
        user = self.all.get(name)
        return None if user is None else user.scram.get(mechanism)

    def answer_credential(self, name: str, mechanism: str | None = None) -> tuple[ScramCredential, bool]:
        """(``name``'s credential for ``mechanism``, True), or (its mock credential, False) when it has none. With
        ``mechanism`` None: the credential passwords are checked against
        (:func:`~walgate.security.scram.password_credential`)."""
        users = self.all
        mock = mock_credential(self._mock_key, name, [u.scram for u in users.values()], mechanism)
        user = users.get(name)
        if user is None:
            return mock, False
        real = password_credential(user.scram) if mechanism is None else user.scram.get(mechanism)
        return (mock, False) if real is None else (real, True)

    def verify_password(self, name: str, password: str) -> bool:
        """Whether ``password`` is ``name``'s (False for an unknown user, after the same work as for a known one:
        the PBKDF2 of its mock credential)."""
        credential, known = self.answer_credential(name)
        return verify_password(credential, password) and known

    def _put(self, user: User) -> None:
        self.catalog.commit(_put_record(user))

    # -------------------------------------------------------------- SQL

    def create(self, name: str, password: str, now_ms: int, *, super_user: bool = False) -> User:
        """A new user with credentials of ``password`` for every SCRAM mechanism."""
        validate_user_name(name)
        _validate_password(password)
        if name in self.all:
            raise UserAlreadyExists(f"User already exists: {name}")
        user = User(name, now_ms, super_user, {m: credential_from_password(m, password) for m in MECHANISMS})
        self._put(user)
        return user

    def set_password(self, name: str, password: str) -> None:
        """Replace ``name``'s credentials by ones of ``password`` (every SCRAM mechanism)."""
        _validate_password(password)
        user = self._known(name)
        self._put(User(user.name, user.created_ms, user.super,
                       {m: credential_from_password(m, password) for m in MECHANISMS}))

    def drop(self, name: str) -> None:
        """Drop a user; ``root`` cannot be dropped (as in TDengine)."""
        self._known(name)
        if name == ROOT:
            raise InvalidValue("Cannot drop user root")
        self.catalog.commit({"op": "drop_user", "name": name})

    def ensure_root(self, password: str | None, now_ms: int) -> str | None:
        """Create ``root`` (super) if absent, with ``password`` or a generated one; returns the generated password
        (None: root existed, or ``password`` was given). An existing root is left as it is."""
        if ROOT in self.all:
            return None
        generated = None
        if not password:
            password = generated = secrets.token_urlsafe(_GENERATED_PASSWORD_BYTES)
        self.create(ROOT, password, now_ms, super_user=True)
        return generated

    def _known(self, name: str) -> User:
        user = self.all.get(name)
        if user is None:
            raise UserNotFound(f"User not exist: {name}")
        return user

    def create_statement(self, s: ast.CreateUser, db: str | None) -> Result:
        self.create(s.name, s.password, self.clock.time_ms())
        return affected(0)

    def alter_statement(self, s: ast.AlterUser, db: str | None) -> Result:
        self.set_password(s.name, s.password)
        return affected(0)

    def drop_statement(self, s: ast.DropUser, db: str | None) -> Result:
        self.drop(s.name)
        return affected(0)

    def show_statement(self, s: ast.ShowUsers, db: str | None) -> Result:
        """TDengine's SHOW USERS columns (no secret among them)."""
        cols = [("name", "VARCHAR", 64), ("super", "TINYINT", 1), ("enable", "TINYINT", 1), ("sysinfo", "TINYINT", 1),
                ("createdb", "TINYINT", 1), ("create_time", "TIMESTAMP", 8)]
        rows: list[list[Any]] = [[u.name, int(u.super), 1, 1, int(u.super), format_timestamp(u.created_ms, "ms")]
                                 for u in sorted(self.all.values(), key=lambda u: u.name)]
        return Result(cols, rows)

    # -------------------------------------------------------------- Kafka (KIP-554)

    def describe_scram(self, names: Iterable[str] | None) -> list[tuple[str, str | None, str, list[tuple[str, int]]]]:
        """DescribeUserScramCredentials: per user, (name, Kafka error name or None, message, [(mechanism,
        iterations)]); ``names`` None: every user."""
        if names is None:
            return [(u.name, None, "", _infos(u)) for u in sorted(self.all.values(), key=lambda u: u.name)]
        names = list(names)
        out: list[tuple[str, str | None, str, list[tuple[str, int]]]] = []
        for name in dict.fromkeys(names):
            user = self.all.get(name)
            if names.count(name) > 1:
                out.append((name, "DUPLICATE_RESOURCE",
                            "Cannot describe SCRAM credentials for the same user twice in a single request", []))
            elif user is None:
                out.append((name, "RESOURCE_NOT_FOUND", "Attempt to describe a user credential that does not exist",
                            []))
            else:
                out.append((name, None, "", _infos(user)))
        return out

    def alter_scram(self, changes: list[CredentialChange], now_ms: int) -> list[tuple[str, str | None, str]]:
        """AlterUserScramCredentials: apply each user's changes all together or not at all; per user (in order of
        first appearance), (name, Kafka error name or None, message)."""
        by_user: dict[str, list[CredentialChange]] = {}
        for change in changes:
            by_user.setdefault(change.user, []).append(change)
        out: list[tuple[str, str | None, str]] = []
        for name, mine in by_user.items():
            try:
                self._alter_one(name, mine, now_ms)
                out.append((name, None, ""))
            except _Refused as refused:
                out.append((name, refused.error, str(refused)))
            except StorageError as exc:
                out.append((name, "KAFKA_STORAGE_ERROR", exc.message))
        return out

    def _alter_one(self, name: str, changes: list[CredentialChange], now_ms: int) -> None:
        mechanisms = [c.mechanism for c in changes]
        if not name:
            raise _Refused("UNACCEPTABLE_CREDENTIAL", "Username must not be empty")
        if any(m is None for m in mechanisms):
            raise _Refused("UNSUPPORTED_SASL_MECHANISM", "Unknown SCRAM mechanism")
        if len(set(mechanisms)) != len(mechanisms):
            raise _Refused("DUPLICATE_RESOURCE", "A user credential cannot be altered twice in the same request")
        try:
            validate_user_name(name)
        except InvalidValue as exc:
            raise _Refused("UNACCEPTABLE_CREDENTIAL", exc.message) from None
        user = self.all.get(name)
        scram = dict(user.scram) if user is not None else {}
        for change in changes:
            assert change.mechanism is not None
            if not change.upsertion:
                if scram.pop(change.mechanism, None) is None:
                    raise _Refused("RESOURCE_NOT_FOUND", "Attempt to delete a user credential that does not exist")
                continue
            if change.iterations < MIN_ITERATIONS:
                raise _Refused("UNACCEPTABLE_CREDENTIAL", "Too few iterations")
            if change.iterations > MAX_ITERATIONS:
                raise _Refused("UNACCEPTABLE_CREDENTIAL", "Too many iterations")
            if not change.salt or not change.salted_password:
                raise _Refused("UNACCEPTABLE_CREDENTIAL", "The salt and the salted password must not be empty")
            scram[change.mechanism] = credential_from_salted_password(change.mechanism, change.salted_password,
                                                                      change.salt, change.iterations)
        if scram:
            self._put(User(name, user.created_ms if user else now_ms, user.super if user else False, scram))
        elif user is not None:
            if name == ROOT:
                raise _Refused("UNACCEPTABLE_CREDENTIAL", "The last credential of user root cannot be deleted")
            self.catalog.commit({"op": "drop_user", "name": name})


def _infos(user: User) -> list[tuple[str, int]]:
    return [(m, c.iterations) for m, c in sorted(user.scram.items())]
