"""Fuzzing the parts of a merged SELECT another node sends (walgate.storage.select_merge, select_partial): a real
query's parts, one of them damaged (bits flipped, cut short, a length or offset overwritten with an extreme value, a
part of another query, re-encoded with a column dropped, renamed or of another type, its partial aggregates'
declared types garbled or gone, compressed with a huge declared size), merged as the node asked merges them.

Invariant, per input: the merge answers or raises a StorageError (a clear error: the HTTP API's 4xx or 503), never
another exception (a 500 and a traceback in the log) and never a crash of the process (a damaged offset read
unchecked reads outside the stream: the query worker dies). Seeded and bounded (fuzzing.fuzz_settings); the found
examples are regular tests at the end.
"""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pytest
from fuzzing import LONG, fuzz_settings
from hypothesis import given
from hypothesis import strategies as st
from test_select_merge import VGROUP, _merged, _parts, engine  # noqa: F401 (engine: the module's fixture)

from walgate.storage.engine import Engine, PreparedSelect
from walgate.storage.errors import InvalidValue, StorageError
from walgate.storage.select_merge import decode, encode

QUERIES = [
    "SELECT SUM(v), COUNT(*) FROM s.m",  # rows shipped
    "SELECT tbname, ts, v * n AS w FROM s.m WHERE n > 2 ORDER BY w, ts DESC LIMIT 5",  # rows, cut
    "SELECT t, COUNT(v), SUM(n), MAX(v) FROM s.m GROUP BY t",  # partial aggregates
    "SELECT _wstart, COUNT(*), MIN(n) FROM s.m INTERVAL(2s)",  # partial aggregates per window
    "SELECT t, FIRST(c), LAST(x), LAST_ROW(y) FROM s.z GROUP BY t",  # values with their timestamps (TIMESTAMP)
]
EXTREMES = [b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xff\xff\xff\xff", b"\xff" * 8,
            b"\xff\xff\xff\xff\xff\xff\xff\x7f", b"\x00" * 8, b"\x01\x00\x00\x00\x00\x00\x00\x80"]
COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def shipped(engine: Engine) -> list[tuple[PreparedSelect, list[bytes]]]:  # noqa: F811 (the fixture above)
    return [_parts(engine, sql) for sql in QUERIES]


def _stream(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    blob: bytes = sink.getvalue().to_pybytes()
    return blob


def _altered(draw: st.DrawFn, part: bytes) -> bytes:
    """``part`` decoded, changed in its columns or metadata, and encoded again (a valid Arrow stream)."""
    table = decode(part)
    names = [n for n in table.column_names if n != VGROUP]
    name = draw(st.sampled_from(names))
    change = draw(st.sampled_from(["drop", "rename", "retype", "metadata", "no metadata", "no vgroup", "swap"]))
    if change == "drop":
        return _stream(table.drop_columns([name]))
    if change == "rename":
        return _stream(table.rename_columns([draw(st.sampled_from([name + "x", "tbname", VGROUP, "_mws", "é\x00"]))
                                             if n == name else n for n in table.column_names]))
    if change == "retype":
        to = draw(st.sampled_from([pa.string(), pa.binary(), pa.int8(), pa.float32(), pa.timestamp("ns"),
                                   pa.list_(pa.int32()), pa.dictionary(pa.int32(), pa.string()), pa.null()]))
        column = pa.nulls(table.num_rows, to) if draw(st.booleans()) else pa.array(
            [None] * table.num_rows, to)
        return _stream(table.set_column(table.column_names.index(name), name, column))
    if change == "metadata":
        meta = draw(st.sampled_from([b"", b"[", b"{}", b"[[1, 2, 3]]", b"\xff\xfe", json.dumps([[n, "INT", 4]
                                     for n in names]).encode(), json.dumps([[n, "NOTATYPE", 4] for n in names]).encode(),
                                     json.dumps([[names[0], "INT", 4]] * len(names)).encode(), b"null",
                                     json.dumps([[n, "TIMESTAMP", 8] for n in names]).encode()]))
        return _stream(table.replace_schema_metadata({b"walgate.partial": meta}))
    if change == "no metadata":
        return _stream(table.replace_schema_metadata(None))
    if change == "no vgroup":
        return _stream(table.drop_columns([VGROUP]))
    order = draw(st.permutations(table.column_names))
    return _stream(table.select(order))


@st.composite
def damaged(draw: st.DrawFn, parts: list[bytes], others: list[bytes]) -> bytes:
    """One of ``parts`` damaged (module docstring); ``others``: parts of other queries."""
    blob = bytearray(draw(st.sampled_from(parts)))
    how = draw(st.sampled_from(["flip", "flip", "cut", "extreme", "extreme", "other", "altered", "altered",
                                "compressed", "empty"]))
    COUNTS[how] += 1
    if how == "flip":
        for _ in range(draw(st.integers(1, 4))):
            blob[draw(st.sampled_from(range(len(blob))))] ^= 1 << draw(st.integers(0, 7))
    elif how == "cut":
        del blob[draw(st.sampled_from(range(len(blob)))):]
    elif how == "extreme":
        value = draw(st.sampled_from(EXTREMES))
        at = draw(st.sampled_from(range(len(blob) - len(value))))
        blob[at:at + len(value)] = value
    elif how == "other":
        return draw(st.sampled_from(others))
    elif how == "altered":
        return _altered(draw, bytes(blob))
    elif how == "compressed":
        table = decode(bytes(blob))
        if table.num_rows == 0:  # (no buffer to say a size of)
            return _stream(table, draw(st.sampled_from(["lz4", "zstd"])))
        return _huge_compressed(table, draw(st.sampled_from([1 << 40, 1 << 62, 2**63 - 1, 1 << 20])))
    else:
        return b""
    return bytes(blob)


def _huge_compressed(table: pa.Table, declared: int) -> bytes:
    """``table`` LZ4-compressed, its first buffer's uncompressed length (the 8 bytes before it) said ``declared``."""
    blob = bytearray(_stream(table, "lz4"))
    size = table.column(0).chunk(0).buffers()[-1].size  # the values buffer: as the writer wrote its length
    at = blob.find(size.to_bytes(8, "little"))
    assert at > 0, "the length of a compressed buffer is where the format puts it"
    blob[at:at + 8] = declared.to_bytes(8, "little")
    return bytes(blob)


def _merge_or_refuse(prepared: PreparedSelect, parts: list[bytes]) -> None:
    try:
        _merged(prepared, parts, max_bytes=1 << 26)
    except StorageError as exc:
        COUNTS[f"refused: {type(exc).__name__}"] += 1
    else:
        COUNTS["merged"] += 1


@fuzz_settings(250)
@given(st.data())
def test_a_damaged_part_is_merged_or_refused_never_a_crash(
        shipped: list[tuple[PreparedSelect, list[bytes]]], data: st.DataObject) -> None:
    which = data.draw(st.integers(0, len(shipped) - 1))
    prepared, parts = shipped[which]
    others = [p for i, (_, ps) in enumerate(shipped) if i != which for p in ps]
    bad = data.draw(damaged(parts, others))
    at = data.draw(st.integers(0, len(parts) - 1))
    _merge_or_refuse(prepared, [*parts[:at], bad, *parts[at + 1:]])


def test_zz_counts() -> None:
    """What the fuzz test above tried (``pytest -s`` shows it); every kind of damage was tried."""
    print("\nselect merge:", dict(sorted(COUNTS.items())))
    if COUNTS:  # (not when run alone)
        assert set(COUNTS) >= {"flip", "cut", "extreme", "other", "altered", "compressed", "merged"}, COUNTS
        assert COUNTS["refused: InvalidValue"] > 0 and (LONG or sum(COUNTS.values()) > 250)


# ----------------------------------------------------------------- examples the fuzzing found (each was a bug)

def test_a_part_whose_offsets_were_damaged_is_refused_not_read_out_of_bounds(
        shipped: list[tuple[PreparedSelect, list[bytes]]]) -> None:
    """A string column's offsets overwritten: Arrow read the values past the stream's end (segfault in Table.nbytes:
    the query worker died) before the stream was validated in full."""
    prepared, parts = shipped[0]
    table = decode(parts[0])
    blob = bytearray(parts[0])
    offsets = table.column("tbname").chunk(0).buffers()[1].to_pybytes()
    at = blob.find(offsets)
    blob[at + 4:at + 8] = b"\xff\xff\xff\x7f"  # the first string's end: 2^31 - 1
    with pytest.raises(InvalidValue, match="not an Arrow stream"):
        _merged(prepared, [bytes(blob), *parts[1:]])


def test_a_part_of_a_type_arrow_cannot_read_or_with_a_column_name_that_is_no_utf8_is_refused(
        shipped: list[tuple[PreparedSelect, list[bytes]]]) -> None:
    """ArrowNotImplementedError ("Integers with more than 64 bits") and UnicodeDecodeError (a field name's byte
    flipped) were 500s."""
    prepared, parts = shipped[0]
    table = decode(parts[0])
    odd_name = bytearray(_stream(table.rename_columns(["v\u00e9" if n == "v" else n for n in table.column_names])))
    at = odd_name.find("v\u00e9".encode())
    odd_name[at + 1] = 0xFF  # "v\xff\xa9": no UTF-8
    wide = bytearray(parts[0])
    wide[wide.find(bytes([64, 0, 0, 0, 1]))] = 128  # the first 64-bit signed integer type's width: 128
    for blob in (bytes(odd_name), bytes(wide)):
        with pytest.raises(InvalidValue, match="not an Arrow stream"):
            _merged(prepared, [blob, *parts[1:]])


def test_partial_aggregates_that_garble_their_declared_types_are_refused(
        shipped: list[tuple[PreparedSelect, list[bytes]]]) -> None:
    """A part's schema metadata (the partial columns' TDengine types) not JSON, of an unknown type, not naming
    the part's columns, or naming one tbname was a JSONDecodeError or KeyError (500); a part whose metadata differs from the others' is
    refused as parts of different columns (retriable), one whose declared types do not fit its columns as invalid."""
    prepared, parts = shipped[2]
    table = decode(parts[0])
    names = [n for n in table.column_names if n != VGROUP]
    for meta in (b"[", json.dumps([[n, "IJT", 4] for n in names]).encode(), b"[]"):
        garbled = _stream(table.replace_schema_metadata({b"walgate.partial": meta}))
        with pytest.raises(StorageError, match="different columns"):
            _merged(prepared, [garbled, *parts[1:]])
        with pytest.raises(InvalidValue, match="do not declare their columns' types"):
            _merged(prepared, [garbled])
    meta = json.loads(table.schema.metadata[b"walgate.partial"])  # a column declared, and named, tbname (KeyError)
    tbname = table.rename_columns(["tbname" if n == meta[1][0] else n for n in table.column_names])
    tbname = tbname.replace_schema_metadata({b"walgate.partial": json.dumps(
        [["tbname" if m[0] == meta[1][0] else m[0], *m[1:]] for m in meta]).encode()})
    with pytest.raises(InvalidValue, match="do not declare their columns' types"):
        _merged(prepared, [_stream(tbname)])
    as_text = _stream(table.replace_schema_metadata({b"walgate.partial": json.dumps(
        [[n, "TIMESTAMP", 8] for n in names]).encode()}))
    with pytest.raises(InvalidValue, match="not of the types they declare|query failed"):
        _merged(prepared, [as_text])


def test_rows_of_other_columns_alone_are_refused(shipped: list[tuple[PreparedSelect, list[bytes]]]) -> None:
    """Every part of a query of rows with another column than the query's source has (no part of this node among
    them to disagree with): refused as invalid, not a KeyError from the query (500)."""
    prepared, parts = shipped[0]
    table = decode(parts[0])
    renamed = table.rename_columns(["w" if n == "v" else n for n in table.column_names])
    with pytest.raises(InvalidValue, match="not of its source's columns"):
        _merged(prepared, [encode(renamed.drop_columns([VGROUP]), renamed.column(VGROUP).combine_chunks())])


def test_a_compressed_part_is_refused_before_it_is_decompressed(
        shipped: list[tuple[PreparedSelect, list[bytes]]]) -> None:
    """Arrow allocates a compressed buffer at the size the stream declares: a few kilobytes of ZSTD said 8 MB of
    rows here (and a declared 2^40 bytes failed only for want of memory); encode never compresses, so decode
    refuses any compressed stream, a dictionary batch's too, before reading it."""
    prepared, parts = shipped[0]
    zeros = pa.table({"v": pa.array([0] * (1 << 20), pa.int64()), VGROUP: pa.array([0] * (1 << 20), pa.int32())})
    bomb = _stream(zeros, "zstd")
    assert len(bomb) < zeros.nbytes // 100
    words = pa.table({"w": pa.array(["a", "b"] * 8).dictionary_encode(), VGROUP: pa.array([0] * 16, pa.int32())})
    for blob in (bomb, _stream(words, "lz4"), _huge_compressed(decode(parts[0]), 1 << 40)):
        with pytest.raises(InvalidValue, match="compressed Arrow stream"):
            decode(blob)
    assert decode(_stream(words)).num_rows == 16, "the same uncompressed, dictionary and all"
