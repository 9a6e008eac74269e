"""Resource exhaustion on the Kafka port, against a real ``walgate serve`` (issue 13, items 8 and 9).

* :class:`RequestBudget` (in process): first come, first served; a cancelled waiter holds nothing.
* Stalled big requests: 40 connections each send 15 MiB of a 16 MiB request and stall. The server's resident
  memory grows by at most ``--queued-max-request-bytes`` plus a small slack per connection (it grew by ~600 MiB
  before the budget), and once the stalled peers go a request of the largest size is served. Connections that
  only claim a big size (and send little) are not charged for it: others are served meanwhile.
* Slowloris: a request dribbled a byte at a time is cut off after ``--request-read-timeout-ms`` although the
  peer is never idle; one dribbled within the timeout is answered.
* A burst of connections while the server is not accepting (SIGSTOP) queues in the listen backlog: every one
  is established (the old backlog of 100 left the rest retrying SYNs).
* ``walgate serve`` raises its soft limit on open files to the hard limit, and logs it.
* At ``ulimit -n 1024`` (soft and hard): wide topics are created with a stock admin client, Metadata answers,
  and the server starts again on that data dir.
"""

from __future__ import annotations

import asyncio
import os
import resource
import select
import selectors
import signal
import socket
import struct
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from livewalgate import running_walgate
from tests.gateway.test_kafka_bad_input import (
    TIMEOUT,
    _api_versions_v0,
    _closed,
    _header_v1,
    _parse_api_versions_v0,
    _recv_frame,
)
from walgate.gateway.kafka.server import RequestBudget

MIB = 1 << 20
BUDGET = 32 * MIB
FRAME = 16 * MIB  # the default --max-request-bytes
SENT = 15 * MIB
CONNECTIONS = 40
SLACK_PER_CONNECTION_MIB = 1.5  # unpaid request bytes, one read chunk, asyncio's stream buffer (<= ~1 MiB)
SLACK_MIB = 16.0  # allocator and interpreter noise


async def test_the_request_budget_serves_waiters_in_order_and_cancelled_ones_hold_nothing() -> None:
    budget = RequestBudget(10)
    await budget.take(8)
    big = asyncio.create_task(budget.take(5))
    small = asyncio.create_task(budget.take(1))
    await asyncio.sleep(0)
    assert not big.done() and not small.done()  # 1 byte would fit, but it came after the big one
    big.cancel()
    await asyncio.wait_for(small, 1)  # a cancelled head of the line does not hold up the rest
    assert big.cancelled() and budget.used == 9
    late = asyncio.create_task(budget.take(5))
    await asyncio.sleep(0)
    budget.release(8)  # grants the late waiter...
    late.cancel()  # ...which is cancelled before it runs: it gives the bytes back
    await asyncio.gather(late, return_exceptions=True)
    assert budget.used == 1
    budget.release(1)
    assert budget.used == 0


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)


def _push(socks: list[socket.socket], payload: bytes, quiet: float = 1.0) -> list[int]:
    """Send as much of *payload* on every socket as the server takes, until no socket moved for *quiet* s."""
    view = memoryview(payload)
    sent = [0] * len(socks)
    for sock in socks:
        sock.setblocking(False)
    last_progress = time.monotonic()
    while time.monotonic() - last_progress < quiet and min(sent) < len(payload):
        moved = False
        for i, sock in enumerate(socks):
            while sent[i] < len(payload):
                try:
                    n = sock.send(view[sent[i]: sent[i] + MIB])
                except BlockingIOError:
                    break
                sent[i] += n
                moved = True
        if moved:
            last_progress = time.monotonic()
        else:
            time.sleep(0.05)
    return sent


def _largest_api_versions(correlation_id: int) -> bytes:
    """An ApiVersions v0 request padded to FRAME bytes (trailing bytes are ignored, as by Kafka)."""
    head = _header_v1(18, 0, correlation_id)
    return struct.pack(">i", FRAME) + head + bytes(FRAME - len(head))


def test_stalled_big_requests_hold_at_most_the_budget(tmp_path: Path) -> None:
    with running_walgate(tmp_path, "--queued-max-request-bytes", str(BUDGET)) as server:
        assert _api_versions_v0(server.kafka_port)[0] == 0
        before = server.rss_mib()
        socks = [_connect(server.kafka_port) for _ in range(CONNECTIONS)]
        try:
            sent = _push(socks, struct.pack(">i", FRAME) + bytes(SENT))
            assert sum(sent) >= BUDGET  # the server did read: the budget's worth at least
            grown = server.rss_mib() - before
            bound = BUDGET / MIB + CONNECTIONS * SLACK_PER_CONNECTION_MIB + SLACK_MIB
            assert grown < bound, f"RSS grew by {grown:.0f} MiB (bound {bound:.0f}); sent {sum(sent) / MIB:.0f} MiB"
        finally:
            for sock in socks:
                sock.close()
        with _connect(server.kafka_port) as sock:  # the stalled requests gave their bytes back
            sock.sendall(_largest_api_versions(5))
            assert _parse_api_versions_v0(_recv_frame(sock), 5)[0] == 0
        assert "Traceback" not in server.log()


def test_requests_that_claim_much_and_send_little_cost_nothing(tmp_path: Path) -> None:
    with running_walgate(tmp_path, "--queued-max-request-bytes", str(BUDGET)) as server:
        socks = [_connect(server.kafka_port) for _ in range(CONNECTIONS)]  # 640 MiB claimed, 4 KiB sent
        try:
            for sock in socks:
                sock.sendall(struct.pack(">i", FRAME) + bytes(100))
            assert _api_versions_v0(server.kafka_port)[0] == 0  # not held back by the claims
        finally:
            for sock in socks:
                sock.close()


def test_a_request_dribbled_past_the_read_timeout_closes_the_connection(tmp_path: Path) -> None:
    with running_walgate(tmp_path, "--request-read-timeout-ms", "1000") as server:
        with _connect(server.kafka_port) as sock:  # within the timeout: answered
            request = struct.pack(">i", len(_header_v1(18, 0, 3))) + _header_v1(18, 0, 3)
            for i in range(0, len(request), 8):
                sock.sendall(request[i: i + 8])
                time.sleep(0.05)
            assert _parse_api_versions_v0(_recv_frame(sock), 3)[0] == 0
        with _connect(server.kafka_port) as sock:
            sock.sendall(struct.pack(">i", 100) + b"\x00\x12")  # 100 bytes announced
            closed = False
            deadline = time.monotonic() + 10  # the request would take 20 s at this pace
            while not closed and time.monotonic() < deadline:
                try:
                    sock.sendall(b"\x00")  # never idle, never done
                except OSError:
                    closed = True
                    break
                if select.select([sock], [], [], 0.2)[0]:
                    closed = _closed(sock)
            assert closed
        assert "request not received in full within 1000 ms" in server.log()
        assert _api_versions_v0(server.kafka_port)[0] == 0


BURST = 1000


@pytest.mark.skipif(int(Path("/proc/sys/net/core/somaxconn").read_text()) < BURST,
                    reason=f"net.core.somaxconn below {BURST} caps any listen backlog")
def test_a_burst_of_connections_waits_in_the_listen_backlog(tmp_path: Path) -> None:
    with running_walgate(tmp_path) as server:
        socks: list[socket.socket] = []
        os.kill(server.proc.pid, signal.SIGSTOP)  # nothing accepts: the kernel queues up to the backlog
        try:
            with selectors.DefaultSelector() as sel:
                for _ in range(BURST):
                    sock = socket.socket()
                    sock.setblocking(False)
                    sock.connect_ex(("127.0.0.1", server.kafka_port))
                    socks.append(sock)
                    sel.register(sock, selectors.EVENT_WRITE)
                established = 0
                deadline = time.monotonic() + 15
                while established < BURST and time.monotonic() < deadline:
                    for key, _ in sel.select(timeout=0.5):
                        sel.unregister(key.fileobj)
                        assert key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                        established += 1
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        try:
            assert established == BURST
            socks[-1].setblocking(True)
            socks[-1].settimeout(TIMEOUT)
            socks[-1].sendall(struct.pack(">i", len(_header_v1(18, 0, 9))) + _header_v1(18, 0, 9))
            assert _parse_api_versions_v0(_recv_frame(socks[-1]), 9)[0] == 0
        finally:
            for sock in socks:
                sock.close()
        assert _api_versions_v0(server.kafka_port)[0] == 0
        assert "Traceback" not in server.log()


OPEN_FILES = 1024


def _lower_open_files_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))  # what `ulimit -n 1024` sets


def _lower_soft_open_files_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, OPEN_FILES))


def test_serve_raises_the_soft_open_files_limit_to_the_hard_one(tmp_path: Path) -> None:
    with running_walgate(tmp_path, preexec_fn=_lower_soft_open_files_limit) as server:
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text().splitlines()
        soft, hard = next(line for line in limits if line.startswith("Max open files")).split()[3:5]
        assert (soft, hard) == (str(OPEN_FILES), str(OPEN_FILES))
        assert f"open files limit: {OPEN_FILES} (hard limit {OPEN_FILES})" in server.log()


def _create(admin: AdminClient, name: str, partitions: int) -> Exception | None:
    try:
        admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=30, request_timeout=60)[name].result(90)
    except Exception as exc:  # a clear refusal is allowed; checked by the caller
        return exc
    return None


def _partition_counts(port: int) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=60)
    return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}


def test_wide_topics_at_ulimit_1024_then_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_walgate(tmp_path / "first", data_dir=data, preexec_fn=_lower_open_files_limit) as server:
        assert f"open files limit: {OPEN_FILES} (hard limit {OPEN_FILES})" in server.log()
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.kafka_port}"})
        assert _create(admin, "wide0", 400) is None  # one CreateTopics(400) made the server unusable before
        created = {"wide0": 400}
        for name in ("wide1", "wide2"):
            refused = _create(admin, name, 400)
            if refused is None:
                created[name] = 400
            else:  # refusing is fine if it is a clear Kafka error, not a broken server
                assert "POLICY_VIOLATION" in str(refused) or "INVALID_PARTITIONS" in str(refused), refused
        for _ in range(3):  # every client gets Metadata
            assert _partition_counts(server.kafka_port) == created
    with running_walgate(tmp_path / "second", data_dir=data, preexec_fn=_lower_open_files_limit) as again:
        assert _partition_counts(again.kafka_port) == created
    for run in (server, again):  # both served and stopped cleanly
        assert run.proc.returncode == 0
        assert "Traceback" not in run.log() and "Too many open files" not in run.log(), run.log()[-3000:]
