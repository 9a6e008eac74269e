"""Fixtures of the Jepsen-style suite (issue 25): tests/cluster's helpers (the history checker, etcd, serve nodes) on
the import path, and a one-member etcd (stopped by PID)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "cluster"))
from etcd_cluster import EtcdCluster, etcd_cluster  # noqa: E402


@pytest.fixture
def etcd1(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A one-member etcd."""
    with etcd_cluster(tmp_path / "etcd", 1) as cluster:
        yield cluster
