"""Fuzzing line protocol: generated and mutated bodies fed to ``Engine.write_lines`` (see fuzzing.py).

Generated lines mix odd measurement and key names (escapes, unicode, NUL, names of existing columns and tags, very
long), every field type and suffix with values past their ranges, strings with escapes, timestamps of every size
in every precision (and unknown precisions), CRLF, comments and blank lines; mutations change values and names of
valid bodies or their bytes (invalid UTF-8 included).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fuzzing import Attack, fuzz_settings, mutated, seeded_engine
from hypothesis import given
from hypothesis import strategies as st

MEASUREMENTS = ["m", "lp", "lp2", "alt", "nt", "m\\ 1", "m\\,x", "ü", "x" * 200, "m\x00", "tbname", "../x", "`q`",
                "a.b", "LP", "_ts"]
KEYS = ["t", "loc", "v", "s", "f", "g", "ts", "_ts", "tbname", "k1", "k\\ 2", "k\\=3", "K1", "ü", "c" * 70, "x\x00",
        "_tag_none", "value"]
TAG_VALUES = ["1", "sf", "a\\ b", "a\\,b", "ü", "y" * 300, "\x00", "-", "1e9", "true"]
VALID_VALUES = ["1", "-1", "1.5", "1e308", "-0", ".5", "5.", "1f32", "1f64", "127i8", "-128i8", "32767i16", "7i32",
                "9223372036854775807i", "255u8", "18446744073709551615u64", "t", "F", "true", "FALSE", '"str"',
                '"a\\"b"', 'L"ü"', '"\x00"', '""', '"' + "z" * 70000 + '"']
ODD_VALUES = ["1e309", "3.5e38f32", "128i8", "-129i8", "2147483648i32", "9223372036854775808i64", "256u8", "-1u",
              "18446744073709551616u", "yes", '"unterminated', "NaN", "inf", "1_000", "0x10", "", "1" * 400]
FIELD_VALUES = VALID_VALUES + ODD_VALUES
TIMESTAMPS = ["", "0", "1", "-1", "1700000000000000000", "9223372036854775807", "9223372036854775808",
              "-9223372036854775809", "1700000000", "1700000000000", "253402300800", "99999999999", "1" * 30, "1.5",
              "abc", "1e9"]

lines = st.tuples(
    st.sampled_from(MEASUREMENTS),
    st.lists(st.tuples(st.sampled_from(["t1", "t2", "loc"]) | st.sampled_from(KEYS), st.sampled_from(TAG_VALUES)),
             max_size=3),
    st.lists(st.tuples(st.sampled_from(["f1", "f2", "f3", "K1"]) | st.sampled_from(KEYS),
                       st.sampled_from(VALID_VALUES) | st.sampled_from(FIELD_VALUES)),
             min_size=1, max_size=4),
    st.sampled_from(TIMESTAMPS),
).map(lambda p: p[0] + "".join(f",{k}={v}" for k, v in p[1]) + " " + ",".join(f"{k}={v}" for k, v in p[2])
      + (f" {p[3]}" if p[3] else ""))
bodies = st.lists(st.one_of(lines, st.sampled_from(["", "# comment", "  ", "\r"])), min_size=1, max_size=6).flatmap(
    lambda ls: st.sampled_from(["\n", "\r\n"]).map(lambda sep: sep.join(ls))
)
PRECISIONS = st.sampled_from(["ns", "us", "ms", "s", "ns", "ms", "h", "n", ""])
CORPUS = [
    "lp,t=1,loc=sf v=1i32,s=\"a\",f=1.5 1700000000000000000\nlp,t=2 v=2i32 1700000000000000001",
    "m,t=1,loc=sf v=3i32,f=2.5,s=\"x\",b=true,n=L\"n\",u=5u64,ti=5i8,fl=1f32 1700000000000",
    "lp2 value=1 1700000000\nlp2 value=2\nlp2,k1=a value=3 0",
    "lp,t=3 f=1e10,v=1i32 1700000000000000002\n# comment\n\nlp,t=4 f=-1.5\r\n",
    "m\\ 1,k\\ 2=a\\,b s=\"q\\\"uote\" 1700000000000",
]
_VALUE_OR_NAME = re.compile(r"[^\s,=\"]+")


def test_generated_bodies(tmp_path: Path, caplog: Any) -> None:
    attack = Attack("line protocol generated", seeded_engine(tmp_path), caplog)

    @fuzz_settings(1000)
    @given(body=bodies, precision=PRECISIONS, db=st.sampled_from(["x", "x", "y", "nosuch"]))
    def run(body: str, precision: str, db: str) -> None:
        attack.feed(lambda engine: engine.write_lines(db, body.encode("utf-8", "surrogatepass"), precision))

    run()
    attack.reopen(tmp_path)


def test_mutated_bodies(tmp_path: Path, caplog: Any) -> None:
    attack = Attack("line protocol mutated", seeded_engine(tmp_path), caplog)

    @fuzz_settings(1000)
    @given(
        body=mutated(CORPUS, _VALUE_OR_NAME, MEASUREMENTS + KEYS + VALID_VALUES[:-1] + ODD_VALUES + TIMESTAMPS),
        junk=st.lists(st.tuples(st.integers(0, 10**4), st.binary(min_size=1, max_size=3)), max_size=2),
        precision=PRECISIONS,
    )
    def run(body: str, junk: list[tuple[int, bytes]], precision: str) -> None:
        data = body.encode("utf-8", "surrogatepass")
        for pos, raw in junk:  # bytes that are no UTF-8
            data = data[:pos] + raw + data[pos:]
        attack.feed(lambda engine: engine.write_lines("x", data, precision))

    run()
    attack.reopen(tmp_path)
