"""The gateway's loop of a schemaless write that needs supertable changes in a cluster
(:func:`walgate.gateway.schemaless.with_schemas`), each branch shown with two real engines: the cluster's stream
between them is :class:`Stream` (the controller's check of every append against the whole stream, then each node
applying it, as :class:`~walgate.gateway.shared_catalog.SharedCatalog` has it done through etcd, and the check of a
new supertable's name against every node's tables; the real ones run in tests/cluster/test_serve_cluster_schemaless.py
and test_serve_cluster_ddl.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from test_shared_sql import line_in, rows_here, run
from test_shared_topics import cluster_node

from walgate.gateway.ingest_workers import IngestWorkers, Prepared
from walgate.gateway.schemaless import ATTEMPTS, Changes, with_schemas
from walgate.gateway.shared_catalog import SharedCatalog
from walgate.storage.engine import Engine
from walgate.storage.errors import ClusterUnavailable, InvalidValue, NotHere
from walgate.storage.vnode import vnode_of
from walgate.storage.write_plan import LinesRequest, SchemaChangeNeeded, WriteSnapshot, not_a_supertable


class Stream:
    """The cluster's catalog stream as seen by node ``asked``: ``racing`` (another node's records, each call's)
    is appended just before each of ``asked``'s changes, as a node that changed the supertable first."""

    def __init__(self, nodes: list[Engine], asked: Engine, racing: Callable[[], list[dict[str, Any]]] | None = None):
        self.nodes, self.asked, self.racing = nodes, asked, racing
        self.records: list[dict[str, Any]] = []
        self.base = nodes[0].catalog.shared_seq
        self.catch_ups = self.refused = self.plans = self.clash_checks = 0

    def follow(self, e: Engine) -> None:
        for seq in range(e.catalog.shared_seq + 1, self.base + len(self.records) + 1):
            assert e.apply_shared(seq, self.records[seq - self.base - 1])

    def append(self, records: list[dict[str, Any]]) -> None:
        controller = self.nodes[0]
        self.follow(controller)
        try:
            controller.catalog.validate_shared(records)
        except InvalidValue:
            self.refused += 1
            raise
        self.records += records

    async def catch_up(self) -> None:
        self.catch_ups += 1
        self.follow(self.asked)

    async def no_clash(self, _: SharedCatalog, changes: Changes) -> None:
        """The gateway's check of a new supertable's name against the tables of the node of its name's vgroup."""
        self.clash_checks += 1
        for old, new in changes:
            for e in self.nodes:
                try:
                    if old is None and e.store.tables_exist([(new.db, new.name)]) == [True]:
                        raise not_a_supertable(new.db, new.name)
                except NotHere:
                    continue

    async def run(self, fn: Callable[..., object], *args: Any) -> object:
        if self.racing is not None:
            self.append(self.racing())
        result, records = self.asked.staged(fn, *args)
        self.append(records)
        self.follow(self.asked)
        return result


async def write(stream: Stream | None, e: Engine, line: bytes) -> int:
    async def here() -> int:
        if stream is not None:
            stream.plans += 1
        return e.write_lines("d", line)
    return await with_schemas(cast(SharedCatalog, stream), e.make_schemas, here,
                              stream.no_clash if stream is not None else not_asked)


async def not_asked(_: SharedCatalog, __: Changes) -> None:
    raise AssertionError("a node that has not joined the cluster asks no other node")


def needed(e: Engine, line: bytes) -> list[dict[str, Any]]:
    """The records of the supertable changes ``line`` needs, staged on ``e``."""
    with pytest.raises(SchemaChangeNeeded) as e_needed:
        e.write_lines("d", line)
    return e.staged(e.make_schemas, e_needed.value.changes)[1]


@pytest.fixture
def nodes(tmp_path: Path) -> Any:
    n1, n2 = cluster_node(tmp_path / "n1", 1), cluster_node(tmp_path / "n2", 2)
    run([n1, n2], n1, "CREATE DATABASE d VGROUPS 2")
    yield n1, n2
    for e in (n1, n2):
        e.close()


async def test_a_change_refused_because_another_node_made_it_first_is_caught_up_with_and_the_write_planned_again(
        nodes: tuple[Engine, Engine]) -> None:
    n1, n2 = nodes
    first = needed(n1, line_in(0, "v=1i", 1700000000000000000))  # node 1 creates lp at the same time
    stream = Stream([n1, n2], n2, lambda: first)
    assert await write(stream, n2, line_in(1, "v=2i", 1700000000000000001)) == 1
    assert (stream.plans, stream.refused, stream.catch_ups, [r["op"] for r in stream.records]) == (
        2, 1, 2, ["create_stable"]), "caught up (nothing), refused (node 1's create came first), caught up, planned again"
    stream.follow(n1)
    assert n1.write_lines("d", line_in(0, "v=1i", 1700000000000000000)) == 1


async def test_a_supertable_that_keeps_changing_is_refused_after_the_attempts_nothing_written(
        nodes: tuple[Engine, Engine]) -> None:
    n1, n2 = nodes
    run([n1, n2], n1, "CREATE STABLE d.lp (ts TIMESTAMP, v BIGINT) TAGS (site VARCHAR(8))")
    fields = iter(f"f{i}=1i" for i in range(100))

    def another_column() -> list[dict[str, Any]]:  # node 1 adds a column before each of node 2's changes
        stream.follow(n1)
        return needed(n1, line_in(0, next(fields), 1700000000000000000))

    stream = Stream([n1, n2], n2, another_column)
    with pytest.raises(ClusterUnavailable, match=f"kept changing meanwhile \\({ATTEMPTS} plans\\)"):
        await write(stream, n2, line_in(1, "w=2i", 1700000000000000001))
    assert stream.plans == stream.refused == ATTEMPTS and rows_here(n2, "SELECT * FROM d.lp") == [], "bounded, nothing written"


async def test_a_refusal_that_stands_after_catching_up_is_the_answer(nodes: tuple[Engine, Engine]) -> None:
    """A topic that no longer compiles (made while a DROP COLUMN it uses was on its way) refuses every change of its
    database's supertables: the same change planned again after catching up is refused again, and that is the
    answer (no loop until the attempts run out)."""
    n1, n2 = nodes
    run([n1, n2], n1, "CREATE STABLE d.lp (ts TIMESTAMP, v BIGINT, x BIGINT) TAGS (site VARCHAR(8))")
    raced = n1.staged(n1.execute, "ALTER STABLE d.lp DROP COLUMN v")[1]
    run([n1, n2], n1, "CREATE TOPIC tv AS SELECT v FROM d.lp")
    stream = Stream([n1, n2], n2)
    stream.append(raced)
    stream.follow(n2)
    with pytest.raises(InvalidValue, match="topic tv depends on it"):
        await write(stream, n2, line_in(1, "x=1i,w=2i", 1700000000000000001))
    assert (stream.plans, stream.catch_ups, len(stream.records)) == (2, 2, 1), "refused, caught up, planned again"


async def test_a_write_whose_change_is_made_is_planned_twice(nodes: tuple[Engine, Engine]) -> None:
    n1, n2 = nodes
    stream = Stream([n1, n2], n2)
    assert await write(stream, n2, line_in(1, "v=1i", 1700000000000000000)) == 1
    assert await write(stream, n2, line_in(1, "v=2i,w=1.5", 1700000000000000001)) == 1
    assert (stream.plans, stream.catch_ups, [r["op"] for r in stream.records]) == (
        4, 2, ["create_stable", "alter_stable"]), "planned, caught up, changed, planned: written"
    stream.follow(n1)
    assert rows_here(n2, "SELECT v, w FROM d.lp") == [[1, None], [2, 1.5]] and n1.catalog.stables == n2.catalog.stables


async def test_a_new_supertable_named_like_a_table_of_the_other_node_is_refused_nothing_staged(
        nodes: tuple[Engine, Engine]) -> None:
    n1, n2 = nodes
    (table,) = [t for t in (f"m{i}" for i in range(100)) if vnode_of("d", t, 2) == 0][:1]  # node 1's vgroup
    n1.execute(f"CREATE TABLE d.{table} (ts TIMESTAMP, v BIGINT)")
    stream = Stream([n1, n2], n2)
    with pytest.raises(InvalidValue, match=f"{table}: d.{table} is a normal table, not a supertable"):
        await write(stream, n2, f"{table},site=s1 v=1i 1700000000000000000".encode())
    assert (stream.plans, stream.clash_checks, stream.records) == (1, 1, []), "refused before anything is staged"
    assert ("d", table) not in n2.catalog.stables


async def test_a_write_needing_a_change_before_the_node_joined_the_cluster_is_unavailable(
        nodes: tuple[Engine, Engine]) -> None:
    n1, _ = nodes
    with pytest.raises(ClusterUnavailable, match="not joined the cluster yet"):  # a 503 to retry, not a 400
        await write(None, n1, line_in(0, "v=1i", 1700000000000000000))
    assert ("d", "lp") not in n1.catalog.stables


async def test_a_body_planned_in_an_ingest_worker_has_its_change_made_through_the_stream(
        nodes: tuple[Engine, Engine]) -> None:
    """A large body is planned in a worker process (walgate.gateway.ingest_workers): the change it needs comes back
    from there (pickled) and is made through the stream, then the body planned there again is written."""
    n1, n2 = nodes
    stream, workers = Stream([n1, n2], n2), IngestWorkers(processes=1, min_bytes=0)
    request = LinesRequest("d", line_in(1, "v=1i", 1700000000000000000), "ns", n2.clock.time_ns())

    async def snapshot(keys: list[tuple[str, str]]) -> WriteSnapshot:
        return n2.write_snapshot(keys)

    async def in_worker() -> int:
        stream.plans += 1
        planned = await workers.plan(request, snapshot)
        assert isinstance(planned, Prepared) and not planned.write.changes
        return n2.apply_write(planned.write, request)

    try:
        assert await with_schemas(cast(SharedCatalog, stream), n2.make_schemas, in_worker, stream.no_clash) == 1
    finally:
        await workers.close()
    assert (stream.plans, [r["op"] for r in stream.records]) == (2, ["create_stable"])
    assert rows_here(n2, "SELECT v FROM d.lp") == [[1]]

