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

    def rest_body(self) -> dict[str, Any]:
        """The TDengine-REST JSON body of the statement's success: ``column_meta``, ``data``, ``rows`` (a write:
        ``affected_rows``), ``database`` after USE."""
        if self.affected_rows is not None:
            body: dict[str, Any] = {"code": 0, "column_meta": [["affected_rows", "INT", 4]],
                                    "data": [[self.affected_rows]], "rows": 1}
        else:
            body = {"code": 0, "column_meta": [list(c) for c in self.columns], "data": self.rows,
                    "rows": len(self.rows)}
        if self.database is not None:
            body["database"] = self.database
        return body


def affected(n: int) -> Result:
    """The result of a statement that writes: ``n`` affected rows."""
    return Result([("affected_rows", "INT", 4)], [[n]], affected_rows=n)
