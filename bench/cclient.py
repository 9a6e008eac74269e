"""The C clients: a consumer (bench/cconsume.c) and a producer (bench/cproduce.c), librdkafka with nothing per record
but counting, so that the client bounds the fetch and small-record produce benchmarks as little as a real Kafka
client can.

It links the librdkafka that the confluent-kafka wheel bundles (the Python client's own, 2.x, which talks to both
brokers), with the system's ``rdkafka.h`` (Debian: librdkafka-dev); without a header or a C compiler, or when the
build fails, the C rows are left out with a message.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka

from bench.servers import cpu_seconds
from bench.together import Tally
from bench.tools import skipped

HEADER = Path("/usr/include/librdkafka/rdkafka.h")
BUILD = Path(__file__).resolve().parent.parent / ".cache" / "bench"


def children_cpu() -> float:
    """User + system CPU-seconds of this process's waited-for children so far (the C clients, once they exit)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build(name: str = "cconsume") -> Path | None:
    """The compiled client ``name`` (bench/<name>.c; rebuilt when the source is newer), or None with a printed
    reason. One binary per librdkafka it links (its path is in the binary's rpath: a build for another virtualenv
    does not load here)."""
    source = Path(__file__).with_name(f"{name}.c")
    rows = f"C {'consumer' if name == 'cconsume' else 'producer'} rows"
    cc = shutil.which("cc") or shutil.which("gcc")
    libs = sorted((Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*.so*"))
    if cc is None or not HEADER.exists() or not libs:
        skipped(rows, f"they need a C compiler, {HEADER} (Debian: apt-get install librdkafka-dev) and "
                "confluent-kafka's bundled librdkafka")
        return None
    binary = BUILD / f"{name}-{hashlib.sha256(str(libs[0]).encode()).hexdigest()[:12]}"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        BUILD.mkdir(parents=True, exist_ok=True)
        built = subprocess.run([cc, "-O2", "-o", str(binary), str(source), str(libs[0]),
                                f"-Wl,-rpath,{libs[0].parent}"], check=False, capture_output=True, text=True)
        if built.returncode != 0:
            skipped(rows, f"{source.name} does not build:\n{built.stderr.strip()[-2000:]}")
            return None
    return binary


CLIENT_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 31),
              "MALLOC_TOP_PAD_": str(1 << 28)}
"""glibc malloc thresholds for the consumer, as walgate sets its own (walgate/gateway/malloc.py): otherwise every
16 MiB fetch buffer of librdkafka is mmapped, page-faulted and unmapped, and one consumer reads ~0.57 GB/s with 0.75
of its 1.1 CPU-seconds per second in the kernel; with them ~1.0 GB/s, 0.35 of 0.75."""


def consume(binary: Path, bootstrap: str, topic: str, partition_sets: list[list[int]],
            expected: int, conf: dict[str, str] | None = None) -> tuple[int, int, float, float]:
    """(records, value bytes, seconds, client CPU-seconds) for one consumer process per partition set, reading at
    once, with the extra client settings ``conf``; start-up is not part of the seconds (but is of the
    CPU-seconds)."""
    before = children_cpu()
    procs = [subprocess.Popen([str(binary), bootstrap, topic, ",".join(map(str, parts)),
                               str(expected * len(parts) // sum(map(len, partition_sets))), "120",
                               *(f"{k}={v}" for k, v in (conf or {}).items())],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, **CLIENT_ENV})
             for parts in partition_sets]
    try:
        outs = [p.communicate(timeout=180)[0].split() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    cpu = children_cpu() - before
    # each process times itself from its first record; they start together, so the longest is the whole read
    return sum(int(o[0]) for o in outs), sum(int(o[1]) for o in outs), max(float(o[2]) for o in outs), cpu


@dataclass
class Produced(Tally):
    """A :class:`Tally` of C producers with the median and 99th percentile of their records' latencies (seconds from
    the produce call to the delivery report, bench/cproduce.c; the process's whose run was longest)."""

    p50: float = 0.0
    p99: float = 0.0
    client_cpu: float = 0.0  # the producers' own CPU-seconds over their whole run (start-up included)


def produce(binary: Path, bootstrap: str, topic: str, partitions: int, processes: int, count: int, size: int,
            acks: str, pid: int, queue: int = 1_000_000, idempotent: bool = True) -> Produced:
    """``processes`` C producers sending ``count`` records in all at once (started together once each has the
    topic's metadata), each with at most ``queue`` records queued or in flight (idempotent with acks=all unless
    ``idempotent`` is false: librdkafka's default), with the server ``pid``'s CPU-seconds over the same time and the
    producers' own over their whole run."""
    procs = [subprocess.Popen([str(binary), bootstrap, topic, str(partitions), str(count // processes), str(size), acks,
                               str(queue), "1" if idempotent else "0"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **CLIENT_ENV})
             for _ in range(processes)]
    before = children_cpu()
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{binary.name} did not start")
        cpu = cpu_seconds(pid)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=180)[0].split() for p in procs]
        cpu = cpu_seconds(pid) - cpu
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    client_cpu = children_cpu() - before
    # each process times itself from its go line; they are told at once, so the longest is the whole run
    longest = max(outs, key=lambda o: float(o[1]))
    return Produced(sum(int(o[0]) for o in outs), float(longest[1]), cpu, float(longest[2]), float(longest[3]),
                    client_cpu)
