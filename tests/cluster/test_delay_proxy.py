"""Delayed, stalled and cut links (delay_proxy.py): the proxy itself on a TCP echo server; confluent-kafka's
idempotent producer writing to a real ``walgate serve`` through 200 ms each way, with a stall longer than its
request timeout (no value lost or duplicated) and message timeouts that fire as configured; a node's link to etcd slowed
within what its lease allows (the registration is kept) and beyond its session timeout (lost, then made again once
the link is fast).

Only lower bounds of time are asserted (a loaded machine is never faster than the delay it was given)."""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from delay_proxy import Delay, delay_proxy
from etcd_cluster import EtcdCluster
from history import Assign, Op, Poll, Send, Write, check
from serve_support import eventually, no_traceback, registered_nodes, wait_log

from livewalgate import free_port, running_walgate
from walgate.cluster.model import Keys

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC = "slow"
PARTITIONS = 2


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


@contextmanager
def echo_server() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[0], server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(30)


def receive(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = sock.recv(n - len(got))
        if not chunk:
            break
        got += chunk
    return got


def test_the_proxy_delays_each_direction_in_order_pauses_and_cuts() -> None:
    with echo_server() as target, delay_proxy(target, seed=1) as proxy:
        proxy.set_delay(Delay(100), Delay(150, jitter_ms=50))
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            start = time.monotonic()
            sock.sendall(b"ping")
            assert receive(sock, 4) == b"ping"
            assert time.monotonic() - start >= 0.25  # 100 ms up, at least 150 ms down
            stream = b"".join(b"%05d" % i for i in range(300))  # many chunks, each with its own jitter
            for i in range(0, len(stream), 50):
                sock.sendall(stream[i:i + 50])
            assert receive(sock, len(stream)) == stream  # in order
            proxy.set_delay(Delay(0))
            proxy.pause()
            sock.sendall(b"held")
            sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                sock.recv(4)
            proxy.resume()
            sock.settimeout(30)
            assert receive(sock, 4) == b"held"
            assert proxy.cut() == 1
            try:
                assert sock.recv(4) == b""
            except ConnectionResetError:
                pass
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:  # still accepting
            sock.sendall(b"again")
            assert receive(sock, 5) == b"again"
        assert proxy.accepted == 2


def test_an_idempotent_producer_through_a_slow_and_stalling_link_writes_each_value_once(tmp_path: Path) -> None:
    """Every connection of the clients goes through the proxy (walgate advertises the proxy's port): 200 ms each
    way with 50 ms jitter; a 3 s stall mid-load, longer than ``socket.timeout.ms`` (1 s: librdkafka's timeout of a
    ProduceRequest), makes the producer send requests again that the stalled link still delivers afterwards; later
    every connection is reset mid-load. Then a producer whose ``message.timeout.ms`` (1.5 s) is
    shorter than a stall gets _MSG_TIMED_OUT for each message, none before that timeout."""
    kafka_port = free_port()
    with delay_proxy(("127.0.0.1", kafka_port), seed=2) as proxy, \
            running_walgate(tmp_path, "--advertised-host", "127.0.0.1", "--advertised-port", str(proxy.port),
                            kafka_port=kafka_port) as server:
        bootstrap = f"127.0.0.1:{proxy.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={"flush.messages": "1"})])[TOPIC].result(timeout=30)
        proxy.set_delay(Delay(200, jitter_ms=50))
        history: list[Op] = []
        stats: list[dict[str, Any]] = []
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                             "acks": "all", "linger.ms": 5, "socket.timeout.ms": 1000,
                                             "message.timeout.ms": 60000, "statistics.interval.ms": 200,
                                             "stats_cb": lambda raw: stats.append(json.loads(raw))})

        def report(err: KafkaError | None, msg: confluent_kafka.Message) -> None:
            value = int(msg.value())
            write = Write(f"p{msg.partition()}", value, msg.offset() if err is None else None)
            history.append(Send(0, (write,), "ok" if err is None else "info"))

        for value in range(300):
            producer.produce(TOPIC, str(value).encode(), partition=value % PARTITIONS, on_delivery=report)
            if value == 99:
                assert producer.flush(60) == 0  # connected, producer id given: what follows is sent at once ...
                proxy.pause()  # ... into a stalled link
            elif value == 199:
                time.sleep(3.0)  # past socket.timeout.ms: librdkafka times the requests out and sends them again
                proxy.resume()  # the originals and the retries all arrive, in any order
            elif value == 249:
                time.sleep(0.3)  # sent; answered at the earliest 400 ms after (unless this thread was held up) ...
                assert proxy.cut() >= 1  # ... when every connection is reset: what was unanswered is sent again
        assert producer.flush(60) == 0
        assert len(history) == 300 and all(op.outcome == "ok" for op in history if isinstance(op, Send))
        producer.poll(0.5)  # the statistics after the flush
        timeouts = max(sum(b["req_timeouts"] for b in s["brokers"].values()) for s in stats)
        assert timeouts >= 1, "the stall timed out requests in flight (librdkafka's req_timeouts)"

        # message.timeout.ms as configured: a stalled link makes every message of a new producer time out
        late = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                         "message.timeout.ms": 1500})
        failed: dict[int, float] = {}

        def timed_out(err: KafkaError | None, msg: confluent_kafka.Message) -> None:
            assert err is not None and err.code() == KafkaError._MSG_TIMED_OUT, err
            failed[int(msg.value())] = time.monotonic()
            history.append(Send(1, (Write(f"p{msg.partition()}", int(msg.value())),), "info"))

        proxy.pause()
        produced_at = time.monotonic()
        for value in range(1000, 1010):
            late.produce(TOPIC, str(value).encode(), partition=value % PARTITIONS, on_delivery=timed_out)
        assert late.flush(30) == 0
        proxy.resume()
        assert sorted(failed) == list(range(1000, 1010))
        assert min(failed.values()) - produced_at >= 1.5

        proxy.set_delay(Delay(0))
        history += read_all(bootstrap, 300)
        no_traceback(server)
    assert check(history) == []
    offsets = {p: sorted(w.offset for op in history if isinstance(op, Send) for w in op.writes
                         if w.key == f"p{p}" and w.offset is not None) for p in range(PARTITIONS)}
    assert offsets == {p: list(range(150)) for p in range(PARTITIONS)}  # each value once: no gap, no duplicate


def read_all(bootstrap: str, count: int) -> list[Op]:
    """Every record of both partitions from offset 0, read by one consumer until ``count`` were read and the
    partitions' ends reached (bounded)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "slow-reader",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    ops: list[Op] = [Assign(2)]
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        at_end: set[int] = set()
        read = 0
        for _ in range(600):
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                read += 1
                at_end.discard(m.partition())
                ops.append(Poll(2, {f"p{m.partition()}": [(m.offset(), int(m.value()))]}))
            elif m is not None and m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
            if read >= count and len(at_end) == PARTITIONS:
                break
        else:
            pytest.fail(f"read {read} of {count} records")
    finally:
        consumer.close()
    return ops


SESSION_MS = 3000  # broker.session.timeout.ms: a 3 s lease, kept alive every second


def test_a_node_keeps_its_registration_through_a_slow_link_to_etcd_and_loses_it_beyond_its_session(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    """The node reaches etcd only through the proxy (the test reads etcd directly). 200 ms each way (100 ms jitter)
    for two session timeouts: the first registration stays, never lost. 4 s each way, more than the session
    timeout: etcd lets the lease go (the node logs it lost). Fast again: the node registers again, under the same
    broker epoch (the same process, its log intact: KIP-903)."""
    member = etcd1.members[0]
    with delay_proxy((member.host, member.client_port), seed=3) as proxy:
        proxy.set_delay(Delay(200, jitter_ms=100))
        with running_walgate(tmp_path, "--cluster", f"etcd=http://127.0.0.1:{proxy.port}", "--node-id", "1",
                             "--override", f"broker.session.timeout.ms={SESSION_MS}") as server:
            wait_log(server, "node 1 registered: broker epoch")
            key = Keys("walgate").node(1)
            time.sleep(2 * SESSION_MS / 1000)  # keep-alives through the slow link, each answered in time
            assert key in registered_nodes(etcd1)
            assert len(epochs(server.log())) == 1
            assert "lost" not in server.log()

            proxy.set_delay(Delay(4000))
            wait_log(server, "node 1: registration (broker epoch")  # "... lost: ..."
            eventually("etcd let node 1's lease go", lambda: key not in registered_nodes(etcd1))

            proxy.set_delay(Delay(0))
            eventually("node 1 registered again", lambda: len(epochs(server.log())) == 2)
            first, second = epochs(server.log())
            assert second == first
            eventually("node 1 is in etcd again", lambda: key in registered_nodes(etcd1))
            no_traceback(server)


def epochs(log: str) -> list[int]:
    return [int(e) for e in re.findall(r"node 1 registered(?: again)?: broker epoch (\d+)", log)]
