"""The web console's databases view (:func:`walgate.gateway.console.views.databases`) on a cluster node: a cluster
database with a vgroup on another node is shown with its supertables and no table list (``SHOW TABLES`` needs every
vgroup of it), never an error for the whole view."""

from __future__ import annotations

from pathlib import Path

from walgate.gateway.console.views import databases
from walgate.storage.engine import Engine
from walgate.storage.show import Dnode


def test_a_cluster_database_whose_tables_are_not_all_here_is_shown_without_them(tmp_path: Path) -> None:
    e = Engine.open(tmp_path, node_id=1)
    e.cluster_mode()
    e.set_dnodes((Dnode(1, "127.0.0.1:9092", "ready"), Dnode(2, "127.0.0.1:9093", "ready")), {1: None, 2: None})
    for sql in ("CREATE DATABASE d VGROUPS 2", "CREATE STABLE d.st (ts TIMESTAMP, v INT) TAGS (site INT)"):
        _, records = e.staged(Engine.execute, e, sql)  # as the cluster's stream takes it: staged, then applied
        for record in records:
            e.apply_shared(e.catalog.shared_seq + 1, record)
    try:
        [d] = [db for db in databases(e) if db["name"] == "d"]
        assert e.catalog.database("d").nodes == (1, 2)
        assert (d["vgroups"], [s["name"] for s in d["stables"]], d["table_count"], d["tables"]) == (2, ["st"], None, [])
    finally:
        e.close()
