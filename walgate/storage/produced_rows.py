"""Produced Kafka records as rows of a TDengine topic's tables: the ingest of Produce into a TDengine topic.

Each record of a partition is either a JSON object (key = the subtable, or a ``tbname`` string field; fields =
columns, and tags for a subtable that is new) for topics over a supertable, or InfluxDB line protocol (ns timestamps
unless the record has a ``precision`` header: ns, us, ms or s) whose measurement is the topic's supertable (any, for
database topics). A partition's records are written in one ingest write, whole or not at all (across every vnode they
land in), or refused with :class:`RecordsRefused`: records that are wrong in themselves (a key or header that is not
UTF-8, JSON that does not parse or is not an object, a ``tbname`` that is not a string, line protocol that does not
parse, another measurement, a precision other than the partition's first record's) are listed with their index among
the partition's records; rows that do not fit the schema are the ingest's own error.
"""

from __future__ import annotations

from typing import Any

import orjson

from walgate.storage.errors import InvalidValue, LineProtocolError
from walgate.storage.ingest import Ingest
from walgate.storage.lineproto import PRECISION_NS, parse_lines
from walgate.storage.store import Store
from walgate.wire import DecodedBatch, DecodedRecord

__all__ = ["RecordsRefused", "write_records"]


class RecordsRefused(InvalidValue):
    """Records of a partition that are wrong in themselves: ``records`` is [(index among the partition's records,
    message)]; the error's message is ``message``, else one naming the first of them."""

    def __init__(self, records: list[tuple[int, str]], message: str | None = None) -> None:
        index, first = records[0]
        more = f"{len(records)} records refused; " if len(records) > 1 else ""
        super().__init__(message if message is not None else f"{more}record {index}: {first}")
        self.records = records


def write_records(store: Store, ingest: Ingest, topic_name: str, batches: list[DecodedBatch]) -> None:
    """The records of *batches* as rows of TDengine topic *topic_name*'s tables, in one write (see the module
    docstring).

    Raises :class:`RecordsRefused` for records wrong in themselves (nothing written), or the ingest's error."""
    topic = store.catalog.topics[topic_name]
    stable = store.catalog.stables.get((topic.db, topic.source))
    records = [r for b in batches for r in b.records]
    is_json = [(r.value or b"").lstrip().startswith(b"{") for r in records]
    errors: list[tuple[int, str]] = []
    if is_json and is_json[0]:
        if stable is None:
            raise InvalidValue(f"JSON rows need a topic over a supertable; {topic_name} is not")
        rows: list[tuple[str, dict[str, Any], int]] = []
        for k, r in enumerate(records):
            try:
                if not is_json[k]:
                    raise InvalidValue("a partition's records are all JSON rows or all line protocol")
                rows.append(_json_row(r))
            except InvalidValue as exc:
                errors.append((k, exc.message))
        if errors:
            raise RecordsRefused(errors)
        ingest.write_json_rows(topic.db, stable.name, rows)
        return
    precision: str | None = None
    for k, r in enumerate(records):
        try:
            if is_json[k]:
                raise InvalidValue("a partition's records are all JSON rows or all line protocol")
            own = _precision(r)
            precision = precision or own
            if own != precision:
                raise InvalidValue(f"precision {own} differs from the partition's first record's ({precision})")
            if stable is not None:
                lines = (line for line in (r.value or b"").splitlines() if line.strip())
                if {line.split(b",", 1)[0].split(b" ", 1)[0] for line in lines} - {stable.name.encode()}:
                    raise InvalidValue(f"line protocol into {topic_name} writes measurement {stable.name} only")
        except InvalidValue as exc:
            errors.append((k, exc.message))
    if errors:
        raise RecordsRefused(errors)
    values = [r.value or b"" for r in records]
    assert precision is not None  # the records are not empty (validate_produced)
    try:
        ingest.write_lines(topic.db, b"\n".join(values), precision)
    except LineProtocolError:
        errors = [(k, msg) for k, v in enumerate(values) if (msg := _line_error(v, precision))]
        if errors:
            raise RecordsRefused(errors) from None
        raise


def _json_row(r: DecodedRecord) -> tuple[str, dict[str, Any], int]:
    """(subtable, fields, timestamp ms) of a JSON record; InvalidValue when it is wrong in itself."""
    try:
        fields = orjson.loads(r.value or b"")
    except orjson.JSONDecodeError as exc:
        raise InvalidValue(f"not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise InvalidValue(f"a JSON row is an object, not {type(fields).__name__}")
    name = fields.pop("tbname", None)
    if name is None:
        try:
            name = (r.key or b"").decode()
        except UnicodeDecodeError:
            raise InvalidValue("the record key (the subtable's name) is not UTF-8") from None
        if not name:
            raise InvalidValue("a JSON row names its subtable: the record key or a tbname field")
    elif not isinstance(name, str) or not name:
        raise InvalidValue(f"tbname names the subtable: a non-empty string, not {orjson.dumps(name)[:64].decode()}")
    return name, fields, r.timestamp


def _precision(r: DecodedRecord) -> str:
    """The ``precision`` header of a line-protocol record (ns without one); InvalidValue for another value."""
    raw = dict(r.headers).get("precision") or b"ns"
    precision = raw.decode("ascii", errors="replace")
    if precision not in PRECISION_NS:
        raise InvalidValue(f"precision header {raw[:16]!r}: ns, us, ms or s")
    return precision


def _line_error(value: bytes, precision: str) -> str | None:
    """Why one record's line protocol does not parse (None: it does)."""
    try:
        parse_lines(value, precision)
    except LineProtocolError as exc:
        return exc.message
    return None
