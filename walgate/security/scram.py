"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677): stored credentials, the server side of an exchange and the
client side a cluster node authenticates to another with (:class:`ScramClient`).

A credential is what the server keeps of a password, never the password: ``salt``, ``iterations`` (>= 4096, Kafka's
minimum; <= 16384, Kafka's maximum for credentials set through AlterUserScramCredentials), ``StoredKey =
H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey = HMAC(SaltedPassword, "Server Key")`` with ``SaltedPassword
= PBKDF2-HMAC-H(password, salt, iterations)``. A password can be checked against a credential (PLAIN, HTTP Basic) by
recomputing StoredKey from it (:func:`verify_password`).

The exchange, as Kafka's SCRAM server runs it (``ScramSaslServer``), in :class:`ScramExchange`:

1. client-first ``gs2-header client-first-bare`` with ``gs2-header`` = ``n,,`` or ``y,,`` (no channel binding; an
   ``a=authzid`` must name the user itself) and ``client-first-bare`` = ``n=user,r=nonce[,extensions]``. Kafka's
   only extension, ``tokenauth`` (delegation tokens), is refused; others are ignored.
2. the server answers ``r=client-nonce+server-nonce,s=salt,i=iterations``. An unknown user (or one without a
   credential of the mechanism) is answered with a mock credential (RFC 5802 section 5.1's advice,
   :func:`mock_credential`) and fails at step 3 like a wrong password: the answers do not tell whether a user
   exists.
3. client-final ``c=base64(gs2-header),r=nonce,p=proof``: the nonce must be the one of step 2 (or, from librdkafka
   before 2.6.1, which sends the client nonce twice, client-nonce + that nonce: accepted as Kafka 3.8.1-3.9 accept
   it, the server's fresh nonce is still required), the proof is checked against StoredKey in constant time; the
   server answers ``v=ServerSignature``.

Any malformed message or failed check raises :class:`ScramError`, whose message never holds a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "MECHANISMS", "MIN_ITERATIONS", "MAX_ITERATIONS", "ScramClient", "ScramCredential", "ScramError", "ScramExchange",
    "credential_from_password", "credential_from_salted_password", "mock_credential", "password_credential",
    "verify_password", "mechanism_name", "mechanism_type",
]

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
_DEFAULT_ITERATIONS = 4096
_SALT_BYTES = 16
_NONCE_BYTES = 24

_HASHES: dict[str, Callable[..., hashlib._Hash]] = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MECHANISMS: tuple[str, ...] = tuple(_HASHES)
"""The SCRAM mechanisms, by their SASL names."""

_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}  # Kafka's ScramMechanism types (0: UNKNOWN)
# the alphabets a mock salt is drawn from: the first that holds every byte of its model's salt (Kafka's Java tools
# make salts of base-36 digits, walgate and librdkafka random bytes)
_SALT_ALPHABETS = (b"0123456789abcdefghijklmnopqrstuvwxyz",
                   b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
                   bytes(range(0x21, 0x7F)), bytes(range(256)))


class ScramError(Exception):
    """A SCRAM message is malformed or a check failed; the message names no secret."""


def mechanism_type(name: str) -> int:
    """Kafka's mechanism type (1: SCRAM-SHA-256, 2: SCRAM-SHA-512) of a SASL mechanism name."""
    return _TYPES[name]


def mechanism_name(kind: int) -> str | None:
    """The SASL name of Kafka's mechanism type ``kind`` (None: unknown)."""
    return next((name for name, t in _TYPES.items() if t == kind), None)


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores of one password for one mechanism (``repr`` hides the keys)."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)


def _hmac(key: bytes, msg: bytes, mechanism: str) -> bytes:
    return hmac.new(key, msg, _HASHES[mechanism]).digest()


def _salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    name = _HASHES[mechanism]().name
    # RFC 5802 asks for SASLprep; NFKC is its normalisation step (what Kafka's and librdkafka's clients send is the
    # UTF-8 of the password as given, which NFKC leaves unchanged for the ASCII passwords nearly everyone uses)
    return hashlib.pbkdf2_hmac(name, unicodedata.normalize("NFKC", password).encode(), salt, iterations)


def credential_from_salted_password(mechanism: str, salted_password: bytes, salt: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential of a SaltedPassword a client computed (KIP-554's AlterUserScramCredentials)."""
    client_key = _hmac(salted_password, b"Client Key", mechanism)
    return ScramCredential(mechanism, salt, iterations, _HASHES[mechanism](client_key).digest(),
                           _hmac(salted_password, b"Server Key", mechanism))


def credential_from_password(mechanism: str, password: str, salt: bytes | None = None,
                             iterations: int = _DEFAULT_ITERATIONS) -> ScramCredential:
    """A new credential of ``password`` (a random salt unless given)."""
    if salt is None:
        salt = secrets.token_bytes(_SALT_BYTES)
    return credential_from_salted_password(mechanism, _salted_password(mechanism, password, salt, iterations), salt,
                                           iterations)


def password_credential(credentials: Mapping[str, ScramCredential]) -> ScramCredential:
    """The one of a user's (non-empty) ``credentials`` that passwords (PLAIN, HTTP Basic) are checked against: its
    SCRAM-SHA-256 one, else its other."""
    return credentials.get("SCRAM-SHA-256") or next(iter(credentials.values()))


def mock_credential(key: bytes, name: str, models: Sequence[Mapping[str, ScramCredential]],
                    mechanism: str | None = None) -> ScramCredential:
    """The credential a ``name`` without one is answered with (RFC 5802 section 5.1), so that a census of answers
    cannot tell it from the real users, whose credentials (per user, by mechanism) are ``models``.

    Keyed by ``key`` (a secret) and ``name`` only, so it is the same at every request (and across restarts when
    ``key`` is kept). One model user is picked per name, by jump consistent hashing (Lamping and Veach) of
    HMAC(key, name) over ``models``: the users are drawn evenly, and adding an n-th user at the end moves only a 1/n
    share of the names. The mock mirrors that user's credential of ``mechanism`` (None: the one passwords are
    checked against, :func:`password_credential`; the user's password credential when it has none of
    ``mechanism``): its iterations, a salt of its salt's length drawn from the smallest of ``_SALT_ALPHABETS``
    holding its salt, and the mechanism. So the SCRAM answers and the PLAIN work for one name all follow one user,
    as a real user's follow its own credentials. The keys are HMAC output no password is known to match (callers
    fail the exchange anyway). Without models: 4096 iterations and 16 bytes of salt, as
    :func:`credential_from_password` makes them, for ``mechanism`` (None: SCRAM-SHA-256)."""
    seed = _hmac(key, name.encode("utf-8", "surrogatepass"), "SCRAM-SHA-256")
    if models:
        user = models[_jump(int.from_bytes(seed[:8], "big"), len(models))]
        model = (user.get(mechanism) if mechanism else None) or password_credential(user)
        mechanism = mechanism or model.mechanism
        iterations, length = model.iterations, len(model.salt)
        alphabet = next(a for a in _SALT_ALPHABETS if set(model.salt) <= set(a))
    else:
        mechanism = mechanism or "SCRAM-SHA-256"
        iterations, length, alphabet = _DEFAULT_ITERATIONS, _SALT_BYTES, _SALT_ALPHABETS[-1]
    seed = _hmac(seed, mechanism.encode(), "SCRAM-SHA-256")  # each mechanism its own salt, as a user's has
    size = _HASHES[mechanism]().digest_size
    return ScramCredential(mechanism, _drawn(seed, length, alphabet), iterations,
                           _hmac(seed, b"stored key", mechanism)[:size], _hmac(seed, b"server key", mechanism)[:size])


def _jump(key: int, buckets: int) -> int:
    """Jump consistent hash: the bucket in ``[0, buckets)`` of a 64-bit ``key``."""
    bucket, candidate = -1, 0
    while candidate < buckets:
        bucket = candidate
        key = (key * 2862933555777941757 + 1) % 2 ** 64
        candidate = int((bucket + 1) * (2 ** 31 / ((key >> 33) + 1)))
    return bucket


def _drawn(seed: bytes, length: int, alphabet: bytes) -> bytes:
    """``length`` bytes of ``alphabet``, each drawn evenly (by rejection) from an HMAC stream of ``seed``."""
    limit = 256 - 256 % len(alphabet)
    out = bytearray()
    block = 0
    while len(out) < length:
        block += 1
        stream = _hmac(seed, b"salt" + block.to_bytes(4, "big"), "SCRAM-SHA-256")
        out += bytes(alphabet[b % len(alphabet)] for b in stream if b < limit)
    return bytes(out[:length])


def verify_password(credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time comparison)."""
    again = credential_from_password(credential.mechanism, password, credential.salt, credential.iterations)
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def _unescape_name(raw: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is an error."""
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "=":
            code = raw[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise ScramError("invalid user name encoding")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


def _attributes(message: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError("malformed SCRAM message")
        out.append((part[0], part[2:]))
    return out


class ScramExchange:
    """The server side of one SCRAM exchange (see the module docstring): :meth:`client_first` gives the user name,
    :meth:`server_first` answers it, :meth:`client_final` checks the proof and gives the server-final message."""

    def __init__(self, mechanism: str, server_nonce: str | None = None) -> None:
        """``server_nonce``: the server's part of the nonce (random unless given: RFC test vectors)."""
        if mechanism not in _HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self.user = ""
        self._gs2_header = ""
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._client_nonce = ""
        self._credential: ScramCredential | None = None
        self._server_nonce = server_nonce or base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()

    def client_first(self, message: bytes) -> str:
        """Parse the client-first message; returns the user name it authenticates."""
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("the client-first message is not UTF-8") from None
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise ScramError("channel binding is not supported" if parts[0].startswith("p=") else
                             "malformed client-first message")
        authzid = parts[1]
        if authzid and not authzid.startswith("a="):
            raise ScramError("malformed client-first message")
        fields = parts[2].split(",")
        if len(fields) < 2 or not fields[0].startswith("n=") or not fields[1].startswith("r=") or len(fields[1]) < 3:
            raise ScramError("malformed client-first message")
        user = _unescape_name(fields[0][2:])
        if not user:
            raise ScramError("empty user name")
        if authzid and _unescape_name(authzid[2:]) != user:
            raise ScramError("the authorization id must be the user name")
        for extension in fields[2:]:
            if extension.startswith("tokenauth="):
                raise ScramError("delegation tokens (tokenauth) are not supported")
            if extension.startswith("m="):
                raise ScramError("mandatory SCRAM extensions are not supported")
        self.user = user
        self._gs2_header = parts[0] + "," + authzid + ","
        self._first_bare = parts[2]
        self._client_nonce = fields[1][2:]
        self._nonce = self._client_nonce + self._server_nonce
        return user

    def server_first(self, credential: ScramCredential, *, known: bool = True) -> bytes:
        """The server-first message for ``credential``: the user's, or with ``known`` False the mock one of an
        unknown user (:func:`mock_credential`; the exchange then fails at :meth:`client_final`, like a wrong
        password)."""
        if credential.mechanism != self.mechanism:
            raise ValueError(f"a {credential.mechanism} credential for a {self.mechanism} exchange")
        self._credential = credential if known else None
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def client_final(self, message: bytes) -> bytes:
        """Check the client-final message's proof; returns the server-final message (``v=...``)."""
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("the client-final message is not UTF-8") from None
        attributes = _attributes(text)
        if len(attributes) < 3 or [a[0] for a in attributes[:2]] != ["c", "r"] or attributes[-1][0] != "p":
            raise ScramError("malformed client-final message")
        if attributes[0][1] != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("the channel binding does not match the client-first message")
        nonce = attributes[1][1].encode()
        if not (hmac.compare_digest(nonce, self._nonce.encode()) or
                hmac.compare_digest(nonce, (self._client_nonce + self._nonce).encode())):
            raise ScramError("the nonce does not match")
        try:
            proof = base64.b64decode(attributes[-1][1], validate=True)
        except ValueError:
            raise ScramError("malformed client proof") from None
        credential = self._credential
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        if credential is None:
            raise ScramError("invalid credentials")
        signature = _hmac(credential.stored_key, auth_message, self.mechanism)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(_HASHES[self.mechanism](client_key).digest(), credential.stored_key):
            raise ScramError("invalid credentials")
        server_signature = _hmac(credential.server_key, auth_message, self.mechanism)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side of one SCRAM exchange for ``user`` with ``password`` (no channel binding, no authzid):
    :meth:`first` is the client-first message, :meth:`final` answers the server-first one, :meth:`check` verifies the
    server-final one (the server knew the credential). Raises :class:`ScramError` on a malformed or wrong answer."""

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        if mechanism not in _HASHES:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.mechanism = mechanism
        self._password = password
        self._nonce = base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()
        self._first_bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        fields = dict(_attributes(server_first.decode("utf-8", "replace")))
        try:
            nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"], validate=True), int(fields["i"])
        except (KeyError, ValueError):
            raise ScramError("malformed server-first message") from None
        if not nonce.startswith(self._nonce) or not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError("the server-first message's nonce or iterations are not acceptable")
        salted = _salted_password(self.mechanism, self._password, salt, iterations)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._first_bare},{server_first.decode()},{without_proof}".encode()
        client_key = _hmac(salted, b"Client Key", self.mechanism)
        signature = _hmac(_HASHES[self.mechanism](client_key).digest(), auth_message, self.mechanism)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = _hmac(_hmac(salted, b"Server Key", self.mechanism), auth_message, self.mechanism)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        expected = b"v=" + base64.b64encode(self._server_signature)
        if not self._server_signature or not hmac.compare_digest(server_final, expected):
            raise ScramError("the server's signature does not match")
