"""The programs outside Python that some benchmark rows need (kcat, a peer broker's binary, a C compiler).

Each lookup returns the program, or None after printing one line that names the rows left out and how to get
what is missing: a scenario leaves those rows out of the table and goes on, it never fails on a missing tool.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

__all__ = ["packaged", "program", "skipped"]


def skipped(rows: str, why: str) -> None:
    """Print that ``rows`` are left out of the table, and ``why``."""
    print(f"bench: {rows} skipped: {why}", flush=True)


def program(name: str, rows: str, install: str) -> str | None:
    """The path of command ``name`` on PATH, or None after printing that ``rows`` are skipped (``install``: how to
    get it)."""
    path = shutil.which(name)
    if path is None:
        skipped(rows, f"`{name}` is not on PATH ({install})")
    return path


def packaged(module: str, relative: str, rows: str, install: str) -> Path | None:
    """The executable ``relative`` shipped inside the installed Python package ``module``, or None after printing
    that ``rows`` are skipped (``install``: how to get it)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        skipped(rows, f"Python package {module} is not installed ({install})")
        return None
    path = Path(spec.origin).parent / relative
    if not os.access(path, os.X_OK):
        skipped(rows, f"{path} is missing or not executable ({install})")
        return None
    return path
