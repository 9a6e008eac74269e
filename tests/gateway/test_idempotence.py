"""An idempotent producer whose connections are cut mid-flight writes every record exactly once, in order.

A TCP proxy between the client and walgate (walgate advertises the proxy's port, so every connection goes
through it) drops all open connections every 100 records while a confluent-kafka producer (enable.idempotence,
acks=all) sends; answers get lost, librdkafka resends the same batches with the same sequence numbers, and
walgate must recognise them (the answer of a retry is the original offset).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from livewalgate import free_port, running_walgate
from walgate.storage.engine import Engine
from walgate.wire import decode_batches

RECORDS = 3000


class Chopper:
    """127.0.0.1:listen -> 127.0.0.1:target; :meth:`cut` closes every connection it carries."""

    def __init__(self, listen: int, target: int) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", listen))
        self.server.settimeout(0.2)
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.cuts = 0
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            with self.lock:
                self.open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def wait_open(self, timeout: float) -> None:
        """Wait (at most ``timeout`` s) until the client has a connection through the proxy again."""
        deadline = time.monotonic() + timeout
        while not self.open and time.monotonic() < deadline:
            time.sleep(0.005)

    def cut(self) -> None:
        with self.lock:
            victims, self.open = self.open, []
        for s in victims:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self.cuts += bool(victims)

    def close(self) -> None:
        self.stopped.set()
        self.cut()
        self.server.close()


def test_retries_after_cut_connections_leave_no_duplicates(tmp_path: Path) -> None:
    proxy_port = free_port()
    with running_walgate(tmp_path, "--advertised-port", str(proxy_port)) as server:
        chopper = Chopper(proxy_port, server.kafka_port)
        try:
            bootstrap = f"127.0.0.1:{proxy_port}"
            admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the future resolves
            admin.create_topics([NewTopic("idem", 1, 1)])["idem"].result(30)
            p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 1,
                          "batch.num.messages": 20, "message.timeout.ms": 90000, "reconnect.backoff.ms": 10})
            delivered: list[int] = []
            failed: list[str] = []

            def report(err, msg) -> None:  # noqa: ANN001
                if err is None:
                    delivered.append(int(msg.value()))
                else:
                    failed.append(str(err))

            for i in range(RECORDS):
                p.produce("idem", str(i).encode(), partition=0, on_delivery=report)
                if i % 100 == 99:  # let the client reconnect and send, then cut while batches are in flight
                    p.poll(0.08)
                    chopper.wait_open(5)
                    chopper.cut()
            deadline = time.monotonic() + 90
            while p.flush(1) and time.monotonic() < deadline:
                chopper.cut()
            assert not failed and len(delivered) == RECORDS, (failed[:3], len(delivered))
            assert chopper.cuts >= 10, "the connections were hardly cut: the test proves nothing"
        finally:
            chopper.close()

    # walgate has stopped; what it stored (read through its own engine): exactly 0..RECORDS-1, in order
    engine = Engine.open(server.data_dir)
    try:
        assert engine.watermarks("idem", 0) == (0, RECORDS)
        values = []
        for _, version, _ in engine.index_entries("idem", 0, 0):
            values += [int(r.value) for b in decode_batches(engine.kafka_batch("idem", 0, version)) for r in b.records]
        assert values == list(range(RECORDS))
    finally:
        engine.close()
