"""Per-vnode write lanes (issue 23, plan step 6): the storage lane's calls that hold only some vnodes
(``StorageThread.call_on``) run beside each other, each vnode's calls in submission order, exclusive calls alone.

Ordering, never timing: a call is held on an Event the test owns, and what must not wait for it is answered before
the Event is set (waits are bounded only so that a node without lanes fails instead of hanging). Real clients
(confluent-kafka) produce and fetch on a Kafka-native topic while a large line-protocol write into another database
is held inside its WAL append; the engine-level tests drive the lane with a real engine: a write's subtable limit
and a refused second-vnode append under lanes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.gateway_helpers import gateway_thread, sql
from tests.gateway.test_engine_writes import FAULTS, TS, insert, second_append_refused, two_vnode_db, visible
from tests.gateway.test_query_lane import post
from tests.storage.faults import Faults
from tests.storage.write_requests import planned
from walgate.gateway.ingest_workers import PLAN_IN_WORKER_BYTES
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.durability import Unsynced
from walgate.storage.engine import Engine
from walgate.storage.errors import LimitExceeded, StorageUnavailable
from walgate.storage.ingest import write_keys
from walgate.storage.lanes import LaneViolation, Relane, VnodeKey, check_vnode, held
from walgate.storage.lineproto_columns import parse_body
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse
from walgate.storage.vnode import Vnode, vnode_of
from walgate.storage.wal import Wal
from walgate.storage.write_plan import InsertRequest, SchemaChangeNeeded

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

BOUND_S = 20.0
"""How long what must not wait may take before the test calls it blocked (a bound, not a speed)."""

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


@pytest.fixture(autouse=True)
def no_traceback(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A traceback logged by a node a test ran fails the test."""
    yield
    assert not [r.getMessage() for r in caplog.records if r.exc_info]


@pytest.fixture
async def lane() -> Any:
    lane = StorageThread(name="test-storage", vnode_threads=4)
    yield lane
    lane.shutdown()


def holder(release: threading.Event, log: list[str], name: str) -> Callable[[], str]:
    """A call that logs its start, then waits for ``release`` (bounded)."""
    def run() -> str:
        log.append(f"{name} start")
        assert release.wait(BOUND_S), "never released"
        return name
    return run


def quick(log: list[str], name: str) -> Callable[[], str]:
    def run() -> str:
        log.append(f"{name} start")
        return name
    return run


async def started(log: list[str], entry: str) -> None:
    """Return once ``entry`` is in ``log`` (bounded)."""
    async with asyncio.timeout(BOUND_S):
        while entry not in log:
            await asyncio.sleep(0.005)


# ----------------------------------------------------------------------------------------- the dispatcher


async def test_a_call_on_other_vnodes_is_answered_while_one_is_held(lane: StorageThread) -> None:
    release, log = threading.Event(), []
    held_call = asyncio.create_task(lane.call_on(frozenset({A0, A1}), holder(release, log, "a")))
    try:
        await started(log, "a start")
        assert await asyncio.wait_for(lane.call_on(frozenset({B0}), quick(log, "b")), BOUND_S) == "b"
        assert not release.is_set() and not held_call.done()
    finally:
        release.set()
    assert await held_call == "a"


async def test_crossing_vnode_sets_complete_in_submission_order_per_vnode(lane: StorageThread) -> None:
    """{0,1} then {1,0} then {1}: no deadlock, and each vnode's calls start in the order they were submitted."""
    release, log = threading.Event(), []
    first = asyncio.create_task(lane.call_on(frozenset({A0, A1}), holder(release, log, "01")))
    await started(log, "01 start")
    second = asyncio.create_task(lane.call_on(frozenset({A1, A0}), quick(log, "10")))
    third = asyncio.create_task(lane.call_on(frozenset({A1}), quick(log, "1")))
    other = asyncio.create_task(lane.call_on(frozenset({B0}), quick(log, "b")))
    try:
        assert await asyncio.wait_for(other, BOUND_S) == "b"
        assert not second.done() and not third.done() and "10 start" not in log and "1 start" not in log
    finally:
        release.set()
    assert await asyncio.wait_for(asyncio.gather(first, second, third), BOUND_S) == ["01", "10", "1"]
    assert [e for e in log if e != "b start"] == ["01 start", "10 start", "1 start"]


async def test_an_exclusive_call_waits_for_keyed_calls_and_is_not_starved(lane: StorageThread) -> None:
    """An exclusive call waits for the keyed calls running when it came; a keyed call on other vnodes may run
    meanwhile (it waits for those anyway), but once they ended no later keyed call passes it."""
    release_old, release_passer, log = threading.Event(), threading.Event(), []
    old = asyncio.create_task(lane.call_on(frozenset({A0}), holder(release_old, log, "old")))
    await started(log, "old start")
    exclusive = asyncio.create_task(lane.call(quick(log, "exclusive")))
    passer = asyncio.create_task(lane.call_on(frozenset({B0}), holder(release_passer, log, "passer")))
    try:
        await started(log, "passer start")  # ran while the exclusive call waited for "old"
        release_old.set()
        assert await old == "old"
        late = asyncio.create_task(lane.call_on(frozenset({A1}), quick(log, "late")))
        await asyncio.sleep(0.05)
        assert "late start" not in log and "exclusive start" not in log  # behind the exclusive one, which waits
    finally:
        release_old.set()
        release_passer.set()
    assert await asyncio.wait_for(asyncio.gather(exclusive, passer, late), BOUND_S) == ["exclusive", "passer", "late"]
    assert log.index("passer start") < log.index("exclusive start") < log.index("late start")


async def test_a_background_call_never_passes_an_exclusive_call_so_holding_it_delays_no_other_vnode(
        lane: StorageThread) -> None:
    """A background step submitted while an exclusive call waits for an older keyed call starts only after the
    exclusive call (a request's keyed call would pass it); held then, it delays no call on another vnode, also
    with another exclusive call waiting for it. (Had it passed the first exclusive call, that call would wait for
    it, and every later call behind that one: the log cleaner's step in CI, test_cleaner_keyed.)"""
    release_old, release_step, log = threading.Event(), threading.Event(), []
    old = asyncio.create_task(lane.call_on(frozenset({A0}), holder(release_old, log, "old")))
    await started(log, "old start")
    exclusive = asyncio.create_task(lane.call(quick(log, "exclusive")))
    step = asyncio.create_task(lane.call_on(frozenset({A1}), holder(release_step, log, "step"), background=True))
    try:
        await asyncio.sleep(0.05)
        assert "step start" not in log  # a request's call on A1 would have started (the test above)
        release_old.set()
        await started(log, "step start")
        assert log.index("exclusive start") < log.index("step start")
        second = asyncio.create_task(lane.call(quick(log, "second")))
        assert await asyncio.wait_for(lane.call_on(frozenset({B0}), quick(log, "b")), BOUND_S) == "b"
        assert not step.done() and "second start" not in log
    finally:
        release_old.set()
        release_step.set()
    assert await asyncio.wait_for(asyncio.gather(old, exclusive, step, second), BOUND_S) == [
        "old", "exclusive", "step", "second"]


async def test_a_keyed_call_that_needs_more_runs_again_exclusive(lane: StorageThread) -> None:
    seen: list[frozenset[VnodeKey] | None] = []

    def needs_everything() -> str:
        seen.append(held())
        if held() is not None:
            raise Relane
        return "ran"

    assert await lane.call_on(frozenset({A0}), needs_everything) == "ran"
    assert seen == [frozenset({A0}), None] and lane.relaned == 1


async def test_a_relaned_call_runs_again_the_caller_s_exclusive_way(lane: StorageThread) -> None:
    """A cluster node's Broker runs a relaned call as a staged call (what it changes in the catalog goes through the
    controller), not as a bare exclusive call: ``call_on`` runs it through the ``exclusive`` it was given."""
    ways: list[str] = []

    def needs_everything() -> str:
        if held() is not None:
            raise Relane
        return "ran"

    async def staged() -> str:
        ways.append("staged")
        return await lane.call(needs_everything)

    assert await lane.call_on(frozenset({A0}), needs_everything, staged) == "ran"
    assert ways == ["staged"] and lane.relaned == 1


async def test_a_queued_keyed_call_cancelled_before_it_starts_never_runs(lane: StorageThread) -> None:
    release, log = threading.Event(), []
    first = asyncio.create_task(lane.call_on(frozenset({A0}), holder(release, log, "first")))
    await started(log, "first start")
    queued = asyncio.create_task(lane.call_on(frozenset({A0}), quick(log, "dropped")))
    await asyncio.sleep(0.01)
    assert lane.queued == 1
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert lane.queued == 0
    release.set()
    assert await first == "first"
    assert await lane.call_on(frozenset({A0}), quick(log, "after")) == "after"
    assert "dropped start" not in log


async def test_a_keyed_call_touching_a_vnode_it_does_not_hold_is_refused(lane: StorageThread) -> None:
    with pytest.raises(LaneViolation):
        await lane.call_on(frozenset({A0}), functools.partial(check_vnode, "a", 1))
    await lane.call(check_vnode, "a", 1)  # exclusive: everything


async def test_a_call_after_the_lane_stopped_is_refused_not_left_waiting() -> None:
    lane = StorageThread(name="test-stopped", vnode_threads=1)
    lane.shutdown()
    log: list[str] = []
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(lane.call_on(frozenset({A0}), quick(log, "keyed")), BOUND_S)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(lane.call(quick(log, "exclusive")), BOUND_S)
    assert lane.queued == 0 and log == []


def test_each_thread_takes_only_the_durability_needs_it_noted() -> None:
    """Calls on vnode lanes run at once: each takes at its end what its own writes noted, never another's."""
    unsynced = Unsynced(lambda _: None)
    files = [object(), object()]
    with concurrent.futures.ThreadPoolExecutor(1) as other:
        other.submit(unsynced.note, files[1], 7).result()  # type: ignore[arg-type]
        unsynced.note(files[0], 3)  # type: ignore[arg-type]
        assert unsynced.take() == [(files[0], 3)]
        assert unsynced.take() == []
        assert other.submit(unsynced.take).result() == [(files[1], 7)]


# ----------------------------------------------------------------------------------------- with an engine


def names_by_vnode(db: str, vgroups: int) -> dict[int, str]:
    names: dict[int, str] = {}
    for i in range(200):
        names.setdefault(vnode_of(db, f"t{i}", vgroups), f"t{i}")
    return names


async def test_two_creators_with_one_table_left_get_exactly_one_limit_exceeded(tmp_path: Path,
                                                                               lane: StorageThread) -> None:
    engine = Engine.open(tmp_path / "data", max_tables=2)
    engine.execute("CREATE DATABASE d VGROUPS 2")
    engine.execute("CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (t INT)")
    names = names_by_vnode("d", 2)
    engine.execute(f"CREATE TABLE d.{names[0]} USING d.m TAGS (0)")  # one of the two tables held
    other = next(n for n in (f"u{i}" for i in range(200)) if vnode_of("d", n, 2) == 0 and n != names[0])
    requests = [InsertRequest(f"INSERT INTO d.{name} USING d.m TAGS (1) VALUES ({TS}, 1)", None, TS)
                for name in (other, names[1])]  # one new table on each vnode
    plans = [planned(engine, r) for r in requests]
    keys = [write_keys(p, engine.catalog.databases) for p in plans]
    assert keys[0] == keys[1] == frozenset({("d", 0), ("d", 1)})
    outcomes = await asyncio.gather(*(lane.call_on(k, functools.partial(engine.apply_write, p, r))
                                      for k, p, r in zip(keys, plans, requests)), return_exceptions=True)
    assert outcomes[0] == 1 and isinstance(outcomes[1], LimitExceeded)  # decided by submission order
    assert sorted(r[0] for r in engine.execute("SHOW d.TABLES").rows) == sorted([names[0], other])
    assert lane.relaned == 0
    engine.close()


async def test_a_refused_second_vnode_append_undoes_the_first_under_lanes(tmp_path: Path, lane: StorageThread) -> None:
    engine = Engine.open(tmp_path / "data")
    faults = Faults()
    a, b, per_append = two_vnode_db(engine, 1, faults, "write")
    request = InsertRequest(insert(a, b, TS + 1), None, TS)
    prepared = planned(engine, request)
    keys = write_keys(prepared, engine.catalog.databases)
    assert keys == frozenset({("u", 0), ("u", 1)})
    before = visible(engine)
    with faults.active():
        faults.fail_kind("write", "enospc", at=per_append + 1)  # vnode 1's append, after vnode 0's succeeded
        with pytest.raises(StorageUnavailable):
            await lane.call_on(keys, functools.partial(engine.apply_write, prepared, request))
    assert lane.relaned == 0  # it ran holding u's vnodes only
    assert visible(engine) == before  # nothing of it: rows, tables, the topic's offsets, WAL versions and bytes
    engine.close()
    engine = Engine.open(tmp_path / "data")
    assert visible(engine) == before
    engine.close()


@pytest.mark.parametrize(("op", "kind", "level"), FAULTS, ids=[f"{op}-{kind}" for op, kind, _ in FAULTS])
async def test_a_write_planned_on_the_lane_that_a_later_vnode_refuses_is_written_nowhere(
        tmp_path: Path, lane: StorageThread, op: str, kind: str, level: int) -> None:
    """An INSERT planned and written at once on its database's vnodes (Ingest.write), its second vnode's append
    refused by the disk: nothing of it anywhere, before and after a restart, as with the whole lane
    (test_engine_writes.py)."""
    engine = Engine.open(tmp_path / "data")
    with second_append_refused(engine, op, kind, level) as (statement, before):
        await lane.call_on(frozenset({("u", 0), ("u", 1)}), functools.partial(engine.execute, statement))
    assert lane.relaned == 0  # it ran holding u's vnodes only
    assert visible(engine) == before
    engine.close()
    engine = Engine.open(tmp_path / "data")
    assert visible(engine) == before
    engine.close()


async def test_a_stale_plan_is_planned_again_with_the_whole_lane(tmp_path: Path, lane: StorageThread) -> None:
    """A plan that no longer holds may touch anything when planned again: refused on its vnodes (Relane, nothing
    written), then planned and written as an exclusive call."""
    engine = Engine.open(tmp_path / "data")
    engine.execute("CREATE DATABASE d VGROUPS 2")
    engine.execute("CREATE STABLE d.m (ts TIMESTAMP, v INT) TAGS (t INT)")
    request = InsertRequest(f"INSERT INTO d.n USING d.m TAGS (1) (ts, v) VALUES ({TS}, 1)", None, TS)
    prepared = planned(engine, request)
    engine.execute("ALTER STABLE d.m ADD COLUMN w INT")  # what the plan read changed
    assert await lane.call_on(write_keys(prepared, engine.catalog.databases),
                              functools.partial(engine.apply_write, prepared, request)) == 1
    assert lane.relaned == 1 and engine.ingest.replans == 1
    assert engine.execute("SELECT COUNT(*) FROM d.m").rows == [[1]]
    engine.close()


async def test_a_write_planned_on_its_database_s_vnodes_holds_them_alone(tmp_path: Path, lane: StorageThread) -> None:
    """A body planned and written at once (below the ingest workers' size) on every vnode of its database: a new
    or wider supertable (the catalog) or vnodes that are not all of the database's is refused there before anything
    is written (Relane) and written with the whole lane, or, asked so, the schema changes it needs are asked for
    alone (SchemaChangeNeeded); new subtables of a supertable that exists need no more."""
    engine = Engine.open(tmp_path / "data")
    engine.execute("CREATE DATABASE d VGROUPS 2")
    both = frozenset({("d", 0), ("d", 1)})

    def lines(first: int, count: int, schemas_apart: bool = False, field: str = "") -> functools.partial[int]:
        body = "\n".join(f"m,id=s{i} v={i}i{field} {TS + i}" for i in range(first, first + count)).encode()
        return functools.partial(engine.write_measurements, "d", parse_body(body, "ns"), schemas_apart)

    with pytest.raises(SchemaChangeNeeded) as needed:  # d.m to make: asked for apart from the rows, nothing written
        await lane.call_on(both, lines(0, 1, schemas_apart=True))
    assert lane.relaned == 0 and ("d", "m") not in engine.catalog.stables
    await lane.call(engine.make_schemas, needed.value.changes)
    assert await lane.call_on(both, lines(0, 1, schemas_apart=True)) == 1 and lane.relaned == 0
    assert await lane.call_on(both, lines(1000, 1)) == 1 and lane.relaned == 0
    assert await lane.call_on(both, lines(2000, 1, field=",x=2i")) == 1 and lane.relaned == 1  # d.m widened: whole lane
    assert await lane.call_on(both, lines(1, 50)) == 50 and lane.relaned == 1  # 50 new subtables on d's vnodes
    assert await lane.call_on(frozenset({("d", 0)}), lines(51, 50)) == 50 and lane.relaned == 2  # not all of d's
    inserts = " ".join(f"d.q{i} USING d.m TAGS ('q{i}') (_ts, v) VALUES ({TS + i}, {i})" for i in range(10))
    assert (await lane.call_on(both, functools.partial(engine.execute, f"INSERT INTO {inserts}"))).rows == [[10]]
    assert lane.relaned == 2  # 10 new subtables by an INSERT on d's vnodes
    engine.execute("CREATE DATABASE e VGROUPS 1")
    engine.execute("CREATE STABLE e.m (ts TIMESTAMP, v BIGINT) TAGS (id VARCHAR(8))")
    two = f"INSERT INTO d.r USING d.m TAGS ('r') (_ts, v) VALUES ({TS}, 1) e.r USING e.m TAGS ('r') VALUES ({TS}, 1)"
    assert (await lane.call_on(both, functools.partial(engine.execute, two))).rows == [[2]]
    assert lane.relaned == 3  # it writes e too: the whole lane
    csv = b"tbname,_ts,v,id\n" + b"".join(b"c%d,%d,%d,c%d\n" % (i, TS + i, i, i) for i in range(20))
    assert await lane.call_on(both, functools.partial(engine.write_csv, "d", csv, stable="m")) == 20
    assert lane.relaned == 3  # 20 new subtables by CSV on d's vnodes
    assert engine.execute("SELECT COUNT(*) FROM d.m").rows == [[134]]
    assert len(engine.execute("SHOW d.TABLES").rows) == 134
    engine.close()


async def test_a_call_on_vnodes_cannot_change_the_catalog(tmp_path: Path, lane: StorageThread) -> None:
    engine = Engine.open(tmp_path / "data")
    with pytest.raises(LaneViolation):
        await lane.call_on(frozenset({A0}), functools.partial(engine.execute, "CREATE DATABASE z"))
    assert "z" not in engine.catalog.databases
    await lane.call(engine.execute, "CREATE DATABASE z")
    assert "z" in engine.catalog.databases
    engine.close()


# ----------------------------------------------------------------------------------------- a node, real clients

SERIES = 2_000


def produced_and_fetched(bootstrap: str, held: str) -> None:
    """20 records produced (acks=1) to partition 0 of Kafka-native topic ``k``, its end offset listed and the records
    fetched back, each within :data:`BOUND_S` while ``held`` (what the failure names) is held."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1})
    for i in range(20):
        producer.produce("k", str(i).encode(), partition=0)
    assert producer.flush(BOUND_S) == 0, f"the produce waited behind {held}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lanes", "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("k", 0), BOUND_S) == (0, 20)  # ListOffsets
        consumer.assign([TopicPartition("k", 0, 0)])
        got: list[bytes] = []
        for _ in range(int(BOUND_S / 0.5)):
            got += [m.value() for m in consumer.consume(20, 0.5) if m.error() is None]
            if len(got) >= 20:
                break
        assert got == [str(i).encode() for i in range(20)], f"the fetch waited behind {held}"
    finally:
        consumer.close()


def lp_body(lines: int) -> bytes:
    return "\n".join(f"m,host=h{i % SERIES} v={i}.5 {1_700_000_000_000 + i}" for i in range(lines)).encode()


def insert_body(tables: int, per_table: int) -> bytes:
    return ("INSERT INTO " + " ".join(
        f"big.s{t} USING big.m TAGS ('h{t}') VALUES " + " ".join(
            f"({1_700_000_000_000 + t * per_table + i}, {i}.5)" for i in range(per_table))
        for t in range(tables))).encode()


WRITES = {  # path, body, rows
    "lines-planned-in-a-worker": ("/influxdb/v1/write?db=big&precision=ms", lp_body(30_000), 30_000),  # ~1.4 MB
    "lines-planned-on-the-lane": ("/influxdb/v1/write?db=big&precision=ms", lp_body(5_000), 5_000),  # ~230 kB
    "insert-planned-on-the-lane": ("/rest/sql", insert_body(200, 10), 2_000),  # 200 new subtables, ~70 kB
}


@pytest.mark.parametrize("kind", list(WRITES))
def test_a_write_held_in_its_wal_append_delays_no_produce_fetch_or_list_offsets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """A write of about 1.4 MB is planned in an ingest worker, a smaller one (line protocol, an SQL INSERT) on big's
    vnode lanes themselves; either is applied holding big's vnodes alone."""
    path, body, rows = WRITES[kind]
    assert (len(body) >= PLAN_IN_WORKER_BYTES) == kind.endswith("worker")
    reached, release = threading.Event(), threading.Event()
    append = Wal.append

    def held_append(self: Wal, entries: Any) -> int:
        if self.owner == ("big", 0) and not release.is_set():
            reached.set()
            assert release.wait(120), "never released"
        return append(self, entries)

    with gateway_thread(tmp_path / "data") as gateway, concurrent.futures.ThreadPoolExecutor(1) as pool:
        sql(gateway, "CREATE DATABASE big VGROUPS 2")
        if path == "/rest/sql":  # (a line-protocol body's new big.m is made alone first, then its rows)
            assert post(gateway, "/influxdb/v1/write?db=big&precision=ms", b"m,host=h0 v=0.5 1600000000000")[0] == 204
        bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("k", 1)])["k"].result(30)
        monkeypatch.setattr(Wal, "append", held_append)
        try:
            write = pool.submit(post, gateway, path, body)
            assert reached.wait(120), "the write never reached big/0's append"
            produced_and_fetched(bootstrap, "the held write")
            assert not write.done() and not release.is_set()
        finally:
            release.set()
        assert write.result(120)[0] in (200, 204)
        assert int(sql(gateway, "SELECT COUNT(*) FROM big.m WHERE _ts >= 1700000000000")["data"][0][0]) == rows
        assert gateway._storage.relaned == 0


def test_a_select_prepared_on_its_database_s_vnodes_delays_no_produce_or_fetch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SELECT is prepared (its supertable's tag tables read, its vnodes' WAL snapshots taken) holding its
    database's vnodes alone, not the whole lane: held while it reads big's tag table, a Kafka-native topic's
    Produce, ListOffsets and Fetch are answered; released, it answers what big holds."""
    reached, release = threading.Event(), threading.Event()
    tag_table = Vnode.tag_table

    def held_tag_table(self: Vnode, stable: Any, names: Any = None) -> Any:
        if self.db.name == "big" and not release.is_set():
            reached.set()
            assert release.wait(120), "never released"
        return tag_table(self, stable, names)

    with gateway_thread(tmp_path / "data") as gateway, concurrent.futures.ThreadPoolExecutor(1) as pool:
        sql(gateway, "CREATE DATABASE big VGROUPS 2")
        assert post(gateway, "/influxdb/v1/write?db=big&precision=ms", lp_body(100))[0] == 204
        bootstrap = f"127.0.0.1:{gateway.kafka_address[1]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("k", 1)])["k"].result(30)
        monkeypatch.setattr(Vnode, "tag_table", held_tag_table)
        try:
            select = pool.submit(post, gateway, "/rest/sql", b"SELECT COUNT(*) FROM big.m")
            assert reached.wait(120), "the SELECT never read big's tag table"
            produced_and_fetched(bootstrap, "the SELECT's preparation")
            assert not select.done() and not release.is_set()
        finally:
            release.set()
        status, answer = select.result(120)
        assert (status, answer["data"]) == (200, [[100]])
        assert gateway._storage.relaned == 0


async def test_a_select_is_prepared_on_its_database_s_vnodes_or_again_with_the_whole_lane(
        tmp_path: Path, lane: StorageThread) -> None:
    """Selects.prepare on every vnode of its database prepares it there; on only some of them it refuses (Relane)
    before it reads anything and the lane prepares it again exclusive; both answer the same rows."""
    engine = Engine.open(tmp_path / "data")
    engine.execute("CREATE DATABASE d VGROUPS 2")
    engine.write_measurements("d", parse_body(lp_body(50).replace(b"m,host", b"m,id"), "ms"))
    select = parse("SELECT COUNT(*), SUM(v) FROM d.m")
    assert isinstance(select, ast.Select)
    prepare = functools.partial(engine.prepare_select, select)
    assert (await lane.call_on(frozenset({("d", 0), ("d", 1)}), prepare)).run().rows == [[50, 1250.0]]
    assert lane.relaned == 0
    assert (await lane.call_on(frozenset({("d", 0)}), prepare)).run().rows == [[50, 1250.0]]
    assert lane.relaned == 1
    engine.close()
