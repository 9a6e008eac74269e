"""The control plane's pure model: etcd key names, the values stored under them, and the decisions taken on them.

No I/O and no asyncio: the shell (:mod:`walgate.cluster.etcd`, :mod:`~walgate.cluster.registry`,
:mod:`~walgate.cluster.election`, :mod:`~walgate.cluster.records`) reads etcd, hands what it read to these
functions and writes what they return. Every key lives under ``/walgate/<cluster id>/`` (:class:`Keys`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from walgate.wire.internal import WAL_FETCH

__all__ = ["Keys", "NodeInfo", "Membership", "membership", "endpoint_for", "parse_endpoints", "uses_tls",
           "RecordCursor", "RecordGap", "ControlPlaneError", "ControlPlaneUnavailable", "ControlPlaneRefused",
           "NotController", "RegistrationRefused", "leader_key", "encode_record", "decode_record",
           "encode_snapshot", "decode_snapshot", "check_registration", "MAX_RECORDS_PER_TXN"]

MAX_RECORDS_PER_TXN = 100
"""Records one append writes in one etcd transaction (etcd 3.4 refuses a transaction of more than 128 operations:
the records, the sequence counter and the fence compare fit)."""

_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SEQ_DIGITS = 20


class ControlPlaneError(Exception):
    """A control-plane operation was not done; the message says why and what to do."""


class ControlPlaneUnavailable(ControlPlaneError):
    """etcd did not answer (no member reachable, or no quorum): nothing read; a write's outcome is unknown until
    etcd answers again (a fenced write that did commit is seen by every node's record stream)."""


class ControlPlaneRefused(ControlPlaneUnavailable):
    """etcd refused a call for who made it (the etcd user, its password or its permissions): nothing read or
    written. A kind of :class:`ControlPlaneUnavailable` so that a running node's loops wait for an operator to put
    it right as they wait for etcd; a start stops on it."""


class NotController(ControlPlaneError):
    """A controller write was refused: this node's controller epoch is no longer the elected one (its lease
    expired, e.g. while the process was paused, and another node was elected). Nothing was written."""


class RegistrationRefused(ControlPlaneError):
    """A node may not register as the node id it was given (another live node has it, or its data dir is not the
    one that id was registered with)."""


class RecordGap(ControlPlaneError):
    """The record stream skipped a sequence number (records were trimmed into a snapshot while this node was not
    watching): the node must read the snapshot (:meth:`walgate.cluster.records.RecordFollower` does)."""


@dataclass(frozen=True)
class Keys:
    """The etcd keys of one cluster, all under ``/walgate/<cluster id>/``.

    * ``nodes/<id>``: a live node's :class:`NodeInfo`, put with the node's lease; its broker epoch is the revision of
      its process's first registration, carried in the value when the process registered again after losing its
      lease (:func:`walgate.cluster.registry.broker_epoch`).
    * ``incarnations/<id>``: the incarnation id of the data dir that registered node ``<id>`` (no lease: kept while
      the node is down, so that an empty data dir cannot come back as the old node).
    * ``controller/<lease id, 16 hex digits>``: a candidate of the controller election, put with its node's lease;
      the candidate with the smallest ``create_revision`` is the controller and that revision its epoch.
    * ``catalog/seq``: the sequence number of the last catalog record; ``catalog/records/<seq, 20 digits>``: one
      record each; ``catalog/snapshot``: the state of every record up to a sequence number, once the records
      before it were trimmed.
    * ``coordinators/partitions``, ``coordinators/placement``: the group coordinator's partitions and their nodes.
    """

    cluster_id: str

    def __post_init__(self) -> None:
        if not _CLUSTER_ID.match(self.cluster_id):
            raise ValueError(f"cluster id {self.cluster_id!r}: 1 to 64 of A-Z a-z 0-9 _ . -")

    @property
    def root(self) -> bytes:
        return f"/walgate/{self.cluster_id}/".encode()

    @property
    def nodes(self) -> bytes:
        return self.root + b"nodes/"

    def node(self, node_id: int) -> bytes:
        return self.nodes + str(node_id).encode()

    def incarnation(self, node_id: int) -> bytes:
        return self.root + b"incarnations/" + str(node_id).encode()

    @property
    def candidates(self) -> bytes:
        return self.root + b"controller/"

    def candidate(self, lease_id: int) -> bytes:
        return self.candidates + f"{lease_id:016x}".encode()

    @property
    def seq(self) -> bytes:
        return self.root + b"catalog/seq"

    @property
    def records(self) -> bytes:
        return self.root + b"catalog/records/"

    def record(self, seq: int) -> bytes:
        return self.records + str(seq).zfill(_SEQ_DIGITS).encode()

    def record_seq(self, key: bytes) -> int:
        """The sequence number of a ``catalog/records/`` key."""
        if not key.startswith(self.records):
            raise ValueError(f"{key!r} is not a record key of cluster {self.cluster_id}")
        return int(key[len(self.records):])

    @property
    def snapshot(self) -> bytes:
        return self.root + b"catalog/snapshot"

    @property
    def proposals(self) -> bytes:
        """``catalog/proposals/<id>``: catalog records a node that is not the controller asks it to append (put
        with the proposer's lease); ``catalog/outcomes/<id>``: the controller's answer, ``{"seq": N}`` or
        ``{"error": ...}`` (same lease)."""
        return self.root + b"catalog/proposals/"

    def proposal(self, proposal_id: str) -> bytes:
        return self.proposals + proposal_id.encode()

    def outcome(self, proposal_id: str) -> bytes:
        return self.root + b"catalog/outcomes/" + proposal_id.encode()

    @property
    def elections(self) -> bytes:
        """``elections/requests/<id>``: a leader election an operator asked a node for (ElectLeaders), which the
        controller makes (put with the asking node's lease); ``elections/outcomes/<id>``: the controller's answer,
        written with the elected states (same lease). :mod:`walgate.cluster.elections`."""
        return self.root + b"elections/requests/"

    def election(self, request_id: str) -> bytes:
        return self.elections + request_id.encode()

    def election_outcome(self, request_id: str) -> bytes:
        return self.root + b"elections/outcomes/" + request_id.encode()

    @property
    def incarnations(self) -> bytes:
        return self.root + b"incarnations/"

    @property
    def node_token(self) -> bytes:
        """The secret nodes sign the requests they forward to each other with (walgate.security.node_token): made
        by the first node that starts; an operator may write a new one (docs/security.md)."""
        return self.root + b"node_token"

    @property
    def kafka_cluster_id(self) -> bytes:
        """The Kafka cluster id every node of the cluster answers (Metadata, DescribeCluster): made by the first
        node that starts, never changed."""
        return self.root + b"kafka_cluster_id"

    @property
    def coordinator_partitions(self) -> bytes:
        """N of the group coordinator's partitions (``offsets.topic.num.partitions``) of the cluster: made by the
        first node that starts, never changed (walgate.cluster.coordinators)."""
        return self.root + b"coordinators/partitions"

    @property
    def coordinator_placement(self) -> bytes:
        """The node of each group coordinator partition: decided once, when a group's coordinator is first looked
        for (walgate.cluster.coordinators)."""
        return self.root + b"coordinators/placement"


@dataclass(frozen=True)
class NodeInfo:
    """What ``nodes/<id>`` holds: how to reach the node (its Kafka ``endpoints``, ``NAME://host:port``, and the
    base URL of its HTTP API, ``http``: None in a registration made before nodes forwarded SQL writes), its rack,
    the incarnation of its data dir, and whether it is in a controlled shutdown (``shutting_down``, KIP-631's
    ``inControlledShutdown``: still registered and serving, but neither elected leader nor admitted to an ISR;
    the field is written only when true, so a registration reads the same to a node that does not know it), and
    the highest version of each of walgate's internal APIs it answers (``internal``: api key -> version, as Kafka's
    brokers register their supported features, KIP-584; written only when some are, so a registration of an older
    release, which answers version 0 of WalFetch and no other, reads as none: :meth:`internal_version`)."""

    node_id: int
    incarnation: str
    endpoints: tuple[str, ...] = ()
    rack: str | None = None
    http: str | None = None
    shutting_down: bool = False
    internal: tuple[tuple[int, int], ...] = ()

    def internal_version(self, api_key: int) -> int:
        """The highest version of internal API ``api_key`` this node answers; when it advertises none, 0 of WalFetch
        (every release answers it) and -1 (not answered) of any other."""
        return next((version for key, version in self.internal if key == api_key), 0 if api_key == WAL_FETCH else -1)

    def encode(self) -> bytes:
        fields: dict[str, object] = {"node_id": self.node_id, "incarnation": self.incarnation,
                                     "endpoints": list(self.endpoints), "rack": self.rack, "http": self.http}
        if self.shutting_down:
            fields["shutting_down"] = True
        if self.internal:
            fields["internal"] = {str(key): version for key, version in self.internal}
        return json.dumps(fields, sort_keys=True).encode()

    @classmethod
    def decode(cls, value: bytes) -> NodeInfo:
        try:
            d = json.loads(value)
            http = d.get("http")
            shutting_down = d.get("shutting_down", False)
            if type(shutting_down) is not bool:
                raise ValueError(f"shutting_down is {shutting_down!r}, not a boolean")
            internal = tuple(sorted((int(key), int(version)) for key, version in d.get("internal", {}).items()))
            return cls(int(d["node_id"]), str(d["incarnation"]), tuple(str(e) for e in d["endpoints"]),
                       None if d["rack"] is None else str(d["rack"]), None if http is None else str(http),
                       shutting_down, internal)
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # (AttributeError: JSON, not an object)
            raise ControlPlaneError(f"a node registration in etcd is not walgate's: {value[:200]!r} ({e})") from e


def check_registration(node_id: int, incarnation: str, registered_incarnation: str | None,
                       live: NodeInfo | None) -> bool:
    """Whether node ``node_id`` with data dir ``incarnation`` may register, given the incarnation etcd has for that
    id (``None``: the id never registered) and its live registration (``None``: none). Returns True when a live
    registration must first be revoked: it is this data dir's previous process (killed and restarted before its
    lease expired; the data dir's lock keeps two processes off one data dir). Raises :class:`RegistrationRefused`
    when the data dir is not the one the id was registered with (an emptied or another node's data dir), or
    another live node has the id."""
    if registered_incarnation is not None and registered_incarnation != incarnation:
        raise RegistrationRefused(
            f"node {node_id}: this data dir (incarnation {incarnation}) is not the one node {node_id} registered with"
            f" (incarnation {registered_incarnation}): a node whose data dir was emptied or replaced must not serve as"
            f" its old self; start it with a new node id")
    if live is not None and live.incarnation != incarnation:
        raise RegistrationRefused(
            f"node {node_id}: another live node (incarnation {live.incarnation}, endpoints"
            f" {', '.join(live.endpoints) or 'none'}) is registered with this node id")
    return live is not None


def parse_endpoints(spec: str) -> list[tuple[str, int]]:
    """``http://127.0.0.1:2379,127.0.0.1:22379`` -> [(host, port), ...] (``https://`` ones too: :func:`uses_tls`
    says which); raises ValueError naming the part that is not one."""
    out: list[tuple[str, int]] = []
    for part in spec.split(","):
        part = part.strip().removeprefix("https://").removeprefix("http://").rstrip("/")
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"etcd endpoint {part!r}: expected host:port")
        out.append((host, int(port)))
    if not out:
        raise ValueError("no etcd endpoint given")
    return out


def uses_tls(spec: str) -> bool:
    """Whether the etcd endpoints ``spec`` are ``https://`` ones (a bare ``host:port`` is ``http://``); raises
    ValueError when some are and some are not (one session talks to every endpoint the same way)."""
    schemes = {part.strip().startswith("https://") for part in spec.split(",")}
    if len(schemes) > 1:
        raise ValueError(f"etcd endpoints {spec!r}: all https:// or none (one session speaks TLS to all or none)")
    return schemes == {True}


def endpoint_for(info: NodeInfo, listener: str, *, exact: bool = False) -> tuple[str, int] | None:
    """The (host, port) node ``info`` advertises on the Kafka listener named ``listener`` (its endpoints are
    ``NAME://host:port``), else (unless ``exact``) on its first listener; None when it advertises none."""
    parsed: list[tuple[str, str, int]] = []
    for endpoint in info.endpoints:
        name, sep, address = endpoint.partition("://")
        host, colon, port = address.rpartition(":")
        if sep and colon and port.isdigit():
            parsed.append((name, host, int(port)))
    for name, host, port_number in parsed:
        if name == listener:
            return host, port_number
    return (parsed[0][1], parsed[0][2]) if parsed and not exact else None


@dataclass(frozen=True)
class Membership:
    """What a node knows of the cluster: the live registered nodes (by node id), the node ids that ever registered
    (``incarnations/``: a known node that is not live is offline) and the elected controller's node id (None: no
    controller is elected, e.g. etcd lost its majority and the leases expired)."""

    nodes: tuple[NodeInfo, ...] = ()
    known: tuple[int, ...] = ()
    controller: int | None = None


def membership(nodes: list[bytes], known: list[int], candidates: list[tuple[bytes, int, bytes]]) -> Membership:
    """The :class:`Membership` read from ``nodes/`` values, the ids under ``incarnations/`` and the ``controller/``
    candidates as (key, create_revision, value ``<node id> <broker epoch>``). A value that is not walgate's raises
    :class:`ControlPlaneError`."""
    infos = sorted((NodeInfo.decode(v) for v in nodes), key=lambda n: n.node_id)
    leader = leader_key([(key, revision) for key, revision, _ in candidates])
    controller = None
    if leader is not None:
        value = next(v for k, r, v in candidates if (k, r) == leader)
        head = value.split(b" ", 1)[0]
        if not head.isdigit():
            raise ControlPlaneError(f"a controller candidate in etcd is not walgate's: {value[:100]!r}")
        controller = int(head)
    return Membership(tuple(infos), tuple(sorted(set(known) | {n.node_id for n in infos})), controller)


def leader_key(candidates: list[tuple[bytes, int]]) -> tuple[bytes, int] | None:
    """The elected controller among ``(key, create_revision)`` candidates: the oldest (smallest revision), whose
    revision is the controller epoch. Keys only ever get larger revisions, so each controller's epoch is larger
    than every earlier controller's."""
    return min(candidates, key=lambda c: c[1], default=None)


def _frame(number: int, data: bytes) -> bytes:
    return b"%d\n" % number + data


def _unframe(value: bytes, what: str) -> tuple[int, bytes]:
    head, sep, data = value.partition(b"\n")
    if not sep or not head.isdigit():
        raise ControlPlaneError(f"{what} in etcd is not walgate's: {value[:100]!r}")
    return int(head), data


def encode_record(epoch: int, payload: bytes) -> bytes:
    """A catalog record's value: the controller epoch that wrote it, a newline, the record's bytes."""
    return _frame(epoch, payload)


def decode_record(value: bytes) -> tuple[int, bytes]:
    """(controller epoch, record bytes) of a record value."""
    return _unframe(value, "a catalog record")


def encode_snapshot(seq: int, state: bytes) -> bytes:
    """``catalog/snapshot``'s value: the last record sequence number the state includes, a newline, the state."""
    return _frame(seq, state)


def decode_snapshot(value: bytes) -> tuple[int, bytes]:
    """(sequence number, state) of a snapshot value."""
    return _unframe(value, "the catalog snapshot")


@dataclass
class RecordCursor:
    """Where a node is in the catalog record stream: the last record applied (``seq``) and the etcd revision that
    wrote it (``revision``; the records of one append share a revision, so a resumed watch starts at ``revision``
    itself and :meth:`accept` drops those already applied).

    Invariant: records are applied exactly once, in sequence order, without a gap; a gap raises :class:`RecordGap`.
    """

    seq: int = 0
    revision: int = 0

    def accept(self, seq: int, revision: int) -> bool:
        """Whether record ``seq`` (written at ``revision``) is the next to apply; False for one already applied.
        The caller applies it, then calls :meth:`advance`."""
        if seq <= self.seq:
            return False
        if seq != self.seq + 1:
            raise RecordGap(f"catalog record {seq} follows {self.seq}: records {self.seq + 1}..{seq - 1} were"
                            f" trimmed into the snapshot")
        return True

    def advance(self, seq: int, revision: int) -> None:
        self.seq = seq
        self.revision = max(self.revision, revision)
