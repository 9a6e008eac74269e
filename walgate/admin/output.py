"""What the admin commands print: rich tables for people, one JSON document per line with ``--json`` for programs.

:func:`guarded` turns a command's exceptions into exit codes. Results go to stdout, notes and errors to stderr, so ``--json`` output is always parseable. Cells are plain
text (never rich markup) and a missing value prints as ``-``, as kafka-consumer-groups prints it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from walgate.admin.client import AdminError, UsageError

__all__ = ["console", "guarded", "note", "print_json", "print_table"]


def guarded(command: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], int]:
    """``command`` as a ``walgate`` subcommand: exit code 0 when it returns, 1 on :class:`AdminError`, 2 on
    :class:`UsageError`, 130 on Ctrl-C; the error as one ``walgate: ...`` line on stderr, never a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            command(args)
        except AdminError as e:
            note(f"walgate: {e}")
            return 1
        except UsageError as e:
            note(f"walgate: {e}")
            return 2
        except KeyboardInterrupt:
            return 130
        return 0

    return run


def console() -> Console:
    """A console on stdout; piped output wraps cells late rather than at 80 columns."""
    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = max(out.width, 200)
    return out


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> None:
    """One table; ``None`` cells print as ``-``, numbers are right-aligned."""
    rows = list(rows)
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        numeric = bool(rows) and all(isinstance(row[i], int) or row[i] is None for row in rows)
        table.add_column(name, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*(Text("-" if cell is None else str(cell)) for cell in row))
    console().print(table)


def print_json(value: Any) -> None:
    """``value`` as one line of JSON on stdout."""
    sys.stdout.flush()
    sys.stdout.buffer.write(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS) + b"\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A line for the person at the terminal (stderr), e.g. that a reset was only a dry run."""
    print(message, file=sys.stderr)
