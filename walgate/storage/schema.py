"""Column types of the TDengine data model and their Arrow representation.

Identifiers are case-insensitive and normalised to lower case (backquoted
names keep their case), as in TDengine. ``BINARY(n)`` is stored as its
synonym ``VARCHAR(n)``. Every table's first column is the TIMESTAMP primary
key; timestamps are int64 ticks in the database precision and travel in
Arrow as ``timestamp(unit)`` without a time zone (UTC by convention).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["ColumnType", "Column", "TYPE_NAMES", "PRECISIONS", "arrow_schema"]

# name -> arrow type (TIMESTAMP depends on precision, handled in ColumnType.arrow)
_ARROW: dict[str, pa.DataType] = {
    "BOOL": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "TINYINT UNSIGNED": pa.uint8(),
    "SMALLINT UNSIGNED": pa.uint16(),
    "INT UNSIGNED": pa.uint32(),
    "BIGINT UNSIGNED": pa.uint64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "NCHAR": pa.string(),
    "JSON": pa.string(),
}
TYPE_NAMES = frozenset(_ARROW) | {"TIMESTAMP"}
PRECISIONS = {"ms": "ms", "us": "us", "ns": "ns"}
_SIZES = {"BOOL": 1, "TINYINT": 1, "SMALLINT": 2, "INT": 4, "BIGINT": 8, "FLOAT": 4, "DOUBLE": 8, "TIMESTAMP": 8}


@dataclass(frozen=True)
class ColumnType:
    """A column type: ``name`` is one of TYPE_NAMES; ``length`` only for VARCHAR/NCHAR/JSON."""

    name: str
    length: int | None = None

    def arrow(self, precision: str = "ms") -> pa.DataType:
        if self.name == "TIMESTAMP":
            return pa.timestamp(PRECISIONS[precision])
        return _ARROW[self.name]

    @property
    def size(self) -> int:
        """Byte width as TDengine reports it in DESCRIBE / column_meta."""
        if self.length is not None:
            return self.length
        return _SIZES.get(self.name.split()[0], 8)

    @property
    def is_string(self) -> bool:
        return self.name in ("VARCHAR", "NCHAR", "JSON")

    def __str__(self) -> str:
        return f"{self.name}({self.length})" if self.length is not None else self.name


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType


def arrow_schema(columns: list[Column] | tuple[Column, ...], precision: str) -> pa.Schema:
    """Arrow schema of a table's data columns (tags are not stored per row)."""
    return pa.schema([pa.field(c.name, c.type.arrow(precision)) for c in columns])
