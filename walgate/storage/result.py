"""The answer to one SQL statement, as the REST API (``/rest/sql``) returns it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Result", "affected"]


@dataclass
class Result:
    """``columns`` as TDengine's column_meta ``(name, type, length)``; ``database`` is set by USE."""

    columns: list[tuple[str, str, int]]
    rows: list[list[Any]]
    affected_rows: int | None = None
    database: str | None = None


def affected(n: int) -> Result:
    """The result of a statement that writes: ``n`` affected rows."""
    return Result([("affected_rows", "INT", 4)], [[n]], affected_rows=n)
