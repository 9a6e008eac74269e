"""Fuzzing CSV import: generated and mutated bodies fed to ``Engine.write_csv`` (see fuzzing.py).

Generated bodies mix headers naming columns, tags, ``tbname``, unknown, back-quoted, empty and repeated names with
fields of every kind (quoted with doubled quotes, newlines and NUL inside, empty quoted and unquoted, numbers past
their types' ranges, timestamps past year 9999 and of every format), a BOM, CRLF and ragged rows, into tables and
supertables (new subtables included); mutations change fields and bytes of valid bodies (invalid UTF-8 included).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fuzzing import Attack, fuzz_settings, mutated, seeded_engine
from hypothesis import given
from hypothesis import strategies as st

HEADER_NAMES = ["ts", "v", "f", "s", "b", "n", "u", "ti", "fl", "t", "loc", "tbname", "TS", "`V`", "nosuch", "", " v ",
                "`ts`", '"ts"', "g", "x\x00"]
FIELDS = ["1700000000000", "2023-11-14 22:13:20.000", "2023-11-14T22:13:20Z", "253402300800000",
          "10000-01-01 00:00:00", "-62135596800001", "9223372036854775808", "0", "-1", "1.5", "1e309", "300", "-129",
          "18446744073709551616", "true", "FALSE", "2", "", '""', '"a,b"', '"a""b"', '"line\nbreak"', '"\x00"', "ü",
          "z" * 20, " 7 ", "now", "NULL", "d1", "d2", "`d3`", "a/../b", "1 2", '"unterminated', 'in"side']
TABLES = [("a", None), ("nt", None), ("b", None), ("nosuch", None), (None, "m"), (None, "alt"), (None, "m"),
          (None, "nosuch"), ("a", "m"), (None, None)]



@st.composite
def csv_bodies(draw: st.DrawFn) -> str:
    header = draw(st.lists(st.sampled_from(HEADER_NAMES[:3]) | st.sampled_from(HEADER_NAMES), min_size=1, max_size=5,
                           unique=True))
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        width = len(header) if draw(st.integers(0, 5)) else draw(st.integers(1, 7))  # mostly the header's width
        rows.append(draw(st.lists(st.sampled_from(FIELDS[:8]) | st.sampled_from(FIELDS), min_size=width, max_size=width)))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return draw(st.sampled_from(["", "\ufeff"])) + newline.join(",".join(r) for r in [header, *rows]) + newline


CORPUS = [
    "ts,v,s\n1700000000010,1,abc\n2023-11-14T22:13:20.011Z,2,\"q,\"\"x\"\"\"\n",
    "tbname,ts,v,t,loc\nd1,1700000000020,3,1,sf\nd2,1700000000021,,,\n",
    "TS,`v`,f,b\r\n1700000000030,4,1.5,true\r\n1700000000031,5,,0\r\n",
    "tbname,ts,v,s,g,t\nd4,1700000000040,1,x,gg,4\n",
]
_FIELD = re.compile(r'"[^"]*"|[^,\n\r]+')


def _write(body: bytes, table: str | None, stable: str | None) -> Any:
    return lambda engine: engine.write_csv("x", body, table=table, stable=stable)


def test_generated_bodies(tmp_path: Path, caplog: Any) -> None:
    attack = Attack("csv generated", seeded_engine(tmp_path), caplog)

    @fuzz_settings(1000)
    @given(body=csv_bodies(), target=st.sampled_from(TABLES))
    def run(body: str, target: tuple[str | None, str | None]) -> None:
        attack.feed(_write(body.encode("utf-8", "surrogatepass"), *target))

    run()
    attack.reopen(tmp_path)


def test_mutated_bodies(tmp_path: Path, caplog: Any) -> None:
    attack = Attack("csv mutated", seeded_engine(tmp_path), caplog)

    @fuzz_settings(1000)
    @given(
        body=mutated(CORPUS, _FIELD, FIELDS + HEADER_NAMES),
        junk=st.lists(st.tuples(st.integers(0, 300), st.binary(min_size=1, max_size=3)), max_size=2),
        target=st.sampled_from([("a", None), (None, "m"), (None, "alt"), ("nt", None)]),
    )
    def run(body: str, junk: list[tuple[int, bytes]], target: tuple[str | None, str | None]) -> None:
        data = body.encode("utf-8", "surrogatepass")
        for pos, raw in junk:
            data = data[:pos] + raw + data[pos:]
        attack.feed(_write(data, *target))

    run()
    attack.reopen(tmp_path)
