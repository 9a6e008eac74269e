"""The history workload of the crash tests (test_history_kill.py: SIGKILL; test_power_cut_history.py: power cuts
losing unsynced writes): confluent-kafka clients against one ``walgate serve`` crashed several times under load and
restarted on the same data dir and port, their history for the checker (history.py).

A client process runs idempotent ``acks=all`` producers (each value unique), a transactional producer (two values
a transaction, one per partition, one transaction in four aborted) and an assigned ``read_committed`` consumer
reading both partitions from offset 0 (``auto.offset.reset=earliest``: a log that came back shorter than what it had
read sends it back, which the checker sees as a non-monotonic poll), printing what it invoked, what was acknowledged
(with its offset) or refused, and every record read. After the crashes :func:`crash_loop` acknowledges one more
value per partition and reads both partitions from the start up to it, so every acknowledged write lies below what
was read: the checker then reports any acknowledged or committed write lost, value duplicated, offset holding two
values, aborted or phantom read, and any consumer going back or skipping, across every crash.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from history import Assign, Op, Poll, Send, Write

from livewalgate import WalgateServer, free_port, running_walgate

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

__all__ = ["crash_loop", "history_of", "finish", "TOPIC", "PARTITIONS", "CONSUMER", "DRAIN"]

TOPIC = "hist"
PARTITIONS = 2
PRODUCERS = 2
CONSUMER = 100  # the client process's consumer, as a process of the history
DRAIN = 101  # the final reader
WAIT_S = 60.0

CLIENTS = """
import random, sys, threading
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

bootstrap, topic, producers, transactions = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
lock = threading.Lock()

def say(line):
    with lock:
        print(line, flush=True)

def produce(i):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "message.timeout.ms": 60000, "reconnect.backoff.max.ms": 200})
    def done(err, msg):
        value = int(msg.value())
        say(f"ok {value} {msg.partition()} {msg.offset()}" if err is None else f"err {value} {msg.partition()}")
    for n in range(1_000_000):
        value = i * 10_000_000 + n
        say(f"i {value} {value % 2}")
        p.produce(topic, str(value).encode(), partition=value % 2, on_delivery=done)
        p.poll(0.001)
        if n % 50 == 49:
            p.flush(30)

def transact(i):
    # transactions of two values (one per partition), one in four aborted: "t" when begun, then "tok" (committed,
    # with the offsets), "tab" (aborted) or "tinfo" (the outcome is unknown)
    rng = random.Random(i)
    p = None
    for n in range(0, 2_000_000, 2):
        if p is None:
            p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "hist-txn", "linger.ms": 5,
                          "transaction.timeout.ms": 10000, "reconnect.backoff.max.ms": 200})
            try:
                p.init_transactions(30)
            except KafkaException:
                p = None
                continue
        values = (i * 10_000_000 + n, i * 10_000_000 + n + 1)
        offsets = {}
        def done(err, msg):
            if err is None:
                offsets[int(msg.value())] = msg.offset()
        say(f"t {values[0]} {values[1]}")
        try:
            p.begin_transaction()
            for k, v in enumerate(values):
                p.produce(topic, str(v).encode(), partition=k, on_delivery=done)
            if rng.random() < 0.25:
                p.abort_transaction(30)
                say(f"tab {values[0]}")
            else:
                p.commit_transaction(30)
                p.poll(0)
                say(f"tok {values[0]} {offsets.get(values[0], -1)} {offsets.get(values[1], -1)}")
        except KafkaException as e:
            try:
                if e.args[0].txn_requires_abort():
                    p.abort_transaction(30)
                    say(f"tab {values[0]}")
                    continue
            except KafkaException:
                pass
            say(f"tinfo {values[0]}")
            p = None  # a fatal or unknown state: a new producer fences the old one (init_transactions)

def consume():
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hist-reader", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "reconnect.backoff.max.ms": 200})
    c.assign([TopicPartition(topic, p, 0) for p in range(2)])
    say("a")
    while True:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            say(f"r {m.partition()} {m.offset()} {int(m.value())}")

threads = [threading.Thread(target=produce, args=(i,), daemon=True) for i in range(producers)]
if transactions:
    threads.append(threading.Thread(target=transact, args=(producers,), daemon=True))
threads.append(threading.Thread(target=consume, daemon=True))
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def count(out: Path, kind: str) -> int:
    return sum(1 for line in out.read_text().splitlines() if line.startswith(kind + " "))


def wait_for(out: Path, kind: str, n: int, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while count(out, kind) < n:
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_S:g} s: {what} ({count(out, kind)} of {n})")
        time.sleep(0.1)


def history_of(out: Path) -> list[Op]:
    """The client process's output as a history: a send with no answer (the process was killed) is unknown."""
    invoked: dict[int, str] = {}
    answered: dict[int, Send] = {}
    txns: dict[int, Send] = {}  # by the first value: begun (info) until committed (ok) or aborted (fail)
    polls: list[Op] = []
    for line in out.read_text().splitlines():
        kind, *fields = line.split()
        if kind == "i" and len(fields) == 2:
            invoked[int(fields[0])] = f"p{fields[1]}"
        elif kind == "ok" and len(fields) == 3:
            value = int(fields[0])
            answered[value] = Send(value // 10_000_000, (Write(f"p{fields[1]}", value, int(fields[2])),), "ok")
        elif kind == "err" and len(fields) == 2:  # a timed-out send may still have been written: unknown
            value = int(fields[0])
            answered[value] = Send(value // 10_000_000, (Write(f"p{fields[1]}", value),), "info")
        elif kind == "t" and len(fields) == 2:
            txns[int(fields[0])] = Send(PRODUCERS, tuple(Write(f"p{k}", int(v)) for k, v in enumerate(fields)),
                                        "info")
        elif kind == "tok" and len(fields) == 3:
            first = int(fields[0])
            offsets = [int(o) if int(o) >= 0 else None for o in fields[1:]]
            txns[first] = Send(PRODUCERS, tuple(Write(w.key, w.value, o) for w, o in zip(txns[first].writes, offsets)),
                               "ok")
        elif kind == "tab" and len(fields) == 1:
            txns[int(fields[0])] = Send(PRODUCERS, txns[int(fields[0])].writes, "fail")
        elif kind == "a":
            polls.append(Assign(CONSUMER))
        elif kind == "r" and len(fields) == 3:
            polls.append(Poll(CONSUMER, {f"p{fields[0]}": [(int(fields[1]), int(fields[2]))]}))
        # a line cut short by the SIGKILL of the client process is no operation
    sends: list[Op] = [answered.get(v) or Send(v // 10_000_000, (Write(key, v),), "info")
                       for v, key in invoked.items()]
    return sends + list(txns.values()) + polls


def finish(bootstrap: str) -> list[Op]:
    """One acknowledged value per partition, then every record of both partitions up to it, read by one consumer."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    acked: dict[int, int] = {}
    ops: list[Op] = []
    for p in range(PARTITIONS):
        value = 900_000_000 + p

        def done(err, msg, value: int = value) -> None:  # noqa: ANN001
            assert err is None, err
            acked[msg.partition()] = msg.offset()
            ops.append(Send(DRAIN, (Write(f"p{msg.partition()}", value, msg.offset()),), "ok"))

        producer.produce(TOPIC, str(value).encode(), partition=p, on_delivery=done)
    assert producer.flush(WAIT_S) == 0 and len(acked) == PARTITIONS
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "hist-drain",
                                         "enable.auto.commit": False})
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        ops.append(Assign(DRAIN))
        position = {p: -1 for p in range(PARTITIONS)}
        deadline = time.monotonic() + WAIT_S
        while any(position[p] < acked[p] for p in range(PARTITIONS)):
            assert time.monotonic() < deadline, f"read up to {position}, not to {acked}"
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                position[m.partition()] = m.offset()
                ops.append(Poll(DRAIN, {f"p{m.partition()}": [(m.offset(), int(m.value()))]}))
    finally:
        consumer.close()
    return ops


def crash_loop(tmp_path: Path, crash: Callable[[WalgateServer], None], crashes: int, *,
               topic_config: dict[str, str] | None = None, env: dict[str, str] | None = None,
               settle: bool = True, transactions: bool = True) -> list[Op]:
    """The history of the workload against one server (``env``: its environment) crashed ``crashes`` times by
    ``crash`` under load, each time after a few hundred more acknowledgements and 50 more reads, and restarted
    (``settle``: then 200 more acknowledgements and 50 more reads are waited for before the final reads); the topic
    is made with ``topic_config``; ``transactions``: the transactional producer runs too. No server log may hold a
    traceback."""
    rng = random.Random(24)
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    data_dir = tmp_path / "data"
    out = tmp_path / "clients.out"
    clients: subprocess.Popen[bytes] | None = None
    try:
        for cycle in range(crashes):
            with running_walgate(tmp_path / f"run{cycle}", data_dir=data_dir, kafka_port=port, env=env) as server:
                if clients is None:
                    admin = AdminClient({"bootstrap.servers": bootstrap})
                    new = NewTopic(TOPIC, PARTITIONS, 1, config=topic_config or {})
                    admin.create_topics([new])[TOPIC].result(timeout=30)
                    with open(out, "wb") as f:
                        clients = subprocess.Popen([sys.executable, "-c", CLIENTS, bootstrap, TOPIC, str(PRODUCERS),
                                                    "1" if transactions else "0"], stdout=f, stderr=subprocess.DEVNULL)
                wait_for(out, "ok", count(out, "ok") + rng.randint(200, 800), f"acknowledgements in run {cycle}")
                wait_for(out, "r", count(out, "r") + 50, f"reads in run {cycle}")
                crash(server)  # mid-load: sends and reads in flight
        with running_walgate(tmp_path / "final", data_dir=data_dir, kafka_port=port, env=env):
            if settle:
                wait_for(out, "ok", count(out, "ok") + 200, "acknowledgements after the last restart")
                wait_for(out, "r", count(out, "r") + 50, "reads after the last restart")
            assert clients is not None
            clients.kill()
            clients.wait(30)
            history = history_of(out) + finish(bootstrap)
    finally:
        if clients is not None and clients.poll() is None:
            clients.kill()
            clients.wait(30)
    for log in sorted(tmp_path.glob("*/walgate.log")):
        assert "Traceback" not in log.read_text(errors="replace"), log
    return history
