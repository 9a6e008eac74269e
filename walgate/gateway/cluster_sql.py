"""TDengine's statements that move vgroups' replicas, run by the node asked (issue 26): each is planned here and sent
to the controller as one reassignment request (KIP-455: :mod:`walgate.cluster.reassignments`, the request
AlterPartitionReassignments sends) or one preferred-leader election request (KIP-460), answered once the controller
wrote the states; the moves then complete as their new replicas catch up (``walgate cluster reassign --list``).

* ``REDISTRIBUTE VGROUP [db.]N DNODE a [DNODE b] [DNODE c]``: vgroup ``N`` of the session's database (walgate's
  vgroup numbers are per database: ``SHOW VGROUPS``) moved to those nodes, the first the preferred leader; as many
  as the vgroup has replicas (TDengine's rule: "Invalid vgroup replica" otherwise).
* ``BALANCE VGROUP``: the replicas evened out over the live nodes, then the preferred leaderships
  (:func:`walgate.replication.rebalance.balance`); ``BALANCE VGROUP LEADER``: each replicated vgroup's preferred
  replica elected where it is in sync and does not lead (as ``walgate cluster elect --preferred``); the answer counts
  those elected.
* ``DROP DNODE N``: every replica on node ``N`` moved to another live node
  (:func:`walgate.replication.rebalance.decommission`); the node is not removed: stop it once it holds nothing
  (``walgate cluster decommission N --wait`` waits for that).

The answer is the count of vgroups moved (affected rows). Refused, nothing asked of the controller, with TDengine's
codes and messages where they exist: a single node (not a cluster); a database or vgroup that does not exist
(``Vgroup does not exist``, 0x0332); a node not registered (``Dnode does not exist``, 0x0331); a node count other
than the replicas (``Invalid vgroup replica``, 0x03B7); no node left to take a replica (``Out of dnodes``,
0x0334); a vgroup of one copy in a cluster without ``replication.enable`` (with it, its move makes its first
partition state, issue 26: :mod:`walgate.cluster.reassignments`). A move may add a replica on a node that does not hold the
vgroup: it opens the vnode empty and catches up (docs/cluster.md "Moving replicas"). The controller's own refusals
(a node not registered at its revision, fewer replicas than ``min.insync.replicas``) come back as ``Invalid vgroup
replica``, a vgroup whose partition state it has not made as ``Vgroup does not exist``; no answer in time (no
controller, no etcd quorum) is 503, retriable. Authorization: super users only when ACLs are on (TDengine: root), as
every statement :mod:`walgate.security.sql_access` has no rule for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from walgate.cluster.elections import ElectionRequest
from walgate.cluster.partition_codec import PartitionId
from walgate.cluster.placement import one_copy_unmovable
from walgate.cluster.reassignments import ReassignmentRequest
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.console.cluster_page import placed_vgroups
from walgate.gateway.kafka.controller_requests import NotAnswered, ask_through
from walgate.gateway.replicas import ReplicaManager
from walgate.gateway.storage_thread import StorageThread
from walgate.replication.elections import ElectionType
from walgate.replication.rebalance import Holding, LastCopy, NoNodeLeft, balance, decommission
from walgate.storage.engine import Engine
from walgate.storage.errors import ClusterUnavailable, StorageError, Unsupported
from walgate.storage.result import Result, affected
from walgate.storage.sql import ast
from walgate.wire.errors import ErrorCode

__all__ = ["MoveRefused", "Vgroups", "decommissioned", "moves_replicas", "run", "vgroups"]

TIMEOUT_S = 30.0
"""How long a statement waits for the controller to write its moves or elections."""
STATE_WAIT_S = 5.0
"""How long a move of a vgroup the controller has no partition state of yet (made a moment ago) is asked again."""

DNODE_NOT_EXIST = 0x0331  # TSDB_CODE_MND_DNODE_NOT_EXIST
VGROUP_NOT_EXIST = 0x0332  # TSDB_CODE_MND_VGROUP_NOT_EXIST
NO_ENOUGH_DNODES = 0x0334  # TSDB_CODE_MND_NO_ENOUGH_DNODES
INVALID_REPLICA = 0x03B7  # TSDB_CODE_MND_INVALID_REPLICA


class MoveRefused(StorageError):
    """A move statement refused with TDengine's ``code`` (module docstring): before the controller was asked, or for
    the partitions the controller refused (the others it was asked with stand)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Vgroups:
    """Every vgroup of the catalog as this node knows it: its :class:`Holding` (the partition state's replicas, its
    move's target during one, for a replicated vgroup whose state was read; the catalog's placement otherwise),
    its name (``db/N``, or ``topic/N`` for a Kafka-native topic's)."""

    holdings: dict[PartitionId, Holding]
    names: dict[PartitionId, str]


def moves_replicas(stmt: ast.Statement) -> bool:
    """Whether ``stmt`` is one of the statements :func:`run` answers."""
    return isinstance(stmt, (ast.RedistributeVgroup, ast.BalanceVgroup, ast.DropDnode))


def vgroups(engine: Engine, replicas: ReplicaManager | None) -> Vgroups:
    """The catalog's vgroups (:class:`Vgroups`, from :func:`~walgate.gateway.console.cluster_page.placed_vgroups`),
    with the partition states ``replicas`` read. Storage lane."""
    out = Vgroups({}, {})
    replication = engine.catalog.replication  # (a vgroup of one copy moves only with it: issue 26)
    for p in placed_vgroups(engine):
        pid = PartitionId(p.db_id, p.vgroup)
        state = None if replicas is None else replicas.state_of(p.db_id, p.vgroup)
        now = p.replicas if state is None else tuple(r for r in state.replicas if r not in state.removing)
        out.holdings[pid] = Holding(now, movable=len(p.replicas) > 1 or replication)
        out.names[pid] = f"{p.topic or p.database}/{p.vgroup}"
    return out


async def run(stmt: ast.Statement, engine: Engine, storage: StorageThread, member: ClusterMember | None,
              replicas: ReplicaManager | None, db: str | None) -> Result:
    """``stmt`` (:func:`moves_replicas`) planned on this node's view and asked of the controller (module
    docstring); ``db``: the session's database."""
    if member is None:
        raise Unsupported(f"{_verb(stmt)} moves replicas between the nodes of a cluster: this node is a single node "
                          "(docs/cluster.md)")
    live = {n.node_id: n.rack for n in member.view.nodes}
    known = await storage.call(vgroups, engine, replicas)
    if isinstance(stmt, ast.BalanceVgroup) and stmt.leader:
        return await _elect_preferred(member, known)
    if isinstance(stmt, ast.RedistributeVgroup):
        dbdef = await storage.call(engine.store.resolve_db, stmt.db, db)
        pid = PartitionId(dbdef.id, stmt.vgroup)
        if pid not in known.holdings:
            raise MoveRefused(VGROUP_NOT_EXIST, f"Vgroup does not exist: database {dbdef.name} has vgroups 0 to "
                                                f"{dbdef.vgroups - 1}")
        plan = {pid: _redistributed(known, pid, stmt.dnodes, live)}
    elif isinstance(stmt, ast.DropDnode):
        plan = decommissioned(stmt.dnode, known, live, member.view.known)
    else:
        plan = balance(known.holdings, live)
    moves = {k: t for k, t in plan.items() if t != known.holdings[k].replicas}
    if moves:
        await _ask_moves(member, moves, known)
    return affected(len(moves))


async def _ask_moves(member: ClusterMember, moves: dict[PartitionId, tuple[int, ...]], known: Vgroups) -> None:
    """The controller asked for ``moves``; those of vgroups it has no partition state of yet (made a moment ago:
    its reconciliation creates their states within a second) asked again until :data:`STATE_WAIT_S` passed, then
    refused (:func:`_ask`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STATE_WAIT_S
    while True:
        last = loop.time() >= deadline
        answers = await _ask(member, ReassignmentRequest(tuple(moves.items())), "replica moves", known,
                             fine=() if last else (ErrorCode.unknown_topic_or_partition,))
        unknown = {k for k, code in answers.items() if code == ErrorCode.unknown_topic_or_partition}
        if not unknown:
            return
        moves = {k: t for k, t in moves.items() if k in unknown}
        await asyncio.sleep(0.2)


def _verb(stmt: ast.Statement) -> str:
    if isinstance(stmt, ast.RedistributeVgroup):
        return "REDISTRIBUTE VGROUP"
    if isinstance(stmt, ast.DropDnode):
        return f"DROP DNODE {stmt.dnode}"
    return "BALANCE VGROUP"


def _redistributed(known: Vgroups, pid: PartitionId, dnodes: tuple[int, ...],
                   live: Mapping[int, str | None]) -> tuple[int, ...]:
    """The target of ``REDISTRIBUTE VGROUP``, checked as TDengine checks it: registered nodes, distinct, as many as
    the vgroup has replicas."""
    holding, name = known.holdings[pid], known.names[pid]
    missing = [d for d in dnodes if d not in live]
    if missing:
        raise MoveRefused(DNODE_NOT_EXIST, f"Dnode does not exist: node {missing[0]} is not registered now")
    if len(set(dnodes)) != len(dnodes) or len(dnodes) != len(holding.replicas):
        raise MoveRefused(INVALID_REPLICA, f"Invalid vgroup replica: vgroup {name} has {len(holding.replicas)} "
                                           f"replica(s): name as many distinct dnodes (given {list(dnodes)})")
    if not holding.movable:
        raise Unsupported(one_copy_unmovable(f"vgroup {name}", False, False) or "")
    return dnodes


def decommissioned(node: int, known: Vgroups, live: Mapping[int, str | None],
                   registered: tuple[int, ...]) -> dict[PartitionId, tuple[int, ...]]:
    """``DROP DNODE node``'s plan over ``known`` and the ``live`` nodes, its refusals as TDengine's errors (module
    docstring); ``registered``: the node ids that ever registered."""
    if node not in registered:
        raise MoveRefused(DNODE_NOT_EXIST, f"Dnode does not exist: node {node} never registered in this cluster")
    try:
        return decommission(node, known.holdings, live, known.names)
    except NoNodeLeft as e:
        raise MoveRefused(NO_ENOUGH_DNODES, f"Out of dnodes: DROP DNODE {node}: {e}") from None
    except LastCopy as e:
        raise Unsupported(f"DROP DNODE {node}: {e}") from None


async def _elect_preferred(member: ClusterMember, known: Vgroups) -> Result:
    """``BALANCE VGROUP LEADER``: a preferred election of every replicated vgroup, as far as it goes (those whose
    preferred replica leads already, is not in sync, or has no partition state yet are passed over); the count of
    those elected."""
    partitions = tuple(k for k, h in known.holdings.items() if len(h.replicas) > 1)
    if not partitions:
        return affected(0)
    answers = await _ask(member, ElectionRequest(ElectionType.PREFERRED, partitions), "elections", known,
                         fine=(ErrorCode.election_not_needed, ErrorCode.preferred_leader_not_available,
                               ErrorCode.unknown_topic_or_partition))
    return affected(sum(code == ErrorCode.none for code in answers.values()))


async def _ask(member: ClusterMember, request: ElectionRequest | ReassignmentRequest, what: str, known: Vgroups,
               fine: tuple[ErrorCode, ...] = ()) -> dict[PartitionId, ErrorCode]:
    """The controller's answers to ``request``; raises when it did not answer (503) or refused a partition (all
    the request's other partitions stand: the controller decides each alone), unless with a code of ``fine``."""
    answers = await ask_through(member, request, TIMEOUT_S, what)
    if isinstance(answers, NotAnswered):
        raise ClusterUnavailable(f"{answers.message}: retry (what the controller did meanwhile stands)")
    refused = {k: code for k, code in answers.items() if code != ErrorCode.none and code not in fine}
    if refused:
        named = "; ".join(f"vgroup {known.names.get(k, k)}: {ErrorCode(code).name.upper()}"
                          for k, code in refused.items())
        if all(code == ErrorCode.unknown_topic_or_partition for code in refused.values()):
            raise MoveRefused(VGROUP_NOT_EXIST, f"Vgroup does not exist: the controller has no partition state of "
                                                f"{named} (made within a second of its CREATE)")
        raise MoveRefused(INVALID_REPLICA, f"Invalid vgroup replica: the controller refused {named}; the others "
                                           f"asked with it stand (its log says why)")
    return answers
