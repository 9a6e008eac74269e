"""Fixtures of the control-plane tests: real etcd (etcd_cluster.py) and the library's objects over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from etcd_cluster import EtcdCluster, etcd_cluster


@pytest.fixture
def etcd1(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A one-member etcd."""
    with etcd_cluster(tmp_path / "etcd", 1) as cluster:
        yield cluster


@pytest.fixture
def etcd3(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A three-member etcd."""
    with etcd_cluster(tmp_path / "etcd", 3) as cluster:
        yield cluster
