"""CSV import: a header row of column names, then data rows of text fields.

:func:`parse_csv` only splits the text; typing each field is
:func:`walgate.storage.values.coerce_text`'s job. Decisions:

* Parsing is the stdlib :mod:`csv` module's (comma, double-quote quoting with
  ``""`` for a quote inside quotes, ``strict`` so malformed quoting is an
  error, never guessed). Bytes are UTF-8; a leading BOM is ignored.
* NULL: an empty *unquoted* field is ``None``; ``""`` is the empty string.
  (Python 3.11's reader cannot tell them apart, so records holding both an
  empty field and ``""`` are re-read by :func:`_quoted_fields`.)
* Header: names are stripped; back-quoted names (```Temp```) keep their case,
  the others are lower-cased, as TDengine identifiers are. An empty or
  duplicate name is an error.
* Blank lines are skipped wherever they are (so trailing newlines are
  harmless); a one-column NULL row therefore cannot be written as a blank line.
* Every record must have as many fields as the header; errors name the 1-based
  line where the record starts, and the expected and actual counts.

:func:`read_columns` gives the same header and fields as Arrow string columns
(NULL for None), for the ingest path that types whole columns; a body without
a double quote is split by ``pyarrow.csv`` (which is not strict about quoting,
hence the condition), any other by :func:`parse_csv`. It returns None where
``pyarrow.csv`` refuses a body: :func:`parse_csv` then names the bad line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.csv as pa_csv

from walgate.storage.errors import CsvError

__all__ = ["header_name", "parse_csv", "read_columns", "records"]

_PARSE = pa_csv.ParseOptions(delimiter=",", quote_char=False, escape_char=False, ignore_empty_lines=True)
_READ = pa_csv.ReadOptions(use_threads=False, autogenerate_column_names=True, block_size=1 << 26)


def _decode(body: bytes | bytearray | memoryview | str) -> str:
    if isinstance(body, str):
        return body.removeprefix("\ufeff")
    data = bytes(body)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        lineno = data.count(b"\n", 0, exc.start) + 1
        raise CsvError(f"line {lineno}: not valid UTF-8") from None


def _quoted_fields(record: str) -> list[bool]:
    """Which fields of one record's text (already accepted by the strict csv reader) are quoted."""
    text = record.rstrip("\r\n")
    flags = []
    pos = 0
    while True:
        if text.startswith('"', pos):
            flags.append(True)
            pos = text.index('"', pos + 1)
            while text.startswith('"', pos + 1):  # a doubled quote inside the field
                pos = text.index('"', pos + 2)
            pos += 1  # now at the delimiter or the end
        else:
            flags.append(False)
            comma = text.find(",", pos)
            pos = comma if comma >= 0 else len(text)
        if pos >= len(text):
            return flags
        pos += 1


def header_name(name: str | None, lineno: int) -> str:
    """The column name of header field ``name`` (on line ``lineno``): stripped, back-quotes kept case, else
    lower-cased; CsvError when empty or holding a back-quote."""
    name = (name or "").strip()
    if len(name) >= 2 and name[0] == name[-1] == "`":
        name = name[1:-1]
    else:
        name = name.lower()
    if not name or "`" in name:
        raise CsvError(f"line {lineno}: invalid column name {name!r} in the header")
    return name


def records(body: bytes | str) -> Iterator[tuple[int, str, list[str | None]]]:
    """Every record of a CSV body that is not blank, header first: ``(the 1-based line where it starts, its text as
    the body has it, its fields)``, NULLs as the module docstring says; CsvError naming the line of malformed
    quoting."""
    consumed: list[str] = []

    def lines() -> Iterator[str]:
        for line in io.StringIO(_decode(body), newline=""):
            consumed.append(line)
            yield line

    reader = csv.reader(lines(), strict=True)
    start = 1
    while True:
        try:
            record = next(reader, None)
        except csv.Error as exc:
            raise CsvError(f"line {start}: {exc}") from None
        if record is None:
            return
        raw = "".join(consumed)
        consumed.clear()
        lineno, start = start, reader.line_num + 1
        if not record:
            continue
        fields: list[str | None] = list(record)
        if "" in record:
            quoted = _quoted_fields(raw) if '""' in raw else [False] * len(record)
            fields = [None if field == "" and not q else field for field, q in zip(record, quoted)]
        yield lineno, raw, fields


def parse_csv(body: bytes | str) -> tuple[list[str], list[list[str | None]], list[int]]:
    """``(column names, rows, the 1-based line where each row starts)`` of a CSV body (see module docstring)."""
    header: list[str] | None = None
    rows: list[list[str | None]] = []
    linenos: list[int] = []
    for lineno, _, fields in records(body):
        if header is None:
            header = [header_name(name, lineno) for name in fields]
            if len(set(header)) != len(header):
                dup = next(name for i, name in enumerate(header) if name in header[:i])
                raise CsvError(f"line {lineno}: duplicate column name {dup!r} in the header")
        elif len(fields) != len(header):
            raise CsvError(f"line {lineno}: expected {len(header)} fields (as in the header), got {len(fields)}")
        else:
            rows.append(fields)
            linenos.append(lineno)
    if header is None:
        raise CsvError("empty CSV: no header row")
    return header, rows, linenos


def read_columns(body: bytes | str) -> tuple[list[str], pa.Table] | None:
    """``(column names, one string column per name)`` of a CSV body: :func:`parse_csv`'s answer as columns (see
    the module docstring); CsvError as :func:`parse_csv` raises it, or None when :func:`parse_csv` must read it."""
    text = _decode(body)
    if '"' in text:
        header, rows, _ = parse_csv(text)
        columns = list(zip(*rows)) if rows else [()] * len(header)
        return header, pa.table([pa.array(c, pa.string()) for c in columns], names=[str(i) for i in range(len(header))])
    data = text.encode()
    try:
        raw = pa_csv.read_csv(pa.py_buffer(data), read_options=_READ, parse_options=_PARSE, convert_options=_convert(data))
    except pa.ArrowInvalid:
        return None  # a ragged row (or no row at all): parse_csv names it
    try:
        names = [header_name(raw.column(i)[0].as_py(), 0) for i in range(raw.num_columns)]
    except CsvError:
        return None  # parse_csv names the header's line
    if len(set(names)) != len(names):
        return None
    return names, raw.slice(1)


def _convert(data: bytes) -> pa_csv.ConvertOptions:
    """Every column (as many as the first record has) as text; only an empty field is NULL (none is quoted)."""
    first = data.lstrip(b"\r\n")
    width = first[: min(first.find(b) % (len(first) + 1) for b in (b"\n", b"\r"))].count(b",") + 1
    return pa_csv.ConvertOptions(column_types={f"f{i}": pa.string() for i in range(width)}, strings_can_be_null=True,
                                 null_values=[""], quoted_strings_can_be_null=False)
