"""Seeded, bounded fuzzing of every advertised (api key, version), and of the internal APIs only cluster nodes are
answered (WalFetch: a client is refused), against one real ``walgate serve``.

Each example is one request with a valid header and a body that is either a random valid request of that
version (hypothesis builds it from the schema and walgate's encoder writes it) or such a body mutated: random
bytes, a truncation, bit flips, a length or count field replaced by a huge or negative value, trailing garbage.
Half the Produce requests (acks -1, 1 or 0) write a real record batch (any codec) to the Kafka topic the server
was given or to a TDengine topic (values JSON rows, line protocol or bytes), its header fields set to extreme values (a negative length, count, ...; alone, cut after the header, before
or after an intact batch) or its bytes mutated, so the record decoders, the write path and what the metrics count
after it are fuzzed too.
It goes on a fresh connection, followed by a pipelined ApiVersions request. Every example must end in

* a well-formed response of that api key and version (its correlation id, then a body that decodes to the
  last byte), followed by the ApiVersions answer; or
* no response at all where Kafka gives none (Produce with acks=0), then the ApiVersions answer; or
* the connection closed by the server (a malformed request, as Kafka does); or
* for the APIs that may wait (Fetch, JoinGroup, SyncGroup), no answer yet after ``WAIT_S``: the peer goes away.

At the end the server still answers, its resident memory grew by less than ``RSS_GROWTH_MIB``, and its log has
no traceback and no ERROR line. The CI slice sends ``EXAMPLES`` requests per (api key, version), a few thousand
in all; ``WALGATE_FUZZ_LONG=1`` sends ``LONG_EXAMPLES`` per version (tens of thousands) with fresh randomness.

A second server has a SASL_PLAINTEXT listener with OAUTHBEARER only (a JWKS file with an EC key, no
``connections.max.reauth.ms``, so a session lasts the token's life). Each example signs a token with that key whose
``exp``, ``iat`` and ``nbf`` are huge, negative, fractional, non-finite or not numbers (and ``sub``, ``aud``,
``scope`` of any JSON type), and presents it on SaslAuthenticate v0-v2 or as a bare v0 token. Every example must end
in RFC 7628's challenge then a failure and a closed connection, or an authentication whose session lifetime is an
int64 of ms after which ApiVersions is answered, or a failure and a closed connection; the log has no traceback and
no ERROR line, and both refused and accepted tokens were seen. ``OAUTH_EXAMPLES`` (``LONG_OAUTH_EXAMPLES``).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import socket
import struct
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jwt.algorithms import ECAlgorithm

from livewalgate import free_port, running_walgate, walgate_env
from tests.gateway.test_kafka_bad_input import TIMEOUT, _header_v1, _parse_api_versions_v0
from tests.wire.wire_helpers import instances
from walgate.gateway.kafka.handlers import advertised, internal
from walgate.wire import encode_batch
from walgate.wire.compression import CODECS
from walgate.wire.protocol import (
    encode_request,
    parse_request_header,
    request_class,
    response_class,
    response_header_version,
)
from walgate.wire.serial import decoder, fields_of, read_uvarint

LONG = os.environ.get("WALGATE_FUZZ_LONG") == "1"
EXAMPLES = 30
TOPIC = "0"
ROWS_TOPIC = "rows"
_ROW_VALUES = [b'{"ts": 1700000000000, "v": 1, "loc": "a"}', b'{"tbname": "d1", "ts": 1700000000000, "v": 2}',
               b"meters,loc=a v=3i 1700000000000000000", b"{", b"[1]", b"meters v=", b'{"tbname": 7}']
LONG_EXAMPLES = 200
WAIT_S = 2.0
RSS_GROWTH_MIB = 256
MAY_WAIT = {1, 11, 14}  # Fetch (max_wait_ms), JoinGroup and SyncGroup (parked until the group moves)
NO_ANSWER_OK = {0}  # Produce with acks=0
FUZZ_CID = 0x3F00_0001
PROBE_CID = 0x3F00_0002
VERSIONS = [(key, v) for key, (low, high) in sorted((advertised() | internal()).items()) for v in range(low, high + 1)]

OUTCOMES: Counter[str] = Counter()

_HUGE_INT32 = [0x7FFF_FFFF, 0xFFFF_FFFF, 0x8000_0000, 0x00FF_FFFF, 0xFFFF_FFFE]
_HUGE_INT16 = [0x7FFF, 0xFFFF, 0x8000, 0xFFFE]
_HUGE_UVARINT = [b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x10", b"\xfe\xff\xff\xff\x0f"]


def _fuzz_settings(examples: int, long_examples: int) -> settings:
    """``examples`` seeded examples, or ``long_examples`` with fresh randomness under WALGATE_FUZZ_LONG=1."""
    return settings(
        max_examples=long_examples if LONG else examples,
        derandomize=not LONG,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    )


def _assert_clean(log: str) -> None:
    """No traceback and no ERROR line in a server's log."""
    assert "Traceback" not in log, log[log.index("Traceback") - 2000: log.index("Traceback") + 3000]
    errors = [line for line in log.splitlines() if re.search(r"\d ERROR ", line)]
    assert not errors, "\n".join(errors[:50])


@st.composite
def _mutated(draw: Any, body: bytes) -> bytes:
    kind = draw(st.sampled_from(["valid", "random", "truncate", "flip", "huge", "trailing"]))
    if kind == "valid" or (not body and kind in ("truncate", "flip", "huge")):
        return body
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "truncate":
        return body[: draw(st.integers(0, len(body) - 1))]
    if kind == "trailing":
        return body + draw(st.binary(min_size=1, max_size=64))
    data = bytearray(body)
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            bit = draw(st.integers(0, len(data) * 8 - 1))
            data[bit // 8] ^= 1 << (bit % 8)
        return bytes(data)
    pos = draw(st.integers(0, len(data)))
    width = draw(st.sampled_from(["int32", "int16", "uvarint"]))
    if width == "int32":
        value = draw(st.sampled_from(_HUGE_INT32)).to_bytes(4, "big")
    elif width == "int16":
        value = draw(st.sampled_from(_HUGE_INT16)).to_bytes(2, "big")
    else:
        value = draw(st.sampled_from(_HUGE_UVARINT))
    if draw(st.booleans()):
        data[pos: pos + len(value)] = value  # overwrite (a length, a count)
    else:
        data[pos:pos] = value  # insert
    return bytes(data)


def _entity(cls: type, name: str) -> type:
    entity = next(info.entity for info in fields_of(cls) if info.name == name)
    assert entity is not None
    return entity


# RecordBatch v2 header fields: (offset, struct format, extreme values besides the width's min, max, -1, 0, 1)
_BATCH_FIELDS: dict[str, tuple[int, str, list[int]]] = {
    "length": (8, ">i", [-12, -13, -49, -61, -100, 8, 48, 49]),  # -12: the walk that steps by 12 + length stalls
    "record_count": (57, ">i", [2, 5, 1000]),
    "last_offset_delta": (23, ">i", [2, 5]),
    "magic": (16, ">b", [0, 2, 3]),
    "attributes": (21, ">h", [0x10, 0x20, 0x30, 7]),
    "base_offset": (0, ">q", []),
    "partition_leader_epoch": (12, ">i", []),
    "crc": (17, ">I", []),
    "first_timestamp": (27, ">q", []),
    "max_timestamp": (35, ">q", []),
    "producer_id": (43, ">q", []),
    "producer_epoch": (51, ">h", []),
    "base_sequence": (53, ">i", []),
}
_BATCH_HEADER_SIZE = 61


@st.composite
def _header_mutated(draw: Any, batch: bytes) -> bytes:
    """*batch* with one or two header fields set to an extreme value (the length most often), then alone, cut after
    its header, or after or before an intact copy of it: records that end with a batch header of any length."""
    data = bytearray(batch)
    for _ in range(draw(st.integers(1, 2))):
        name = draw(st.sampled_from(["length"] * 6 + ["record_count"] * 2 + list(_BATCH_FIELDS)))
        offset, fmt, extra = _BATCH_FIELDS[name]
        bits = struct.calcsize(fmt) * 8
        low, high = (0, 2**bits - 1) if fmt.endswith(("I", "B")) else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        value = draw(st.sampled_from([low, high, 0, 1, *([-1] if low else []), *extra]))
        struct.pack_into(fmt, data, offset, value)
    OUTCOMES["batch header mutated"] += 1
    shape = draw(st.sampled_from(["alone", "header only", "after a batch", "before a batch"]))
    if shape == "header only":
        return bytes(data[:_BATCH_HEADER_SIZE])
    if shape == "after a batch":
        return batch + bytes(data)
    if shape == "before a batch":
        return bytes(data) + batch
    return bytes(data)


@st.composite
def _produce(draw: Any, version: int) -> Any:
    """A Produce request of a real record batch (possibly its header or its bytes mutated) to a partition (or none)
    of TOPIC, with acks -1, 1 or 0."""
    cls = request_class(0, version)
    topic_cls = _entity(cls, "topic_data")
    partition_cls = _entity(topic_cls, "partition_data")
    n = draw(st.integers(1, 4))
    topic = draw(st.sampled_from([TOPIC, TOPIC, ROWS_TOPIC]))
    OUTCOMES[f"produce to {topic!r}"] += 1
    values = st.sampled_from(_ROW_VALUES) if topic == ROWS_TOPIC and draw(st.booleans()) else st.binary(max_size=64)
    batch = encode_batch(
        0, [draw(st.integers(0, 2**42)) for _ in range(n)], [draw(st.none() | st.binary(max_size=8)) for _ in range(n)],
        [draw(st.none() | values) for _ in range(n)],
        compression=draw(st.sampled_from([None, *CODECS])),
    )
    records = draw(_header_mutated(batch) | _mutated(batch))
    partition = partition_cls(index=draw(st.integers(-1, 2)), records=records)
    return cls(transactional_id=None, acks=draw(st.sampled_from([-1, 1, 0])), timeout=datetime.timedelta(seconds=1),
               topic_data=(topic_cls(name=topic, partition_data=(partition,)),))


@st.composite
def _request(draw: Any, api_key: int, version: int) -> bytes:
    """A request frame (size prefix included): a valid header and a (mutated) body. A Produce request of a real
    batch has its body mutated a third of the time only: its records are mutated already, and must reach the
    partition whole to fuzz what follows their validation."""
    produce = api_key == 0 and draw(st.booleans())
    if produce:
        message = draw(_produce(version))
    else:
        message = draw(instances(request_class(api_key, version)))
    valid = encode_request(api_key, version, FUZZ_CID, "fuzz", message)
    header_size = parse_request_header(valid[4:]).size
    intact = produce and draw(st.integers(0, 2)) > 0
    body = valid[4 + header_size:] if intact else draw(_mutated(valid[4 + header_size:]))
    OUTCOMES["mutated" if body != valid[4 + header_size:] else "valid"] += 1
    payload = valid[4: 4 + header_size] + body
    return struct.pack(">i", len(payload)) + payload


def _probe() -> bytes:
    head = _header_v1(18, 0, PROBE_CID)
    return struct.pack(">i", len(head)) + head


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """*n* bytes, or None when the server closed the connection first."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes | None:
    size = _recv_exact(sock, 4)
    return None if size is None else _recv_exact(sock, struct.unpack(">i", size)[0])


def _check_response(frame: bytes, api_key: int, version: int) -> None:
    """A well-formed response of (api_key, version): header, then a body that decodes to the last byte."""
    cls = response_class(api_key, version)
    pos = 4
    if response_header_version(api_key, version) == 1:  # tagged fields after the correlation id
        count, pos = read_uvarint(frame, pos)
        for _ in range(count):
            _, pos = read_uvarint(frame, pos)
            size, pos = read_uvarint(frame, pos)
            pos += size
    _, end = decoder(cls)(frame, pos)
    assert end == len(frame), f"{cls.__name__}: {len(frame) - end} bytes after the response"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_walgate(tmp_path_factory.mktemp("fuzz"), "--group-initial-rebalance-delay-ms", "0") as server:
        bootstrap = f"127.0.0.1:{server.kafka_port}"
        # a topic named as hypothesis names things first ("0"), with records, so fuzzed requests reach partitions
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(20):
            producer.produce(TOPIC, f"value {i}".encode(), key=b"k", partition=i % 2)
        assert producer.flush(30) == 0
        for statement in (f"CREATE DATABASE {ROWS_TOPIC}_db VGROUPS 2",  # a TDengine topic: Produce writes rows
                          f"CREATE STABLE {ROWS_TOPIC}_db.meters (ts TIMESTAMP, v INT) TAGS (loc VARCHAR(8))",
                          f"CREATE TOPIC {ROWS_TOPIC} AS STABLE {ROWS_TOPIC}_db.meters"):
            request = urllib.request.Request(f"{server.http_url}/rest/sql", data=statement.encode())
            with urllib.request.urlopen(request, timeout=30) as response:
                assert json.loads(response.read())["code"] == 0, statement
        yield server, server.rss_mib()


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
@_fuzz_settings(EXAMPLES, LONG_EXAMPLES)
@given(data=st.data())
def test_fuzzed_request_is_answered_or_closed(server, api_key, version, data) -> None:
    live, _ = server
    request = data.draw(_request(api_key, version), label="request")
    with socket.create_connection(("127.0.0.1", live.kafka_port), timeout=WAIT_S) as sock:
        try:
            sock.sendall(request + _probe())
        except (BrokenPipeError, ConnectionResetError):
            OUTCOMES["closed"] += 1
            return
        try:
            frame = _recv_frame(sock)
        except TimeoutError:
            assert api_key in MAY_WAIT, f"no answer to api key {api_key} v{version} within {WAIT_S} s"
            OUTCOMES["waiting"] += 1
            return
        if frame is None:
            OUTCOMES["closed"] += 1
            return
        (cid,) = struct.unpack_from(">i", frame)
        if cid == FUZZ_CID:
            _check_response(frame, api_key, version)
            OUTCOMES["answered"] += 1
            frame = _recv_frame(sock)
            assert frame is not None, "the connection closed after a well-formed answer"
        else:
            assert api_key in NO_ANSWER_OK, f"api key {api_key} v{version} answered nothing"
            OUTCOMES["no answer"] += 1
        assert _parse_api_versions_v0(frame, PROBE_CID)[0] == 0


def test_the_server_survived_with_bounded_memory_and_a_clean_log(server) -> None:
    live, rss_before = server
    assert live.proc.poll() is None
    with socket.create_connection(("127.0.0.1", live.kafka_port), timeout=TIMEOUT) as sock:
        sock.sendall(_probe())
        assert _parse_api_versions_v0(_recv_frame(sock) or b"", PROBE_CID)[0] == 0
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{live.kafka_port}", "group.id": "fuzz-check"})
    try:
        records = sum(consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=TIMEOUT)[1] for p in (0, 1))
    finally:
        consumer.close()
    grown = live.rss_mib() - rss_before
    print(f"fuzz outcomes: {dict(sorted(OUTCOMES.items()))}; {records} records in {TOPIC!r}; "
          f"RSS grew by {grown:.0f} MiB")
    if OUTCOMES[f"produce to {TOPIC!r}"] >= 50:  # (the whole file ran, not a selection without the Produce cases)
        assert records > 20  # fuzzed Produce requests did reach the write path
    assert grown < RSS_GROWTH_MIB
    _assert_clean(live.log())


# ------------------------------------------------------------------ OAUTHBEARER tokens with any numeric claims

OAUTH_EXAMPLES = 80
LONG_OAUTH_EXAMPLES = 2000
OAUTH_KEY = ec.generate_private_key(ec.SECP256R1())
INVALID_TOKEN = b'{"status":"invalid_token"}'
SASL_AUTHENTICATION_FAILED = 58
LONG_MS = 2**63 - 1
OAUTH_OUTCOMES: Counter[str] = Counter()
_EXTREMES = [
    1e20, 2**63, 2**63 - 1, 2**64, -(2**63), 10**400, 1e308, -1e308, float("inf"), float("-inf"), float("nan"),
    LONG_MS // 1000, LONG_MS // 1000 + 1, -1, -0.5, 0, 0.5, 1.5]
_NOT_NUMBERS = st.none() | st.booleans() | st.text(max_size=8) | st.lists(st.integers(), max_size=2) | st.just({})
_ANY_JSON = _NOT_NUMBERS | st.integers() | st.floats()


def _valid(**changes: Any) -> dict[str, Any]:
    """A valid token's claims (for 10 minutes from when they are made), with ``changes``."""
    now = int(datetime.datetime.now(datetime.UTC).timestamp())
    return {"sub": "fuzz", "exp": now + 600, "iat": now - 5, **changes}


@st.composite
def _claims(draw: Any) -> dict[str, Any]:
    """A valid token's claims with one to three of exp, iat and nbf replaced: by an extreme value (most often), any
    integer or float, something that is no number, or a time near now; now and then another claim of any type."""
    claims = _valid()
    now = claims["iat"] + 5
    dates = st.one_of(st.sampled_from(_EXTREMES), st.sampled_from(_EXTREMES), st.integers(), st.floats(), _NOT_NUMBERS,
                      st.integers(-10**6, 10**6).map(lambda d: now + d))
    for name in draw(st.lists(st.sampled_from(["exp", "iat", "nbf"]), min_size=1, max_size=3, unique=True)):
        claims[name] = draw(dates)
    if draw(st.integers(0, 7)) == 0:
        claims[draw(st.sampled_from(["sub", "aud", "scope", "jti"]))] = draw(_ANY_JSON)
    return claims


def _bearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def _sasl_answer(frame: bytes, version: int) -> tuple[int, bytes, int]:
    """(error code, auth bytes, session lifetime ms) of a SaslAuthenticate answer, read by hand to its last byte
    (the lifetime may exceed what a ``timedelta`` holds)."""
    pos = 4
    if version >= 2:
        pos += 1  # the response header's empty tagged fields
    (error,) = struct.unpack_from(">h", frame, pos)
    pos += 2
    if version >= 2:  # compact nullable string, compact bytes: uvarint length + 1, 0 for null
        size, pos = read_uvarint(frame, pos)
        pos += max(size - 1, 0)
        size, pos = read_uvarint(frame, pos)
        auth, pos = frame[pos: pos + size - 1], pos + size - 1
    else:
        (size,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + max(size, 0)
        (size,) = struct.unpack_from(">i", frame, pos)
        auth, pos = frame[pos + 4: pos + 4 + size], pos + 4 + size
    lifetime = 0
    if version >= 1:
        (lifetime,) = struct.unpack_from(">q", frame, pos)
        pos += 8
    if version >= 2:
        assert frame[pos] == 0, "tagged fields in a SaslAuthenticate answer"
        pos += 1
    assert pos == len(frame), f"{len(frame) - pos} bytes after the SaslAuthenticate answer"
    return error, bytes(auth), lifetime


@pytest.fixture(scope="module")
def oauth_server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fuzz-oauth")
    jwk = {**json.loads(ECAlgorithm.to_jwk(OAUTH_KEY.public_key())), "kid": "fuzz", "use": "sig", "alg": "ES256"}
    (workdir / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    port = free_port()
    env = {**walgate_env(), "WALGATE_LISTENERS": f"SASL_PLAINTEXT://127.0.0.1:{port}",
           "WALGATE_SASL_ENABLED_MECHANISMS": "OAUTHBEARER", "WALGATE_ROOT_PASSWORD": "fuzz-r00t",
           "WALGATE_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": Path(workdir / "jwks.json").as_uri()}
    with running_walgate(workdir, env=env, kafka_port=port) as server:
        yield server


def _frame(api_key: int, version: int, cid: int, message: Any) -> bytes:
    return encode_request(api_key, version, cid, "fuzz-oauth", message)


def _handshake(version: int) -> bytes:
    return _frame(17, version, 1, request_class(17, version)(mechanism="OAUTHBEARER"))


def _authenticate(version: int, cid: int, message: bytes) -> bytes:
    return _frame(36, version, cid, request_class(36, version)(auth_bytes=message))


def _bare(sock: socket.socket, message: bytes) -> bytes | None:
    """Send a bare SASL token (after a v0 SaslHandshake); the server's bare answer, None if it closed."""
    sock.sendall(struct.pack(">i", len(message)) + message)
    return _recv_frame(sock)


@_fuzz_settings(OAUTH_EXAMPLES, LONG_OAUTH_EXAMPLES)
@given(claims=_claims(), version=st.sampled_from([None, 0, 1, 2]))
@example(claims=_valid(exp=1e20), version=2)  # the regressions of issue 22 first, whatever the draws
@example(claims=_valid(exp=2**63), version=1)
@example(claims=_valid(exp=LONG_MS // 1000), version=2)  # the largest exp: accepted, its lifetime near 2^63 ms
@example(claims=_valid(exp=float("inf")), version=None)
@example(claims=_valid(exp=float("nan")), version=2)
@example(claims=_valid(iat=float("inf")), version=1)
@example(claims=_valid(nbf=float("nan")), version=0)
def test_fuzzed_token_claims_are_refused_or_accepted(oauth_server, claims: dict[str, Any], version: int | None
                                                     ) -> None:
    """``version`` None: a v0 SaslHandshake, then the token as a bare frame."""
    token = jwt.encode(claims, OAUTH_KEY, algorithm="ES256", headers={"kid": "fuzz"})
    with socket.create_connection(("127.0.0.1", oauth_server.kafka_port), timeout=WAIT_S * 5) as sock:
        sock.sendall(_handshake(0 if version is None else 1))
        answer = _recv_frame(sock)
        assert answer is not None and struct.unpack_from(">ih", answer) == (1, 0), answer
        if version is None:
            challenge = _bare(sock, _bearer(token))
            if challenge is None:
                OAUTH_OUTCOMES["closed"] += 1
                return
            error, lifetime = 0, 0
        else:
            sock.sendall(_authenticate(version, 2, _bearer(token)))
            frame = _recv_frame(sock)
            if frame is None:
                OAUTH_OUTCOMES["closed"] += 1
                return
            error, challenge, lifetime = _sasl_answer(frame, version)
        if error == SASL_AUTHENTICATION_FAILED:
            OAUTH_OUTCOMES["failed"] += 1
            assert _recv_frame(sock) is None, "open after a failed authentication"
            return
        assert error == 0, error
        if challenge == INVALID_TOKEN:
            OAUTH_OUTCOMES["refused"] += 1
            if version is None:
                assert _bare(sock, b"\x01") is None, "open after a refused token's %x01"
            else:
                sock.sendall(_authenticate(version, 3, b"\x01"))
                frame = _recv_frame(sock)
                assert frame is not None and _sasl_answer(frame, version)[0] == SASL_AUTHENTICATION_FAILED
                assert _recv_frame(sock) is None, "open after a failed authentication"
            return
        assert challenge == b"", challenge
        assert 0 <= lifetime <= LONG_MS
        OAUTH_OUTCOMES["accepted"] += 1
        sock.sendall(_probe())
        frame = _recv_frame(sock)
        if frame is None:  # the token's life ended the session at once
            assert math.isclose(lifetime, 0, abs_tol=60_000), lifetime
            return
        assert _parse_api_versions_v0(frame, PROBE_CID)[0] == 0


def test_the_oauth_server_refused_and_accepted_with_a_clean_log(oauth_server) -> None:
    print(f"oauth fuzz outcomes: {dict(sorted(OAUTH_OUTCOMES.items()))}")
    assert oauth_server.proc.poll() is None
    assert OAUTH_OUTCOMES["refused"] and OAUTH_OUTCOMES["accepted"], OAUTH_OUTCOMES
    _assert_clean(oauth_server.log())
