"""Repository-wide pytest fixtures (the helpers behind them live in livewalgate.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from livewalgate import WalgateServer, running_walgate


@pytest.fixture
def walgate_server(tmp_path: Path) -> Iterator[WalgateServer]:
    """A running ``walgate serve`` with a fresh data directory under ``tmp_path``."""
    with running_walgate(tmp_path / "walgate") as server:
        yield server
