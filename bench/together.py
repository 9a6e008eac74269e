"""Client processes that run at once: several producers or committers against one server, as separate
applications would (one spawned process each: its own GIL and librdkafka, no fork of librdkafka's threads).

The clock starts when every process is connected and waiting at a barrier; the server's CPU-seconds
(utime + stime from /proc/<pid>/stat) are counted over the same time, so a row can say what each record cost
the server as well as how many went through.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from bench.servers import cpu_seconds

SETUP_TIMEOUT = 120.0  # seconds a process may take to connect before the run fails


@dataclass
class Gate:
    """What a process's work sees: ``open()`` once set up (returns when all are), ``running`` until told to stop."""

    barrier: Barrier
    stop: Event

    def open(self) -> None:
        self.barrier.wait(SETUP_TIMEOUT)

    @property
    def running(self) -> bool:
        return not self.stop.is_set()


Work = Callable[..., tuple[int, float]]
"""``work(*args, gate)``: connects, calls ``gate.open()``, then works until done (or until ``gate.running`` is
False); returns (operations done, ``time.perf_counter()`` when it finished). A module-level function (pickled)."""


@dataclass
class Tally:
    """Operations of all processes, seconds from the common start to the last one's end, server CPU-seconds."""

    count: int = 0
    seconds: float = 0.0
    cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.count / self.seconds

    def cpu_per_million(self) -> float:
        return self.cpu / self.count * 1e6


def _child(work: Work, args: tuple[Any, ...], gate: Gate, out: Queue[tuple[int, float] | str]) -> None:
    try:
        out.put(work(*args, gate))
    except BaseException as e:  # the parent raises it instead of waiting for a result that never comes
        gate.barrier.abort()
        out.put(f"{type(e).__name__}: {e}")


@contextlib.contextmanager
def at_once(work: Work, argsets: list[tuple[Any, ...]], pid: int) -> Iterator[Tally]:
    """One process per argument tuple running ``work``; the block runs once all are connected and started, then
    they are told to stop (work that ends by itself just finishes) and the yielded :class:`Tally` is filled in,
    with the CPU-seconds the server process ``pid`` spent in the meantime."""
    ctx = multiprocessing.get_context("spawn")
    gate = Gate(ctx.Barrier(len(argsets) + 1), ctx.Event())
    out: Queue[tuple[int, float] | str] = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(work, args, gate, out)) for args in argsets]
    for p in procs:
        p.start()
    tally = Tally()
    try:
        try:
            gate.open()
        except threading.BrokenBarrierError:  # a process failed while setting up
            raise RuntimeError(f"a client process failed: {out.get(timeout=30)}") from None
        cpu, start = cpu_seconds(pid), time.perf_counter()
        yield tally
        gate.stop.set()
        results = [out.get(timeout=600) for _ in procs]
        tally.cpu = cpu_seconds(pid) - cpu
        done = [r for r in results if not isinstance(r, str)]
        if len(done) < len(results):
            raise RuntimeError(f"a client process failed: {next(r for r in results if isinstance(r, str))}")
        tally.count = sum(n for n, _ in done)
        tally.seconds = max(end for _, end in done) - start
    finally:
        gate.stop.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(10)
