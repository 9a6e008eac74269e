"""walgate only: hostile bytes on the Kafka port from raw sockets, next to a real client.

Every scenario opens its own raw sockets (bounded timeouts everywhere) and sends what no client
would: seeded random garbage, truncated headers, huge or negative length prefixes, well-formed
request headers (Metadata, Produce, Fetch, ApiVersions) whose bodies claim absurd array counts or
string lengths, unknown API keys and versions, and 200 concurrent connections idling on partial
frames. What Kafka's broker does is the reference: a request it cannot parse, a size prefix above
``socket.request.max.bytes`` or negative, an unknown API key or an unsupported version close the
connection without an answer (``SocketServer``/``RequestContext.parseRequest``); an ApiVersions
request of an unknown version gets UNSUPPORTED_VERSION plus the version ranges in v0 format
(KIP-511) and the connection stays usable; a partial frame just waits for the rest.

After each scenario (the ``scenario`` context manager, inside the test):

* a real client on other connections still works (confluent-kafka: list the topics, consume every
  record of a ``power`` topic, produce a record to a Kafka-native topic and read it back);
* the server process is alive;
* its resident memory (``VmRSS`` of ``/proc/<pid>/status``) is within :data:`RSS_GROWTH` of where
  it was before the first scenario, and its peak (``VmHWM``) grew by less than that during the
  scenario — frames claiming GiBs must not be allocated, not even briefly;
* the sockets it holds (``/proc/<pid>/fd``) come back to what they were: every hostile
  connection the client closed is closed by the server too;
* its log gained no ERROR line or traceback (bad input is one WARNING line per connection).

The unit-level cases of ``tests/gateway/test_kafka_bad_input.py`` (one bad frame each, ApiVersions
v0 answers) are not repeated here.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import compat_data as data
import pytest
from compat_brokers import STABLE, Walgate, serving_walgate
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

MAX_REQUEST = 16 << 20  # --max-request-bytes of the server (walgate's and Kafka's default)
RSS_GROWTH = 64 << 20  # what the server may grow by while being sent frames that claim GiBs
TIMEOUT = 10.0  # seconds a socket operation may take
CLIENT_ID = b"hostile"
POWER_TOPIC = "topic_meters"
NATIVE_TOPIC = "hostile_native"
EMPTY_TOPIC = "hostile_empty"  # never written: a Fetch of it long-polls

UNSUPPORTED_VERSION = 35
API_VERSIONS, METADATA, PRODUCE, FETCH = 18, 3, 0, 1


# ------------------------------------------------------------------ hand-packed Kafka bytes


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes = CLIENT_ID) -> bytes:
    """Request header v1: api_key int16, api_version int16, correlation_id int32, client_id int16 string."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def header_v2(api_key: int, version: int, correlation_id: int, client_id: bytes = CLIENT_ID) -> bytes:
    """Request header v2 (flexible versions): v1 + an empty tagged-field section."""
    return header_v1(api_key, version, correlation_id, client_id) + b"\x00"


def sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def compact_str(s: bytes) -> bytes:
    return uvarint(len(s) + 1) + s


HUGE_VARINT = b"\xff\xff\xff\xff\x0f"  # unsigned varint 0xffffffff: a compact length of 2^32 - 2
EMPTY_COMPACT = b"\x01"  # compact array / string of length 0


def metadata_v12(topics: bytes) -> bytes:
    """Metadata v12 body: topics (compact array of {topic_id uuid, name compact string, tags}), two bools, tags."""
    return topics + b"\x00\x00" + b"\x00"


def metadata_v1(topics: bytes) -> bytes:
    return topics


def produce_v9(topic_data: bytes, acks: int = -1) -> bytes:
    """Produce v9 body: transactional_id (null), acks, timeout_ms, topic_data (compact array), tags."""
    return b"\x00" + struct.pack(">hi", acks, 1000) + topic_data + b"\x00"


def produce_v3(topic_data: bytes) -> bytes:
    """Produce v3 body: transactional_id int16 string (null), acks, timeout_ms, topic_data (int32 array)."""
    return struct.pack(">hhi", -1, -1, 1000) + topic_data


def fetch_v12(topics: bytes) -> bytes:
    """Fetch v12 body: replica_id, max_wait_ms (0), min_bytes, max_bytes, isolation, session id/epoch,
    topics (compact array), forgotten_topics_data (compact array), rack_id (compact string), tags."""
    return struct.pack(">iiiibii", -1, 0, 0, 1 << 20, 0, 0, -1) + topics + EMPTY_COMPACT + EMPTY_COMPACT + b"\x00"


def fetch_v4(topics: bytes) -> bytes:
    """Fetch v4 body: replica_id, max_wait_ms (0), min_bytes, max_bytes, isolation, topics (int32 array)."""
    return struct.pack(">iiiib", -1, 0, 0, 1 << 20, 0) + topics


def api_versions_v3(name: bytes = compact_str(b"hostile"), version: bytes = compact_str(b"1.0")) -> bytes:
    """ApiVersions v3 body: client_software_name, client_software_version (compact strings), tags."""
    return name + version + b"\x00"


# ------------------------------------------------------------------ raw sockets


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)


def send_quietly(sock: socket.socket, payload: bytes) -> None:
    """sendall that tolerates the server having closed already (it may stop reading at a bad size prefix)."""
    try:
        sock.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass


def read_until_closed(sock: socket.socket, timeout: float = TIMEOUT) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open after ``timeout``."""
    got = b""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the server kept the connection open for {timeout} s (received {got[:64]!r})")
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return got
        except TimeoutError:
            continue
        if not chunk:
            return got
        got += chunk


def assert_closed_silently(sock: socket.socket, what: str) -> None:
    """Kafka's answer to a frame it cannot take: close the connection, send nothing."""
    got = read_until_closed(sock)
    assert got == b"", f"{what}: expected the connection closed without an answer, got {len(got)} bytes {got[:64]!r}"


def assert_still_open(sock: socket.socket, seconds: float, what: str) -> None:
    """Nothing arrives and the connection is not closed for ``seconds`` (a partial frame just waits)."""
    sock.settimeout(seconds)
    try:
        chunk = sock.recv(1)
    except TimeoutError:
        return
    except ConnectionResetError:
        chunk = b""
    finally:
        sock.settimeout(TIMEOUT)
    raise AssertionError(f"{what}: expected the server to wait for the rest of the frame, got "
                         f"{'EOF' if chunk == b'' else repr(chunk)}")


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def recv_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    assert 0 <= size <= 1 << 20, f"response size prefix {size}"
    return recv_exact(sock, size)


def parse_api_versions_v0(body: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """(correlation id, error code, {api key: (min, max)}) of an ApiVersions response in v0 format."""
    cid, error, n = struct.unpack_from(">ihi", body, 0)
    assert 0 <= n <= 1000 and len(body) >= 10 + 6 * n, f"not an ApiVersions v0 body: {body[:64]!r}"
    keys = {}
    for i in range(n):
        key, lo, hi = struct.unpack_from(">hhh", body, 10 + 6 * i)
        keys[key] = (lo, hi)
    return cid, error, keys


# ------------------------------------------------------------------ the server process


def proc_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


def kib(value: str) -> int:
    number, unit = value.split()
    assert unit == "kB", value
    return int(number) * 1024


@dataclass(frozen=True)
class Memory:
    rss: int
    hwm: int

    @classmethod
    def of(cls, pid: int) -> Memory:
        status = proc_status(pid)
        return cls(kib(status["VmRSS"]), kib(status["VmHWM"]))


def assert_alive(server: Walgate) -> None:
    try:
        state = proc_status(server.pid)["State"]
    except FileNotFoundError:
        state = "gone"
    assert state[:1] not in ("Z", "X", "g"), \
        f"walgate (pid {server.pid}) is not running: {state}\n{server.log()[-4000:]}"


def sockets(pid: int) -> int:
    """How many sockets the process holds open (listeners included)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except FileNotFoundError:
            pass
    return n


def wait_sockets(pid: int, at_most: int, timeout: float = 15.0) -> int:
    """Wait until the process holds at most ``at_most`` sockets; returns the last count."""
    deadline = time.monotonic() + timeout
    while True:
        n = sockets(pid)
        if n <= at_most or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def settled_sockets(pid: int) -> int:
    """The socket count once it stopped changing (connections of earlier clients being closed)."""
    last, stable_since = sockets(pid), time.monotonic()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and time.monotonic() - stable_since < 0.5:
        time.sleep(0.1)
        n = sockets(pid)
        if n != last:
            last, stable_since = n, time.monotonic()
    return last


# ------------------------------------------------------------------ a real client next to the hostile traffic


@dataclass
class Loaded:
    server: Walgate
    power: list[data.Rec] = field(repr=False)  # the records of POWER_TOPIC
    baseline: Memory | None = None


def consume_power(bootstrap: str, partitions: int, want: int) -> list[data.Rec]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hostile-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "socket.timeout.ms": 10000})
    got: list[data.Rec] = []
    try:
        c.assign([TopicPartition(POWER_TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, f"consuming {POWER_TOPIC}: {m.error()}"
            got.append(data.Rec(m.partition(), m.offset(), m.timestamp()[1], m.key().decode() if m.key() else None,
                                json.loads(m.value()), {k: v.decode() for k, v in m.headers() or []}))
    finally:
        c.close()
    return got


def produce_and_read_back(bootstrap: str) -> None:
    value = uuid.uuid4().hex.encode()
    reports: list[tuple[object, int]] = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 15000})
    p.produce(NATIVE_TOPIC, value, b"k", on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(20) == 0 and len(reports) == 1 and reports[0][0] is None, f"producing failed: {reports}"
    offset = reports[0][1]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hostile-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(NATIVE_TOPIC, 0, offset)])
        deadline = time.monotonic() + 20
        m = None
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.5)
        assert m is not None, f"the record produced at offset {offset} of {NATIVE_TOPIC} was not read back"
        assert m.error() is None and (m.offset(), m.value()) == (offset, value), (m.error(), m.offset(), m.value())
    finally:
        c.close()


def assert_serves(loaded: Loaded) -> None:
    """A real client (confluent-kafka) on its own connections: metadata, consume, produce + consume."""
    server = loaded.server
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    topics = admin.list_topics(timeout=15).topics
    assert POWER_TOPIC in topics and NATIVE_TOPIC in topics, sorted(topics)
    assert len(topics[POWER_TOPIC].partitions) == data.VGROUPS
    got = consume_power(server.bootstrap, data.VGROUPS, len(loaded.power))
    data.check_exactly(got, loaded.power)
    produce_and_read_back(server.bootstrap)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    with serving_walgate(tmp_path_factory.mktemp("hostile"), "--max-request-bytes", str(MAX_REQUEST)) as server:
        assert server.pid is not None
        power = server.load_meters(data.DB, {POWER_TOPIC: STABLE}, data.meter_rows())[POWER_TOPIC]
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        futures = admin.create_topics([NewTopic(NATIVE_TOPIC, 1, 1), NewTopic(EMPTY_TOPIC, 1, 1)],
                                      operation_timeout=10, request_timeout=15)
        for future in futures.values():
            future.result(timeout=20)
        del admin
        yield Loaded(server, power)


@contextlib.contextmanager
def scenario(loaded: Loaded) -> Iterator[Loaded]:
    """Before: a real client works, memory and sockets measured. After the block: the checks of the module doc
    (in the test itself, so that a failed check fails the test, not its teardown)."""
    server = loaded.server
    assert server.pid is not None
    if loaded.baseline is None:
        assert_serves(loaded)  # warm every code path the checks use before the first measurement
        loaded.baseline = Memory.of(server.pid)
    before = Memory.of(server.pid)
    held = settled_sockets(server.pid)
    log_start = len(server.log())
    yield loaded
    assert_alive(server)
    assert_serves(loaded)
    assert_alive(server)
    errors = [line for line in server.log()[log_start:].splitlines()
              if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")]
    assert not errors, "walgate logged errors during the scenario:\n" + "\n".join(errors[:20]) + \
        "\n--- log ---\n" + server.log()[log_start:][-6000:]
    after = Memory.of(server.pid)
    mib = 1 << 20
    assert after.hwm - before.hwm < RSS_GROWTH, (
        f"peak RSS grew by {(after.hwm - before.hwm) / mib:.1f} MiB during the scenario "
        f"({before.hwm / mib:.1f} -> {after.hwm / mib:.1f} MiB)")
    assert after.rss - loaded.baseline.rss < RSS_GROWTH, (
        f"RSS grew by {(after.rss - loaded.baseline.rss) / mib:.1f} MiB since the first scenario "
        f"({loaded.baseline.rss / mib:.1f} -> {after.rss / mib:.1f} MiB)")
    left = wait_sockets(server.pid, held)
    assert left <= held, f"walgate holds {left} sockets, {held} before the scenario: connections were not closed"


# ------------------------------------------------------------------ the scenarios


def test_a_real_client_works_before_any_hostile_traffic(loaded):
    """The checks of every scenario on their own: the harness is sound before anything hostile is sent."""
    with scenario(loaded):
        pass


def test_random_garbage_then_half_close(loaded):
    """Seeded random bytes of several sizes, then EOF: the server answers nothing and closes."""
    with scenario(loaded):
        rng = random.Random(20240501)
        for size in (1, 3, 4, 5, 17, 100, 4096, 70_000, 1 << 20):
            with connect(loaded.server.kafka_port) as sock:
                send_quietly(sock, rng.randbytes(size))
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                assert_closed_silently(sock, f"{size} random bytes")


def test_random_garbage_in_a_well_sized_frame(loaded):
    """A correct size prefix around seeded random bytes: a request that does not parse closes the connection."""
    with scenario(loaded):
        rng = random.Random(8)
        for size in (0, 1, 2, 7, 8, 9, 14, 64, 1000, 65_535, 65_536, 300_000, 1 << 20):
            for _ in range(3):
                body = rng.randbytes(size)
                if size >= 4 and struct.unpack_from(">h", body)[0] == API_VERSIONS:
                    body = b"\x7f\x7f" + body[2:]  # an ApiVersions of an unknown version is answered (see below)
                with connect(loaded.server.kafka_port) as sock:
                    send_quietly(sock, sized(body))
                    assert_closed_silently(sock, f"a frame of {size} random bytes {body[:16]!r}")


def test_truncated_frames_then_close(loaded):
    """The size prefix promises more than ever comes, then the client goes away."""
    with scenario(loaded):
        apiv = header_v1(API_VERSIONS, 0, 1)
        cases = [
            b"\x00",  # a third of a size prefix
            b"\x00\x00\x00",
            sized(apiv)[:7],  # size + 3 header bytes
            struct.pack(">i", 100) + apiv,  # whole header, body never comes
            struct.pack(">i", MAX_REQUEST) + b"\x00" * 100,  # claims the maximum
            struct.pack(">i", 4 << 20) + bytes(200_000),  # a big frame, partly sent (the list-of-pieces path)
        ]
        for payload in cases:
            with connect(loaded.server.kafka_port) as sock:
                sock.sendall(payload)
        for payload in cases:  # the same, aborted with a reset instead of a FIN
            sock = connect(loaded.server.kafka_port)
            sock.sendall(payload)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()


def test_truncated_header_held_idle_then_completed(loaded):
    """A partial frame waits, does not block others, and is answered once the rest arrives (as on Kafka)."""
    with scenario(loaded):
        port = loaded.server.kafka_port
        request = sized(header_v2(API_VERSIONS, 3, 4242) + api_versions_v3())
        with connect(port) as slow, connect(port) as big:
            slow.sendall(request[:9])  # size, api key, version, half of the correlation id
            big.sendall(struct.pack(">i", MAX_REQUEST) + b"\x00" * 100)  # exactly the maximum: allowed, incomplete
            assert_still_open(slow, 2.0, "a truncated ApiVersions header")
            assert_still_open(big, 0.5, "a frame of exactly max request bytes, partly sent")
            assert_serves(loaded)  # other connections are served meanwhile
            slow.sendall(request[9:])
            body = recv_frame(slow)
            assert struct.unpack_from(">ih", body) == (4242, 0), body[:32]  # correlation id, error code
            assert_still_open(big, 0.1, "a frame of exactly max request bytes, partly sent")


HUGE_PREFIXES = {
    "2^31-1": 0x7FFFFFFF,
    "1GiB": 1 << 30,
    "max+1": MAX_REQUEST + 1,
    "-1": -1,
    "-2^31": -(1 << 31),
    "-16MiB": -(16 << 20),
}


@pytest.mark.parametrize("size", HUGE_PREFIXES.values(), ids=HUGE_PREFIXES.keys())
def test_huge_or_negative_length_prefix(loaded, size):
    """Above max request bytes or negative: closed without an answer and without allocating the claim,
    whether the prefix comes alone, with some body, or one byte at a time."""
    with scenario(loaded):
        prefix = struct.pack(">i", size)
        port = loaded.server.kafka_port
        with connect(port) as sock:
            sock.sendall(prefix)
            assert_closed_silently(sock, f"size prefix {size}")
        with connect(port) as sock:
            send_quietly(sock, prefix + header_v1(METADATA, 12, 1) + bytes(60_000))
            assert_closed_silently(sock, f"size prefix {size} + 60 kB")
        with connect(port) as sock:
            for b in prefix[:3]:
                sock.sendall(bytes([b]))
                time.sleep(0.05)
            assert_still_open(sock, 0.3, f"3 bytes of size prefix {size}")
            send_quietly(sock, prefix[3:])
            assert_closed_silently(sock, f"size prefix {size} sent byte by byte")


def test_exactly_max_request_bytes_is_not_refused(loaded):
    """The bound of the previous test is the configured maximum itself: a frame of exactly that size is
    read (Kafka: ``size > socket.request.max.bytes`` is refused), here a whole 16 MiB of garbage, which
    is then refused as unparseable."""
    with scenario(loaded):
        with connect(loaded.server.kafka_port) as sock:
            send_quietly(sock, struct.pack(">i", MAX_REQUEST) + header_v1(0x7ABC, 0, 1))
            assert_still_open(sock, 0.5, "a frame of exactly max request bytes")
            chunk = bytes(1 << 20)
            sent = len(header_v1(0x7ABC, 0, 1))
            while sent + len(chunk) <= MAX_REQUEST:
                sock.sendall(chunk)
                sent += len(chunk)
            sock.sendall(bytes(MAX_REQUEST - sent))
            assert_closed_silently(sock, "16 MiB frame of an unknown api key")


@dataclass(frozen=True)
class Lie:
    """A request with a valid header whose body is either honest (answered) or lies (closed)."""

    name: str
    honest: bytes
    lying: bytes


def _lies() -> list[Lie]:
    m12 = lambda cid: header_v2(METADATA, 12, cid)  # noqa: E731
    p9 = lambda cid: header_v2(PRODUCE, 9, cid)  # noqa: E731
    f12 = lambda cid: header_v2(FETCH, 12, cid)  # noqa: E731
    a3 = lambda cid: header_v2(API_VERSIONS, 3, cid)  # noqa: E731
    one_topic_v12 = b"\x02" + bytes(16)  # one topic, null topic id, then its name
    topic = compact_str(b"hostile_native")
    return [
        Lie("metadata-v12-topics-2^32",
            m12(1) + metadata_v12(EMPTY_COMPACT), m12(1) + metadata_v12(HUGE_VARINT)),
        Lie("metadata-v12-topics-2^31",
            m12(2) + metadata_v12(EMPTY_COMPACT), m12(2) + metadata_v12(uvarint(1 << 31) + bytes(30))),
        Lie("metadata-v12-name-beyond-frame",
            m12(3) + metadata_v12(one_topic_v12 + compact_str(b"hostile_native") + b"\x00"),
            m12(3) + metadata_v12(one_topic_v12 + uvarint(0x7FFFFFFF) + b"hostile_native\x00")),
        Lie("metadata-v1-topics-0x7fffffff",
            header_v1(METADATA, 1, 4) + metadata_v1(struct.pack(">i", 0)),
            header_v1(METADATA, 1, 4) + metadata_v1(struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01a" * 10)),
        Lie("metadata-v1-name-0x7fff",
            header_v1(METADATA, 1, 5) + metadata_v1(struct.pack(">ih", 1, 5) + b"abcde"),
            header_v1(METADATA, 1, 5) + metadata_v1(struct.pack(">ih", 1, 0x7FFF) + b"abcde")),
        Lie("produce-v9-topics-2^32",
            p9(6) + produce_v9(EMPTY_COMPACT), p9(6) + produce_v9(HUGE_VARINT)),
        Lie("produce-v9-partitions-2^32",
            p9(7) + produce_v9(b"\x02" + topic + EMPTY_COMPACT + b"\x00"),
            p9(7) + produce_v9(b"\x02" + topic + HUGE_VARINT + b"\x00")),
        Lie("produce-v9-records-2^31",
            p9(8) + produce_v9(b"\x02" + topic + b"\x02" + struct.pack(">i", 0) + b"\x00" + b"\x00" + b"\x00"),
            p9(8) + produce_v9(b"\x02" + topic + b"\x02" + struct.pack(">i", 0) + uvarint(1 << 31) + bytes(64)
                               + b"\x00" + b"\x00")),
        Lie("produce-v3-records-0x7fffffff",
            header_v1(PRODUCE, 3, 9) + produce_v3(struct.pack(">i", 0)),
            header_v1(PRODUCE, 3, 9) + produce_v3(struct.pack(">ih", 1, 14) + b"hostile_native"
                                                  + struct.pack(">iii", 1, 0, 0x7FFFFFFF) + bytes(64))),
        Lie("fetch-v12-topics-2^32",
            f12(10) + fetch_v12(EMPTY_COMPACT), f12(10) + fetch_v12(HUGE_VARINT)),
        Lie("fetch-v12-partitions-2^31",
            f12(11) + fetch_v12(EMPTY_COMPACT), f12(11) + fetch_v12(b"\x02" + topic + uvarint(1 << 31) + bytes(40))),
        Lie("fetch-v4-topics-0x7fffffff",
            header_v1(FETCH, 4, 12) + fetch_v4(struct.pack(">i", 0)),
            header_v1(FETCH, 4, 12) + fetch_v4(struct.pack(">i", 0x7FFFFFFF) + bytes(40))),
        Lie("api-versions-v3-name-2^32",
            a3(13) + api_versions_v3(), a3(13) + api_versions_v3(name=HUGE_VARINT + b"hostile")),
        Lie("api-versions-v3-varint-longer-than-5-bytes",
            a3(14) + api_versions_v3(), a3(14) + api_versions_v3(name=b"\xff" * 12 + b"\x01")),
        Lie("header-client-id-beyond-frame",
            header_v1(METADATA, 1, 15, b"x") + metadata_v1(struct.pack(">i", 0)),
            struct.pack(">hhih", METADATA, 1, 15, 0x7FFF) + b"x" + metadata_v1(struct.pack(">i", 0))),
        Lie("header-tagged-fields-2^32",
            a3(16) + api_versions_v3(), header_v1(API_VERSIONS, 3, 16) + HUGE_VARINT + api_versions_v3()),
        Lie("header-tagged-field-size-2^31",
            a3(17) + api_versions_v3(),
            header_v1(API_VERSIONS, 3, 17) + b"\x01\x05" + uvarint(1 << 31) + api_versions_v3()),
    ]


LIES = _lies()


@pytest.mark.parametrize("lie", LIES, ids=[lie.name for lie in LIES])
def test_valid_header_absurd_counts(loaded, lie):
    """The honest request is answered (the hand-packed bytes are right); the lying one closes the connection
    without an answer, without allocating the claimed counts."""
    with scenario(loaded):
        port = loaded.server.kafka_port
        (cid,) = struct.unpack_from(">i", lie.honest, 4)
        with connect(port) as sock:
            sock.sendall(sized(lie.honest))
            body = recv_frame(sock)
            assert struct.unpack_from(">i", body)[0] == cid, body[:32]
        with connect(port) as sock:
            send_quietly(sock, sized(lie.lying))
            assert_closed_silently(sock, lie.name)


CLOSING_HEADERS = {
    "unknown-api-key-0x7fff": header_v1(0x7FFF, 0, 1) + bytes(20),
    "negative-api-key": header_v1(-1, 0, 1) + bytes(20),
    "metadata-v99": header_v2(METADATA, 99, 1) + metadata_v12(EMPTY_COMPACT),
    "metadata-v-1": header_v1(METADATA, -1, 1) + bytes(8),
    "produce-v2-removed-in-kafka-4": header_v1(PRODUCE, 2, 1) + produce_v3(struct.pack(">i", 0))[2:],
    "fetch-v32767": header_v2(FETCH, 0x7FFF, 1) + fetch_v12(EMPTY_COMPACT),
    "controlled-shutdown-v0": struct.pack(">hhi", 7, 0, 1) + struct.pack(">i", 0),
}


@pytest.mark.parametrize("payload", CLOSING_HEADERS.values(), ids=CLOSING_HEADERS.keys())
def test_unknown_api_key_or_version_closes_after_earlier_answers(loaded, payload):
    """Pipelined behind a good request on the same connection: the good one is answered whole, then the
    connection is closed without an answer (Kafka: InvalidRequestException, connection closed)."""
    with scenario(loaded):
        good = sized(header_v1(API_VERSIONS, 0, 77))
        with connect(loaded.server.kafka_port) as sock:
            sock.sendall(good + sized(payload) + good)
            cid, error, _ = parse_api_versions_v0(recv_frame(sock))
            assert (cid, error) == (77, 0)
            assert_closed_silently(sock, "after the first answer")


@pytest.mark.parametrize("version", [5, 99, 0x7FFF, -1], ids=lambda v: f"v{v}")
def test_api_versions_of_an_unknown_version_is_answered_and_the_connection_kept(loaded, version):
    """KIP-511: UNSUPPORTED_VERSION with the version ranges in v0 format, whatever the (flexible, possibly
    garbage) body; the client then retries on the same connection, which must still work."""
    with scenario(loaded):
        with connect(loaded.server.kafka_port) as sock:
            sock.sendall(sized(header_v2(API_VERSIONS, version, 901) + b"\xde\xad\xbe\xef" * 8))
            cid, error, keys = parse_api_versions_v0(recv_frame(sock))
            assert (cid, error) == (901, UNSUPPORTED_VERSION)
            assert keys.get(API_VERSIONS, (None, None))[0] == 0 and keys[API_VERSIONS][1] >= 3, keys
            sock.sendall(sized(header_v2(API_VERSIONS, 3, 902) + api_versions_v3()))
            body = recv_frame(sock)
            assert struct.unpack_from(">ih", body) == (902, 0), body[:16]


def test_reset_while_a_request_is_being_handled(loaded):
    """A peer resets its connection (RST) while its long-poll Fetch waits on the server, or right after
    sending a pipeline of requests: the late answers are dropped quietly (no unhandled error)."""
    with scenario(loaded):
        port = loaded.server.kafka_port
        partition = struct.pack(">iiqiqi", 0, -1, 0, -1, -1, 1 << 20) + b"\x00"  # partition 0 from offset 0
        long_poll = header_v2(FETCH, 12, 31) + struct.pack(">iiiibii", -1, 1500, 1, 1 << 20, 0, 0, -1) + \
            b"\x02" + compact_str(EMPTY_TOPIC.encode()) + b"\x02" + partition + b"\x00" + EMPTY_COMPACT * 2 + b"\x00"
        with connect(port) as sock:  # the premise: this Fetch waits max_wait_ms
            start = time.monotonic()
            sock.sendall(sized(long_poll))
            assert struct.unpack_from(">i", recv_frame(sock))[0] == 31
            assert time.monotonic() - start >= 1.2
        pipeline = sized(header_v2(METADATA, 12, 32) + metadata_v12(b"\x00")) * 50  # 50 x all topics
        for payload, wait in ((sized(long_poll), 0.3), (pipeline, 0.0), (sized(long_poll) + pipeline, 0.3)):
            for _ in range(3):
                sock = connect(port)
                sock.sendall(payload)
                time.sleep(wait)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
        time.sleep(2.0)  # the Fetches end: their answers have nowhere to go


CONCURRENT = 200


def test_many_connections_idling_on_partial_frames(loaded):
    """200 connections at once, each with a partial frame (80 of them claiming about the 16 MiB maximum:
    1.25 GiB in all), idling: held open like Kafka does, a real client is still served, nothing is
    allocated for the claims; then closed by the clients, and by the server too."""
    with scenario(loaded):
        server = loaded.server
        held = settled_sockets(server.pid)
        partials: list[Callable[[int], bytes]] = [
            lambda i: struct.pack(">i", MAX_REQUEST) + header_v1(METADATA, 12, i),
            lambda i: struct.pack(">i", MAX_REQUEST - i) + bytes(100),
            lambda i: struct.pack(">i", 1000) + header_v1(METADATA, 1, i),
            lambda i: b"\x00\x00",
            lambda i: sized(header_v2(API_VERSIONS, 3, i) + api_versions_v3())[:-1],
        ]
        socks: list[socket.socket] = []
        try:
            for i in range(CONCURRENT):
                sock = connect(server.kafka_port)
                socks.append(sock)
                sock.sendall(partials[i % len(partials)](i))
            n = sockets(server.pid)
            deadline = time.monotonic() + TIMEOUT
            while n < held + CONCURRENT and time.monotonic() < deadline:
                time.sleep(0.1)
                n = sockets(server.pid)
            assert n >= held + CONCURRENT, f"walgate holds {n} sockets, expected {held} + {CONCURRENT} idle connections"
            assert_serves(loaded)
            assert_alive(server)
            growth = Memory.of(server.pid).rss - loaded.baseline.rss
            assert growth < RSS_GROWTH, f"RSS grew by {growth >> 20} MiB with {CONCURRENT} partial frames open"
            assert_still_open(socks[0], 0.2, "an idle partial frame")
            # one of them finishes its frame late: still answered
            last = socks[4]
            last.sendall(b"\x00")
            body = recv_frame(last)
            assert struct.unpack_from(">ih", body) == (4, 0), body[:16]
        finally:
            for sock in socks:
                sock.close()
