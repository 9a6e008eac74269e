"""The partition states' etcd form: ``partitions/<db id>/<vgroup>`` keys, their JSON values, and the controller's
batches of changes. Pure: no I/O, no asyncio (:mod:`walgate.cluster.partition_states` reads and writes etcd).

A value is ``{"replicas": [...], "leader": id|-1, "leader_epoch": n, "isr": [[id, broker epoch], ...], "elr": [...],
"min_isr": n, "unclean": bool}``, with ``"adding": [...]`` and ``"removing": [...]`` while replicas are being moved
(KIP-455; written only then, so a state without a move has the value it had before moves existed, and a value
without them decodes as no move in progress); the partition epoch is not in it: it is the key's ``mod_revision``, which every
write of the key compares (KIP-497's partition epoch, grown by etcd itself on every change). A value that is not a
state :class:`~walgate.replication.partition.PartitionState` allows (not JSON, a field missing or of another type, a
broken invariant) raises :class:`PartitionStateDamaged`, never another exception.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from walgate.cluster.model import ControlPlaneError, Keys
from walgate.replication.partition import (
    NO_LEADER,
    IsrMember,
    PartitionState,
    initial_state,
    moves_valid,
    reconcile,
    reconfigure,
)

__all__ = ["MAX_STATES_PER_TXN", "PartitionId", "PartitionStateDamaged", "partitions_prefix", "partition_key",
           "partition_id", "encode_state", "decode_state", "reconcile_all", "batches", "ReplicatedVnode",
           "CatalogVnodes", "unwanted_states", "missing_states", "reconfigured_states"]

MAX_STATES_PER_TXN = 60
"""States one controller transaction writes or creates: a compare and a put each. etcd (``--max-txn-ops``, 128 by
default) limits each of a transaction's compare, success and failure lists separately: 60 compares plus the
controller epoch's and the registrations' leave room below 128, and so do 60 puts plus a catalog record's."""


class PartitionStateDamaged(ControlPlaneError):
    """A ``partitions/`` key or value in etcd is not a partition state walgate wrote."""


@dataclass(frozen=True, order=True)
class PartitionId:
    """A vnode, the unit of replication: vgroup ``vgroup`` of database ``db_id``."""

    db_id: str
    vgroup: int


def partitions_prefix(keys: Keys) -> bytes:
    return keys.root + b"partitions/"


def partition_key(keys: Keys, pid: PartitionId) -> bytes:
    if not pid.db_id or "/" in pid.db_id or pid.vgroup < 0:
        raise ValueError(f"{pid}: a database id without '/' and a vgroup >= 0")
    return partitions_prefix(keys) + f"{pid.db_id}/{pid.vgroup}".encode()


def partition_id(keys: Keys, key: bytes) -> PartitionId:
    """The vnode a ``partitions/`` key names; :class:`PartitionStateDamaged` when it is not one, or not the key
    :func:`partition_key` makes for it (``.../007``: one vnode has one key)."""
    prefix = partitions_prefix(keys)
    db_id, sep, vgroup = key[len(prefix):].decode(errors="replace").partition("/")
    if (not key.startswith(prefix) or not sep or not db_id or not vgroup.isdigit() or not vgroup.isascii()
            or vgroup != str(int(vgroup))):
        raise PartitionStateDamaged(f"etcd key {key[:200]!r} is not a partition state's key"
                                    f" ({prefix.decode()}<db id>/<vgroup>)")
    return PartitionId(db_id, int(vgroup))


def encode_state(state: PartitionState) -> bytes:
    """The value of ``state``'s key (its partition epoch is the key's ``mod_revision``, not in the value)."""
    value: dict[str, Any] = {"replicas": list(state.replicas), "leader": state.leader,
                             "leader_epoch": state.leader_epoch, "isr": [[m.replica, m.broker_epoch] for m in state.isr],
                             "elr": list(state.elr), "min_isr": state.min_isr, "unclean": state.unclean_election}
    if state.moving:
        value |= {"adding": list(state.adding), "removing": list(state.removing)}
    return json.dumps(value, sort_keys=True).encode()


def _int(d: Mapping[str, Any], field: str) -> int:
    value = d[field]
    if type(value) is not int:
        raise TypeError(f"{field} is {value!r}, not an integer")
    return value


def _ints(values: Any, field: str) -> tuple[int, ...]:
    if not isinstance(values, list) or any(type(v) is not int for v in values):
        raise TypeError(f"{field} is {values!r}, not a list of integers")
    return tuple(values)


def decode_state(value: bytes, mod_revision: int) -> PartitionState:
    """The state a key holds at ``mod_revision`` (its partition epoch). Raises :class:`PartitionStateDamaged` when
    the value is not one, or breaks an invariant of :class:`PartitionState` (distinct replicas; the ISR and ELR
    disjoint subsets of them; the leader in the ISR or none; 1 <= min_isr <= the replicas; the adding and removing
    replicas distinct, disjoint subsets of them, the removing ones last and not all of them)."""
    try:
        d = json.loads(value)
        if not isinstance(d, dict):
            raise TypeError("not a JSON object")
        isr_pairs = d["isr"]
        if not isinstance(isr_pairs, list) or any(not isinstance(p, list) or len(p) != 2 for p in isr_pairs):
            raise TypeError(f"isr is {isr_pairs!r}, not a list of [replica, broker epoch]")
        isr = tuple(sorted(IsrMember(*_ints(p, "isr")) for p in isr_pairs))
        unclean = d["unclean"]
        if not isinstance(unclean, bool):
            raise TypeError(f"unclean is {unclean!r}, not a boolean")
        state = PartitionState(_ints(d["replicas"], "replicas"), _int(d, "leader"), _int(d, "leader_epoch"),
                               mod_revision, isr, _ints(d["elr"], "elr"), _int(d, "min_isr"), unclean,
                               _ints(d.get("adding", []), "adding"), _ints(d.get("removing", []), "removing"))
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise PartitionStateDamaged(f"a partition state in etcd is not walgate's: {value[:200]!r} ({e})") from e
    replicas, ids = set(state.replicas), [m.replica for m in state.isr]
    broken = ("replicas repeated" if len(replicas) != len(state.replicas) or not replicas
              else "an ISR member repeated or not a replica" if len(set(ids)) != len(ids) or not replicas >= set(ids)
              else "an ELR member repeated, not a replica or in the ISR"
              if len(set(state.elr)) != len(state.elr) or not replicas >= set(state.elr) or set(state.elr) & set(ids)
              else "the leader not in the ISR" if state.leader != NO_LEADER and state.leader not in ids
              else "min_isr out of range" if not 1 <= state.min_isr <= len(replicas)
              else "a negative epoch" if state.leader_epoch < 0 or mod_revision < 0
              else "adding or removing replicas repeated, not replicas or both"
              if not moves_valid(state.replicas, state.adding, state.removing) else None)
    if broken is not None:
        raise PartitionStateDamaged(f"a partition state in etcd is not walgate's: {value[:200]!r} ({broken})")
    return state


def reconcile_all(states: Mapping[PartitionId, PartitionState], live: Mapping[int, int]
                  ) -> dict[PartitionId, PartitionState]:
    """The controller's changes (``partition.reconcile`` of each state, given the registered brokers ``live``:
    node id -> broker epoch), in partition order; the states that need none are left out."""
    changed = {pid: reconcile(states[pid], live) for pid in sorted(states)}
    return {pid: new for pid, new in changed.items() if new is not None}


@dataclass(frozen=True)
class ReplicatedVnode:
    """What the catalog record says of a vnode of more than one replica: its replicas (the first the preferred
    leader), ``min.insync.replicas`` and ``unclean.leader.election.enable``, and, while a move is in progress (the
    ``place_vgroup`` record that began it: KIP-455), the replicas it adds and removes (``replicas`` is then the
    target followed by the removing ones)."""

    replicas: tuple[int, ...]
    min_isr: int
    unclean_election: bool = False
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()


@dataclass(frozen=True)
class CatalogVnodes:
    """What a node's catalog tells the controller of the partition states to make and delete: ``vnodes``, the
    replicated vnodes (each gets a state when it has none), and ``unjudged``, the ids of the cluster's databases this
    catalog passes over (a database of the node's own holds the name: "A single node's data dir into a cluster"),
    whose states it neither makes nor deletes (:func:`unwanted_states`): it cannot tell them from a dropped
    database's, and another controller, or this one once it holds them, judges them; ``one_copy``, the vgroups of one
    copy with no state (a cluster with ``replication.enable``), from which a replica move makes the first state of
    the vgroup it moves (issue 26: :func:`walgate.cluster.reassignments.decide`)."""

    vnodes: Mapping[PartitionId, ReplicatedVnode]
    unjudged: frozenset[str] = frozenset()
    one_copy: Mapping[PartitionId, ReplicatedVnode] = field(default_factory=dict)


def unwanted_states(catalog: CatalogVnodes, present: Collection[PartitionId]) -> list[PartitionId]:
    """The vnodes of ``present`` (every ``partitions/`` key read, damaged ones included) whose state the controller
    deletes: those of a database the catalog does not hold (dropped), none of an ``unjudged`` database's."""
    return sorted(pid for pid in present if pid not in catalog.vnodes and pid.db_id not in catalog.unjudged)


def missing_states(catalog: Mapping[PartitionId, ReplicatedVnode], present: Collection[PartitionId],
                   live: Mapping[int, int], revision: int) -> tuple[dict[PartitionId, PartitionState],
                                                                dict[PartitionId, str]]:
    """The states to create, in partition order: ``partition.initial_state`` (the first registered replica leads,
    the registered ones in sync at their broker epochs ``live``; a move in progress carried, its adding replicas out
    of the ISR) of each replicated vnode the catalog holds whose key is not in ``present`` (every
    ``partitions/`` key read, damaged values included: a damaged state is the operator's to delete, never
    overwritten) and one of whose replicas not being added is registered (none: no state yet, since one with no
    leader and an empty ISR could never elect; Kafka likewise refuses to create a partition whose brokers are all
    fenced, and the controller's next pass follows a registration). Apart: why no state can be built for each vnode
    whose catalog entry ``initial_state`` refuses (replicas repeated, ``min_isr`` out of range, a move that is not
    one), which never stops the creation of the others.

    Each starts at leader epoch ``revision``, the etcd revision the absence was read at, not at 0: a state made
    again after its key was deleted (by an operator: the controller deletes a state only with its database) must
    start above every leader epoch the deleted one reached, or its replicas, whose leader epoch caches hold those
    epochs, would refuse to lead in it (an epoch never goes back: KIP-101) and the vgroup would stay leaderless. Each
    of those epochs was written by a write of the deleted key, each write one epoch at most above the last, from a
    creation whose epoch was below its own revision: so each is below its write's revision, below the delete's,
    which is at most ``revision``. (The partition epoch is the key's mod revision: it grows across a delete as it
    is. Kafka's controller never forgets a partition's epochs: its metadata log keeps the partition record until the
    topic is deleted.) The etcd revision stays below 2^31, leader epochs' wire range, for as long as the cluster's
    etcd takes fewer writes than that.
    """
    states: dict[PartitionId, PartitionState] = {}
    refused: dict[PartitionId, str] = {}
    for pid, v in sorted(catalog.items()):
        if pid in present or not any(r in live and r not in v.adding for r in v.replicas):
            continue
        try:
            states[pid] = initial_state(v.replicas, live, v.min_isr, v.unclean_election, v.adding, v.removing,
                                        revision)
        except ValueError as e:
            refused[pid] = str(e)
    return states, refused


def reconfigured_states(catalog: Mapping[PartitionId, ReplicatedVnode], states: Mapping[PartitionId, PartitionState]
                        ) -> dict[PartitionId, PartitionState]:
    """The states whose ``min_isr`` or unclean election the catalog's entry changed (a topic's
    ``min.insync.replicas`` or ``unclean.leader.election.enable`` altered), each ``partition.reconfigure``d; a
    state without a catalog entry is not changed here (it is deleted), nor one whose new ``min_isr`` the state
    cannot hold (above its replicas: the catalog never names one)."""
    out: dict[PartitionId, PartitionState] = {}
    for pid, state in sorted(states.items()):
        v = catalog.get(pid)
        if v is None or not 1 <= v.min_isr <= len(state.replicas):
            continue
        new = reconfigure(state, v.min_isr, v.unclean_election)
        if new is not state:
            out[pid] = new
    return out


def batches(changes: Collection[PartitionId], size: int = MAX_STATES_PER_TXN) -> Iterator[list[PartitionId]]:
    """``changes``' partitions (a mapping's keys) in key order, cut into transactions of at most ``size``."""
    order = sorted(changes)
    for start in range(0, len(order), size):
        yield order[start:start + size]
