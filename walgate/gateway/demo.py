"""``walgate demo``: a node on an embedded data dir with meters data streaming in, and how to consume it.

It serves Kafka and HTTP in-process, creates TDengine's ``power`` example
(database ``power`` with 4 vgroups, supertable ``meters``, 100 subtables over
10 locations), a query topic ``topic_meters`` and a database topic
``topic_power``, prints the exact kcat / kafka-console-consumer / Spark
commands that read them, then inserts rows at a steady rate with a live
progress display until Ctrl-C (or ``--duration``). ``--consume`` also runs a
consumer group (aiokafka, group ``demo-group``) inside the demo and shows its
records arriving and ``SHOW SUBSCRIPTIONS``. Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from walgate.gateway.cli import ApiClient, ApiError, render_result
from walgate.gateway.config import Config

__all__ = ["run_demo"]

CITIES = ("SanFrancisco", "LosAngeles", "SanDiego", "SanJose", "PaloAlto", "Campbell", "MountainView",
          "Sunnyvale", "SantaClara", "Cupertino")
TABLES = 100
GROUP = "demo-group"
def setup(vgroups: int = 4) -> tuple[str, ...]:
    """The statements making the demo's database (``vgroups`` vgroups), supertable and topics."""
    return (
        f"CREATE DATABASE IF NOT EXISTS power VGROUPS {vgroups}",
        "CREATE STABLE IF NOT EXISTS power.meters (ts TIMESTAMP, current FLOAT, voltage INT, phase FLOAT)"
        " TAGS (location VARCHAR(64), groupid INT)",
        "CREATE TOPIC IF NOT EXISTS topic_meters AS SELECT ts, current, voltage, phase, groupid, location"
        " FROM power.meters WHERE voltage > 200",
        "CREATE TOPIC IF NOT EXISTS topic_power WITH META AS DATABASE power",
    )


SETUP = setup()


def subtables() -> list[str]:
    """The statements creating the 100 subtables d1000..d1099 (10 per location, group ids 1..10)."""
    return [
        f"CREATE TABLE IF NOT EXISTS power.d{1000 + i} USING power.meters TAGS ('California.{CITIES[i % 10]}', {i // 10 + 1})"
        for i in range(TABLES)
    ]


def insert(rng: random.Random, rows: int, now_ms: int) -> str:
    """A multi-table INSERT of *rows* meters rows at *now_ms* (+ a few ms each, so no two collide)."""
    parts = []
    for k in range(rows):
        table = rng.randrange(TABLES)
        parts.append(f"power.d{1000 + table} VALUES ({now_ms + k}, {rng.uniform(8, 16):.2f}, "
                     f"{rng.randint(198, 235)}, {rng.uniform(0.25, 0.38):.3f})")
    return "INSERT INTO " + " ".join(parts)


@dataclass
class Progress:
    written: int = 0
    received: int = 0
    last: str = ""
    started: float = field(default_factory=time.monotonic)
    stopped: float | None = None  # when writing stopped

    def table(self, consume: bool) -> Table:
        elapsed = max((self.stopped or time.monotonic()) - self.started, 1e-9)
        t = Table(title="walgate demo (Ctrl-C stops)", show_header=False)
        t.add_row("rows written to power.meters", f"{self.written:,}", f"{self.written / elapsed:,.0f} rows/s")
        if consume:
            t.add_row(f"records received by {GROUP} (topic_meters)", f"{self.received:,}", escape(self.last[:90]))
        t.add_row("elapsed", f"{elapsed:,.1f} s", "")
        return t


def commands(host: str, kafka_port: int) -> list[str]:
    bootstrap = f"{host}:{kafka_port}"
    return [
        f"kcat -b {bootstrap} -C -t topic_meters -o beginning",
        f"kafka-console-consumer.sh --bootstrap-server {bootstrap} --topic topic_meters --from-beginning"
        " --property print.key=true",
        f"kafka-console-consumer.sh --bootstrap-server {bootstrap} --topic topic_meters --group my-group",
        "spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0 pipeline/meters.py"
        f" --bootstrap {bootstrap} --topic topic_meters --out out/ --checkpoint ckpt/",
        'walgate sql --url http://{http} "SHOW SUBSCRIPTIONS"',
    ]


CATCH_UP_S = 20.0  # the longest --consume waits for its group after the rows stop


async def _consume(bootstrap: str, progress: Progress, stop: asyncio.Event) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer("topic_meters", bootstrap_servers=bootstrap, group_id=GROUP,
                                auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=1000)
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                progress.received += len(records)
                progress.last = f"{records[-1].key.decode()} {records[-1].value.decode()}"
    finally:
        await consumer.stop()  # commits the positions and leaves the group


async def run_demo(config: Config, console: Console, *, rate: int, duration: float, consume: bool) -> int:
    """Serve *config*, set up the demo data, stream rows until Ctrl-C or *duration* seconds; 0 on success."""
    from walgate.gateway.server import Gateway

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Gateway(config) as gateway:
        host, http_port = gateway.http_address
        kafka_host, kafka_port = gateway.kafka_address
        client = ApiClient(f"http://{host}:{http_port}")
        console.print(f"[bold]walgate demo[/]: Kafka on {kafka_host}:{kafka_port}, HTTP on {client.url}, "
                      f"data in {escape(str(config.data_dir))}")
        try:
            for sql in (*SETUP, *subtables()):
                await asyncio.to_thread(client.sql, sql)
            console.print("[green]ok[/] database power (4 vgroups), supertable meters, 100 subtables d1000..d1099, "
                          "topics topic_meters (voltage > 200) and topic_power (WITH META, whole database)")
            console.print("\n[bold]Consume it with any Kafka client[/], for example:")
            for line in commands(kafka_host, kafka_port):
                console.print(f"  {escape(line.replace('{http}', f'{host}:{http_port}'))}", soft_wrap=True)
            console.print()
            progress = Progress()
            consumer = asyncio.create_task(_consume(f"{kafka_host}:{kafka_port}", progress, stop)) if consume else None
            rng = random.Random(1)
            deadline = time.monotonic() + duration if duration > 0 else float("inf")
            with Live(progress.table(consume), console=console, refresh_per_second=4, transient=False) as live:
                tick = 0.1
                start = progress.started = time.monotonic()
                while not stop.is_set() and time.monotonic() < deadline:
                    due = int((time.monotonic() - start) * rate) - progress.written  # a steady rate, whatever a write takes
                    if due > 0:
                        await asyncio.to_thread(client.sql, insert(rng, due, int(time.time() * 1000)))
                        progress.written += due
                    live.update(progress.table(consume))
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(tick):
                            await stop.wait()
                progress.stopped = time.monotonic()
                if consumer is not None:  # let the group catch up with the last rows: until it has some and
                    # nothing more comes for a second (joining the group can take seconds on a busy machine), at most
                    # CATCH_UP_S
                    seen, quiet_since = -1, time.monotonic()
                    while ((progress.written and not progress.received) or time.monotonic() - quiet_since < 1.0) \
                            and time.monotonic() - progress.stopped < CATCH_UP_S:
                        if progress.received != seen:
                            seen, quiet_since = progress.received, time.monotonic()
                        await asyncio.sleep(0.1)
                        live.update(progress.table(consume))
                stop.set()
                if consumer is not None:
                    await consumer
                live.update(progress.table(consume))
            if consume:
                console.print("\n[bold]> SHOW SUBSCRIPTIONS[/]")
                render_result(console, await asyncio.to_thread(client.sql, "SHOW SUBSCRIPTIONS"))
            console.print("\n[bold]> SELECT * FROM power.meters LIMIT 5[/]")
            render_result(console, await asyncio.to_thread(client.sql, "SELECT * FROM power.meters LIMIT 5"))
        except ApiError as e:
            console.print(f"[red]demo failed[/]: {escape(str(e))}")
            return 1
    console.print("\nwalgate demo finished; server stopped. Next: [bold]walgate serve --data-dir ./data[/]")
    return 0
