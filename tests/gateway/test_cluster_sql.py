"""TDengine's REDISTRIBUTE VGROUP / BALANCE VGROUP [LEADER] / DROP DNODE (walgate/gateway/cluster_sql.py): parsed,
and refused on a single node (not a cluster) before anything is asked; the cluster's answers are in
tests/cluster/test_serve_cluster_rebalance.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gateway.test_http_api import serving, sql
from walgate.storage.errors import SqlSyntaxError, Unsupported
from walgate.storage.sql import ast
from walgate.storage.sql.parser import parse


@pytest.mark.parametrize(("text", "stmt"), [
    ("REDISTRIBUTE VGROUP 2 DNODE 1 DNODE 3", ast.RedistributeVgroup(None, 2, (1, 3))),
    ("redistribute vgroup power.0 dnode 4 dnode 5 dnode 6;", ast.RedistributeVgroup("power", 0, (4, 5, 6))),
    ("BALANCE VGROUP", ast.BalanceVgroup(leader=False)),
    ("balance vgroup leader", ast.BalanceVgroup(leader=True)),
    ("DROP DNODE 3", ast.DropDnode(3)),
])
def test_the_statements_parse(text: str, stmt: ast.Statement) -> None:
    assert parse(text) == stmt


@pytest.mark.parametrize("text", ["REDISTRIBUTE VGROUP 1", "REDISTRIBUTE VGROUP 1 DNODE 1 DNODE 2 DNODE 3 DNODE 4",
                                  "BALANCE VGROUPS", "DROP DNODE", "DROP DNODE n1"])
def test_malformed_statements_are_syntax_errors(text: str) -> None:
    with pytest.raises(SqlSyntaxError):
        parse(text)


@pytest.mark.parametrize("text", ["REDISTRIBUTE VGROUP power.0 DNODE 0", "BALANCE VGROUP", "BALANCE VGROUP LEADER",
                                  "DROP DNODE 0"])
async def test_a_single_node_refuses_them_as_not_a_cluster(tmp_path: Path, text: str) -> None:
    async with serving(tmp_path / "data") as api:
        status, body = await sql(api, text)
    assert status == 400
    assert body["code"] == Unsupported.code
    assert "moves replicas between the nodes of a cluster: this node is a single node" in body["desc"]
