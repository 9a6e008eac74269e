"""HTTP Basic auth's checks, without a server: header parsing; failed logins slowed down per (peer, user) with a
growing, capped wait that a success resets (the waits asked of ``asyncio.sleep`` are recorded, not timed); the
password checker's memory of verified passwords, void once the credential changes."""

from __future__ import annotations

import base64

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from walgate.gateway import http_auth
from walgate.gateway.http_auth import BasicAuth
from walgate.gateway.passwords import PasswordChecker
from walgate.security.scram import ScramCredential, credential_from_password, mock_credential

CREDENTIAL = credential_from_password("SCRAM-SHA-256", "right")


def answer(credentials: dict[str, ScramCredential], user: str) -> tuple[ScramCredential, bool]:
    """What :meth:`walgate.storage.users.Users.answer_credential` gives for ``credentials`` (by user)."""
    real = credentials.get(user)
    if real is None:
        return mock_credential(b"k" * 32, user, [{c.mechanism: c} for c in credentials.values()]), False
    return real, True


async def lookup(user: str) -> tuple[ScramCredential, bool]:
    return answer({"alice": CREDENTIAL}, user)


def request(header: str | None, peer: str = "10.0.0.1") -> web.Request:
    headers = {"Authorization": header} if header is not None else {}
    req = make_mocked_request("GET", "/rest/sql", headers=headers)
    return req.clone(remote=peer)


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        asked.append(round(seconds, 1))

    monkeypatch.setattr(http_auth.asyncio, "sleep", sleep)
    monkeypatch.setattr(http_auth.time, "monotonic", lambda: 1000.0)  # the clock stands still: every wait is whole
    return asked


async def test_headers_that_are_not_valid_basic_credentials_are_refused(waits: list[float]) -> None:
    auth = BasicAuth(PasswordChecker(lookup))
    for header in (None, "", "Bearer x", "Basic !!!", "Basic " + base64.b64encode(b"no-colon").decode(),
                   "Basic " + base64.b64encode(b":pw").decode(), "Basic " + base64.b64encode(b"\xff:x").decode()):
        assert await auth.principal(request(header)) is None
    assert await auth.principal(request(basic("alice", "right"))) == "User:alice"
    assert await auth.principal(request("basic " + basic("alice", "right")[6:])) == "User:alice"  # any case


async def test_failed_logins_wait_longer_each_time_per_peer_and_user(waits: list[float]) -> None:
    auth = BasicAuth(PasswordChecker(lookup))
    for _ in range(8):
        assert await auth.principal(request(basic("alice", "wrong"))) is None
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0]  # before the 2nd..8th attempt; capped at 5 s
    waits.clear()
    assert await auth.principal(request(basic("alice", "right"), peer="10.0.0.2")) == "User:alice"  # another peer
    assert await auth.principal(request(basic("nobody", "x"))) is None  # another user name
    assert waits == []
    assert await auth.principal(request(basic("alice", "right"))) == "User:alice"  # waits, then succeeds and resets
    assert await auth.principal(request(basic("alice", "wrong"))) is None
    assert waits == [5.0]


async def test_a_verified_password_skips_the_pbkdf2_until_the_credential_changes(monkeypatch: pytest.MonkeyPatch):
    from walgate.gateway import passwords

    current = {"alice": CREDENTIAL}
    computed: list[str] = []
    real = passwords.verify_password

    def counting(credential: ScramCredential, password: str) -> bool:
        computed.append(password)
        return real(credential, password)

    monkeypatch.setattr(passwords, "verify_password", counting)

    async def changing_lookup(user: str) -> tuple[ScramCredential, bool]:
        return answer(current, user)

    checker = PasswordChecker(changing_lookup)
    assert await checker.check("alice", "right") and await checker.check("alice", "right")
    assert computed == ["right"]
    assert not await checker.check("alice", "wrong") and computed == ["right", "wrong"]
    current["alice"] = credential_from_password("SCRAM-SHA-256", "changed")  # ALTER USER: the remembered one is void
    assert not await checker.check("alice", "right") and await checker.check("alice", "changed")
    assert not await checker.check("bob", "right")  # an unknown user costs a PBKDF2 too
    assert computed == ["right", "wrong", "right", "changed", "right"]


async def test_the_pairs_forgotten_first_are_the_least_failed(waits: list[float],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_auth, "_MAX_TRACKED", 3)
    auth = BasicAuth(PasswordChecker(lookup))
    for _ in range(3):
        assert await auth.principal(request(basic("alice", "wrong"))) is None
    assert await auth.principal(request(basic("bob", "x"))) is None
    assert await auth.principal(request(basic("bob", "x"))) is None  # bob: 2 failures
    for name in ("c", "d", "e", "f"):  # one failure each: each forgets the one before it
        assert await auth.principal(request(basic(name, "x"))) is None
    waits.clear()
    assert await auth.principal(request(basic("alice", "right"))) == "User:alice"
    assert await auth.principal(request(basic("bob", "x"))) is None
    assert await auth.principal(request(basic("e", "x"))) is None
    assert waits == [0.4, 0.2]  # alice's 3 and bob's 2 failures are remembered, e's one was forgotten


async def test_a_principal_another_node_vouches_for_must_be_a_user_here() -> None:
    """A node that authenticates every request accepts a forwarded caller only when it names a user of the
    cluster's store: never ANONYMOUS (a node without http.auth in front of it), nor a user since dropped."""
    auth = BasicAuth(PasswordChecker(lookup))
    assert await auth.is_user("User:alice")
    for principal in ("User:ANONYMOUS", "User:bob", "User:", "alice", "Group:alice"):
        assert not await auth.is_user(principal), principal
