"""``walgate cluster decommission N`` (rpk's ``redpanda admin brokers decommission``, TDengine's ``DROP DNODE``) and
``walgate cluster rebalance`` (``BALANCE VGROUP``; ``--leaders``: ``BALANCE VGROUP LEADER``), through a node's HTTP
API (``--url``, ``--user`` as ``walgate sql`` takes them).

The node asked plans the moves (:mod:`walgate.replication.rebalance`, on the vgroups, partition states and live nodes
it holds) and sends them to the controller as one reassignment request (:mod:`walgate.gateway.cluster_sql`); a
refusal (a vgroup of one copy on the node, no node left to take a replica, a move to a node not holding the vgroup
before that is served) is one ``walgate: ...`` line, exit code 1, nothing moved. The answer is the count of vgroups
moving. With ``--wait`` the command then polls the node's view of the cluster (``/ui/api/cluster``, the console's)
once a second, printing the vgroups still moving (VGROUP REPLICAS ADDING REMOVING) whenever they change, until node
``N`` holds no replica (decommission) or no move is in progress (rebalance), or ``--wait-timeout`` passes (exit 1).
Decommissioning neither stops nor deregisters the node: once it holds nothing, stop it (``SHOW DNODES`` then lists
it offline). ``--json``: one JSON document at the end instead of tables and lines.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from walgate.admin.client import AdminError
from walgate.admin.output import print_json, print_table

__all__ = ["POLL_S", "decommission", "holding", "moving", "rebalance"]

POLL_S = 1.0

Page = dict[str, Any]
"""``/ui/api/cluster``'s JSON (:func:`walgate.gateway.console.cluster_page.cluster_page`)."""


def holding(page: Page, node: int) -> list[dict[str, Any]]:
    """The vgroups of ``page`` whose replicas (those being removed included) name ``node``."""
    return [p for p in page["partitions"] if node in p["replicas"]]


def moving(page: Page) -> list[dict[str, Any]]:
    """The vgroups of ``page`` with a move in progress."""
    return [p for p in page["partitions"] if p["adding_replicas"] or p["removing_replicas"]]


def _name(p: dict[str, Any]) -> str:
    return f"{p['topic'] or p['database'] or p['db_id']}/{p['vgroup']}"


def _ids(replicas: list[int]) -> str:
    return ",".join(map(str, replicas)) or "-"


def _rows(parts: list[dict[str, Any]]) -> list[list[Any]]:
    return [[_name(p), _ids(p["replicas"]), _ids(p["adding_replicas"]), _ids(p["removing_replicas"])] for p in parts]


def _run(args: argparse.Namespace, statement: str, left: Callable[[Page], list[dict[str, Any]]], done: str) -> None:
    """``statement`` through the node at ``args.url``, then with ``args.wait`` polling until ``left`` of the
    node's cluster view is empty (module docstring)."""
    from walgate.gateway.cli import ApiClient, ApiError, credentials

    client = ApiClient(args.url, credentials(args.user))
    try:
        moved = int(client.sql(statement)["data"][0][0])
    except ApiError as e:
        raise AdminError(f"{statement} refused: {e}") from None
    report: dict[str, Any] = {"statement": statement, "vgroups_moving": moved}
    if not args.wait:
        if args.json:
            print_json(report)
        else:
            print(f"{statement}: {moved} vgroup(s) moving (--wait follows them; walgate cluster reassign --list "
                  "shows them)")
        return
    deadline, shown = time.monotonic() + args.wait_timeout, None
    while True:
        try:
            remaining = left(client.get_json("/ui/api/cluster"))
        except ApiError as e:
            raise AdminError(f"cannot read the cluster through {args.url}: {e}") from None
        rows = _rows(remaining)
        if rows and rows != shown and not args.json:
            print_table(["VGROUP", "REPLICAS", "ADDING", "REMOVING"], rows)
        shown = rows
        if not remaining:
            break
        if time.monotonic() > deadline:
            raise AdminError(f"{len(remaining)} vgroup(s) still moving after {args.wait_timeout:g} s: "
                             f"{', '.join(r[0] for r in rows)} (the moves go on; wait again)")
        time.sleep(POLL_S)
    if args.json:
        print_json({**report, "done": True})
    else:
        print(done)


def decommission(args: argparse.Namespace) -> None:
    """``walgate cluster decommission N [--wait] [--json]``."""
    node = args.node
    _run(args, f"DROP DNODE {node}", lambda page: holding(page, node),
         f"node {node} holds no replica now: stop it (it is not deregistered; SHOW DNODES lists it offline once "
         "stopped)")


def rebalance(args: argparse.Namespace) -> None:
    """``walgate cluster rebalance [--leaders] [--wait] [--json]``."""
    _run(args, "BALANCE VGROUP LEADER" if args.leaders else "BALANCE VGROUP", moving,
         "no move in progress: the replicas are balanced")
