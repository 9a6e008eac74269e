"""What the storage fuzz tests (``test_fuzz_*.py``) share: settings, the engine they attack and its invariants.

Each surface (SQL, line protocol, CSV, JSON rows) feeds generated and mutated inputs to a real :class:`Engine` in a
temporary directory. The invariants, checked after every input:

* the outcome is a result or a :class:`~walgate.storage.errors.StorageError` (anything else is a bug);
* after an error the engine's state (:func:`state`: databases, supertables and their columns, tables, topics,
  every WAL's end and every topic's offsets) is what it was before: an answered error wrote nothing;
* nothing is logged at ERROR level (no traceback);

and at the end the data dir reopens with the same state and the same rows, and every record of every topic renders.
Seeded (``derandomize``) and bounded for CI; set ``WALGATE_FUZZ_LONG=1`` for 20 times the examples with a fresh
random seed per run. :data:`COUNTS` records the cases tried per surface (printed at the end of each test: ``pytest
-s`` shows them).
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from walgate.storage.engine import Engine
from walgate.storage.errors import StorageError

__all__ = ["LONG", "COUNTS", "fuzz_settings", "seeded_engine", "state", "Attack", "mutated"]

LONG = os.environ.get("WALGATE_FUZZ_LONG") == "1"
COUNTS: Counter[str] = Counter()


def fuzz_settings(examples: int) -> settings:
    """``examples`` cases (20 times that with WALGATE_FUZZ_LONG=1), seeded unless long, no example database."""
    return settings(
        max_examples=examples * 20 if LONG else examples,
        derandomize=not LONG,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                               HealthCheck.large_base_example],
    )


SEED = [
    "CREATE DATABASE x VGROUPS 2",
    "CREATE STABLE x.m (ts TIMESTAMP, v INT, f DOUBLE, s VARCHAR(16), b BOOL, n NCHAR(8), u BIGINT UNSIGNED, "
    "ti TINYINT, fl FLOAT) TAGS (t INT, loc VARCHAR(16))",
    "CREATE STABLE x.alt (ts TIMESTAMP, v INT, s VARCHAR(8)) TAGS (t INT, g NCHAR(4))",
    "CREATE TABLE x.nt (ts TIMESTAMP, v INT, s VARCHAR(8))",
    "CREATE DATABASE y PRECISION 'ns' VGROUPS 1",
    "CREATE STABLE y.m (ts TIMESTAMP, v BIGINT, s NCHAR(4)) TAGS (j JSON)",
    "INSERT INTO x.a USING x.m TAGS (1, 'sf') VALUES (1700000000000, 1, 1.5, '5', true, 'n', 18446744073709551615, "
    "-128, 3.4e38) (1700000000001, NULL, NULL, 'abc', NULL, NULL, NULL, 127, NULL) "
    "x.b USING x.m TAGS (NULL, NULL) VALUES (-62135596800000, -2147483648, -1e308, '', false, '', 0, 0, -1.5)",
    "INSERT INTO x.nt VALUES (1700000000000, 7, 'seven')",
    "INSERT INTO x.c USING x.alt TAGS (3, 'g') VALUES (1700000000000, 3, 'x')",
    "INSERT INTO y.d USING y.m TAGS ('{\"k\":\"v\",\"n\":1}') VALUES (9223372036854775807, 1, 'y')",
    "CREATE TOPIC seeded AS SELECT ts, v * 2 AS w, CAST(s AS INT) AS si, ROUND(ti, -1) AS r, concat(s, loc) AS c "
    "FROM x.m WHERE CAST(s AS BIGINT) >= 0 OR v IS NULL",
    "CREATE TOPIC whole WITH META AS DATABASE x",
    "CREATE TOPIC tags AS STABLE x.m WHERE t > 0 OR loc LIKE 's%'",
    "CREATE TOPIC normal AS SELECT * FROM x.nt",
]


def seeded_engine(path: Path) -> Engine:
    """An engine on ``path`` holding two databases, supertables, a normal table, rows and four topics."""
    engine = Engine.open(path)
    for sql in SEED:
        engine.execute(sql)
    return engine


def _answer(engine: Engine, sql: str) -> Any:
    try:
        return engine.execute(sql).rows
    except StorageError as exc:  # e.g. a table of a supertable dropped since
        return type(exc).__name__


def state(engine: Engine, rows: bool = False) -> tuple[Any, ...]:
    """Everything an answered error must leave unchanged (see the module docstring); with ``rows``, every row too
    (each SELECT scans a database's WAL: too slow to do after every case)."""
    parts: list[Any] = [_answer(engine, "SHOW DATABASES"), _answer(engine, "SHOW TOPICS")]
    for db in sorted(engine.catalog.databases):
        parts.append(_answer(engine, f"SHOW `{db}`.STABLES"))
        parts.append(_answer(engine, f"SHOW `{db}`.TABLES"))
        parts.append([vnode.wal.next_version for vnode in engine.vnodes[db]])  # any write appends
        for (d, name), _ in sorted(engine.catalog.stables.items()):
            if d == db:
                parts.append((name, _answer(engine, f"DESCRIBE `{db}`.`{name}`"),
                               rows and _answer(engine, f"SELECT * FROM `{db}`.`{name}`")))
        for vnode in engine.vnodes[db]:
            for t in sorted(vnode.tables(), key=lambda t: t.name):
                if rows and t.stable is None and not t.dropped:
                    parts.append((t.name, _answer(engine, f"SELECT * FROM `{db}`.`{t.name}`")))
    for topic in sorted(engine.catalog.topics):
        parts.append((topic, [engine.watermarks(topic, p) for p in range(engine.partition_count(topic))]))
    return tuple(parts)


class Attack:
    """One surface's attack on one engine: :meth:`feed` an input, check the invariants, count the outcome."""

    def __init__(self, surface: str, engine: Engine, caplog: Any) -> None:
        self.surface, self.engine, self.caplog = surface, engine, caplog
        self.before = state(engine)
        caplog.set_level(logging.WARNING)

    def feed(self, call: Callable[[Engine], Any]) -> None:
        COUNTS[f"{self.surface}: cases"] += 1
        try:
            call(self.engine)
        except StorageError as exc:
            COUNTS[f"{self.surface}: {type(exc).__name__}"] += 1
            after = state(self.engine)
            if after != self.before:
                self.before = after  # the cases after this one compare with what is there now: one failure each
                raise AssertionError(f"{type(exc).__name__} ({exc.message[:300]}) but the state changed") from exc
        else:
            COUNTS[f"{self.surface}: accepted"] += 1
            self.before = state(self.engine)
        errors = [r for r in self.caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not errors, errors[0].getMessage()

    def reopen(self, path: Path) -> None:
        """Close the engine and open the data dir again: it must hold the same state, and every record of every
        topic must render as Kafka records."""
        before = state(self.engine, rows=True)
        self.engine.close()
        engine = Engine.open(path)
        assert state(engine, rows=True) == before
        for topic in engine.catalog.topics:
            for partition in range(engine.partition_count(topic)):
                start, _ = engine.watermarks(topic, partition)
                for _base, version, count in engine.index_entries(topic, partition, start):
                    COUNTS[f"{self.surface}: records rendered"] += count
                    assert len(engine.kafka_rows(topic, partition, version)) == count
        engine.close()
        print(f"\n{self.surface}:", {k.split(': ')[1]: v for k, v in sorted(COUNTS.items()) if k.startswith(self.surface)})


_SPECIAL = ["\x00", "'", '"', "`", "\\", "(", ")", ",", ";", "=", " ", "\n", "\r", ".", "-", "--", "/", "..", "é",
            "\U0001f600", "\ud800", "9" * 30, "NOT ", "AND ", "(((", ")))", "e", "i8", "u", "T", "now", "\ufeff"]


@st.composite
def mutated(draw: st.DrawFn, corpus: list[str], tokens: re.Pattern[str], replacements: list[str]) -> str:
    """A corpus entry with a few changes: a match of ``tokens`` (a value, a name) replaced by one of
    ``replacements``, or characters inserted, deleted, replaced or repeated (lone surrogates included), or the text
    cut short. Places are drawn uniformly (hypothesis' integers lean to the start)."""
    text = draw(st.sampled_from(corpus))
    for _ in range(draw(st.integers(1, 3))):
        pos = draw(st.sampled_from(range(len(text) + 1)))
        op = draw(st.sampled_from(["token", "token", "token", "insert", "delete", "replace", "repeat", "truncate"]))
        piece = draw(st.one_of(st.sampled_from(_SPECIAL), st.characters(codec=None, exclude_categories=())))
        if op == "token":
            found = list(tokens.finditer(text))
            if found:
                m = draw(st.sampled_from(found))
                text = text[: m.start()] + draw(st.sampled_from(replacements)) + text[m.end() :]
        elif op == "insert":
            text = text[:pos] + piece + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 20)) :]
        elif op == "replace":
            text = text[:pos] + piece + text[pos + 1 :]
        elif op == "repeat":
            end = min(len(text), pos + draw(st.integers(1, 40)))
            text = text[:pos] + text[pos:end] * draw(st.integers(2, 200)) + text[end:]
        else:
            text = text[:pos]
    return text
