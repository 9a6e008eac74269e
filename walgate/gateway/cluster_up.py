"""``walgate cluster up``: a whole cluster on this machine, started the way a user would, in the foreground.

It starts an etcd cluster of ``--etcd-members`` members (Debian's ``etcd``, etcd-server 3.4) and ``--nodes``
``walgate serve --cluster`` nodes, each a process of its own, waits until every member answers ``/health``, every
node ``/readyz`` and every node lists all nodes as ready (``SHOW DNODES``: the view placement uses), loads ``walgate
demo``'s data set (database ``power`` with one vgroup, through the node it is placed on; supertable ``meters``, 100
subtables, topics ``topic_meters`` and ``topic_power``, ``--rows`` rows), prints how to reach the cluster and waits.
The nodes spread consumer groups over :data:`COORDINATOR_PARTITIONS` group coordinator partitions (Kafka's
``offsets.topic.num.partitions`` default; docs/cluster.md, "Group coordinators"). SIGINT (Ctrl-C) or SIGTERM stops every process it started, by PID (the nodes first, SIGTERM then SIGKILL after
:data:`STOP_TIMEOUT_S`; then the etcd members), and prints where the data is; the data stays, and ``walgate cluster
up --data-dir DIR`` with the same flags starts the same cluster again.

Addresses (:func:`plan`): process ``i`` (etcd member ``i`` and node ``i + 1``) listens on the ``i``-th loopback
address from ``--address`` (127.0.0.1, 127.0.0.2, ...) on the usual ports (Kafka 9092, HTTP 6041, etcd 2379 and
2380), as if each were a host of its own; where those addresses cannot be bound (a system that routes only
127.0.0.1), every process listens on ``--address`` with the ports counted up instead. Each child runs in a session
of its own (a Ctrl-C in the terminal reaches only this process, which stops them in order) and, on Linux, is sent
SIGTERM by the kernel if this process dies without stopping it (``PR_SET_PDEATHSIG``).

:class:`LocalCluster` is the same cluster as a context manager, for the benchmarks (bench/cluster.py).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from walgate.admin.commands import add_decommission, add_elect, add_reassign

__all__ = ["Member", "Node", "Plan", "plan", "loopback_hosts", "free_loopback_block", "LocalCluster", "ClusterUpError",
           "add_command", "add_etcd_flags", "cluster_spec"]

START_TIMEOUT_S = 120.0  # every member healthy and every node ready, on a loaded machine
STOP_TIMEOUT_S = 30.0  # a process that has not exited this long after SIGTERM gets SIGKILL
COORDINATOR_PARTITIONS = 50  # the group coordinator partitions of a cluster it makes (an existing one keeps its own)
PR_SET_PDEATHSIG = 1  # prctl(2)


class _StopRequested(Exception):
    """SIGINT or SIGTERM arrived: stop the cluster (the message is the signal's name)."""


class ClusterUpError(Exception):
    """The cluster could not be started (the message says why and where its logs are)."""


@dataclass(frozen=True)
class Member:
    """One etcd member: its name and the addresses it listens on."""

    name: str
    host: str
    client_port: int
    peer_port: int

    @property
    def client_url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"


@dataclass(frozen=True)
class Node:
    """One walgate node: its id and the addresses it listens on."""

    node_id: int
    host: str
    kafka_port: int
    http_port: int

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"


@dataclass(frozen=True)
class Plan:
    """Where every process of the cluster listens."""

    members: tuple[Member, ...]
    nodes: tuple[Node, ...]

    @property
    def etcd_spec(self) -> str:
        """The value of ``walgate serve --cluster etcd=...``."""
        return ",".join(m.client_url for m in self.members)

    @property
    def bootstrap(self) -> str:
        """Every node's Kafka endpoint: a client's ``bootstrap.servers``."""
        return ",".join(n.bootstrap for n in self.nodes)

    def endpoints(self) -> list[tuple[str, int]]:
        """Every (host, port) some process of the cluster binds."""
        return ([(m.host, p) for m in self.members for p in (m.client_port, m.peer_port)]
                + [(n.host, p) for n in self.nodes for p in (n.kafka_port, n.http_port)])


def plan(nodes: int, members: int, hosts: list[str], *, kafka_port: int, http_port: int, etcd_port: int) -> Plan:
    """The addresses of ``members`` etcd members and ``nodes`` nodes. ``hosts`` holds one address per process
    (``max(nodes, members)`` of them: member ``i`` and node ``i + 1`` share the ``i``-th), or a single address that
    all share, their ports then counted up from the given ones (etcd's by two: client, peer)."""
    if nodes < 1 or members < 1:
        raise ValueError("a cluster needs at least one node and one etcd member")
    shared = len(hosts) == 1
    if not shared and len(hosts) < max(nodes, members):
        raise ValueError(f"{max(nodes, members)} addresses needed, {len(hosts)} given")

    def at(i: int) -> tuple[str, int]:  # the i-th process's host and port offset
        return (hosts[0], i) if shared else (hosts[i], 0)

    member_list = []
    for i in range(members):
        host, k = at(i)
        member_list.append(Member(f"m{i + 1}", host, etcd_port + 2 * k, etcd_port + 2 * k + 1))
    node_list = []
    for i in range(nodes):
        host, k = at(i)
        node_list.append(Node(i + 1, host, kafka_port + k, http_port + k))
    return Plan(tuple(member_list), tuple(node_list))


def loopback_hosts(first: str, count: int) -> list[str]:
    """``count`` consecutive loopback addresses from ``first`` when this machine lets each be bound (Linux routes
    all of 127.0.0.0/8 to ``lo``), else ``[first]`` alone."""
    start = ipaddress.ip_address(first)
    hosts = [str(start + i) for i in range(count)]
    for host in hosts[1:]:
        if not ipaddress.ip_address(host).is_loopback:
            return [first]
        with socket.socket() as s:
            try:
                s.bind((host, 0))
            except OSError:
                return [first]
    return hosts


def free_loopback_block(count: int, ports: tuple[int, ...], rng: random.Random) -> str:
    """The first of ``count`` consecutive loopback addresses 127.X.Y.1.. (X, Y drawn from ``rng``) on which every
    port of ``ports`` is free now: a cluster of its own beside others on this machine (tests, benchmarks)."""
    for _ in range(100):
        base = f"127.{rng.randrange(10, 250)}.{rng.randrange(1, 250)}."
        if not _in_use([(base + str(i), port) for i in range(1, count + 1) for port in ports]):
            return base + "1"
    raise ClusterUpError(f"no block of {count} free loopback addresses found")


def _in_use(endpoints: list[tuple[str, int]]) -> list[str]:
    """The endpoints another process already listens on."""
    busy = []
    for host, port in endpoints:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: TIME_WAIT is not in use
            try:
                s.bind((host, port))
            except OSError:
                busy.append(f"{host}:{port}")
    return busy


def _die_with_parent() -> None:
    """In the child, before exec: its own session, and SIGTERM from the kernel when the parent dies (Linux)."""
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class _Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""


def _get_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class LocalCluster:
    """The processes of :class:`Plan` with their data under ``root`` (``etcd/<member>``, ``node<id>``, and each
    process's log in ``logs/``; ``node_args``: more flags of every node, ``each_node``: more flags of the node of that
    id, after them). :meth:`start` returns once every member is healthy and every node is ready and lists every node;
    :meth:`stop` stops every process started, by PID, and is safe to call at any point."""

    def __init__(self, layout: Plan, root: Path, node_args: tuple[str, ...] = (),
                 each_node: Mapping[int, tuple[str, ...]] | None = None) -> None:
        self.plan = layout
        self.root = root
        self.node_args = node_args
        self.each_node = dict(each_node or {})
        self.processes: list[_Process] = []

    def node_dir(self, node: Node) -> Path:
        return self.root / f"node{node.node_id}"

    def etcd_dir(self) -> Path:
        return self.root / "etcd"

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = self.root / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    preexec_fn=_die_with_parent)
        self.processes.append(_Process(name, proc, log))

    def start(self) -> None:
        etcd = shutil.which("etcd")
        if etcd is None:
            raise ClusterUpError("etcd is not installed: install Debian's etcd-server (apt-get install etcd-server)")
        busy = _in_use(self.plan.endpoints())
        if busy:
            raise ClusterUpError(f"already in use: {', '.join(busy)} (another cluster or server?); choose other "
                                 "ports (--kafka-port, --http-port, --etcd-port) or --address")
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.plan.members)
        for m in self.plan.members:
            self._spawn(f"etcd-{m.name}", [
                etcd, "--name", m.name, "--data-dir", str(self.etcd_dir() / m.name),
                "--listen-client-urls", m.client_url, "--advertise-client-urls", m.client_url,
                "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
                "--initial-cluster", initial, "--initial-cluster-token", "walgate-cluster-up",
                "--initial-cluster-state", "new"])
        self._wait([f"{m.client_url}/health" for m in self.plan.members], "etcd members healthy")
        for n in self.plan.nodes:
            self._spawn(f"node{n.node_id}", [
                sys.executable, "-m", "walgate.gateway.cli", "serve", "--data-dir", str(self.node_dir(n)),
                "--host", n.host, "--kafka-port", str(n.kafka_port), "--http-port", str(n.http_port),
                "--node-id", str(n.node_id), "--cluster", f"etcd={self.plan.etcd_spec}",
                "--override", f"offsets.topic.num.partitions={COORDINATOR_PARTITIONS}", *self.node_args,
                *self.each_node.get(n.node_id, ())])
        self._wait([f"{n.http_url}/readyz" for n in self.plan.nodes], "nodes ready")
        self._wait([n.http_url for n in self.plan.nodes], "listing every node as ready", self._sees_all)

    def _sees_all(self, http_url: str) -> bool:
        """Whether the node at ``http_url`` lists every node of the plan as ready (``SHOW DNODES``): its view of the
        membership, which placement uses, is re-read every third of the session timeout after it is ready."""
        request = urllib.request.Request(http_url + "/rest/sql", data=b"SHOW DNODES", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as r:
                rows = json.load(r)["data"]
        except (urllib.error.URLError, OSError, ValueError, KeyError):
            return False
        return {row[0] for row in rows if row[2] == "ready"} >= {n.node_id for n in self.plan.nodes}

    def _wait(self, urls: list[str], what: str, check: Callable[[str], bool] = _get_ok) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        pending = list(urls)
        while pending:
            for p in self.processes:
                if p.proc.poll() is not None:
                    raise ClusterUpError(f"{p.name} exited with code {p.proc.returncode} (log {p.log}):\n"
                                         f"{p.log_tail()}")
            pending = [url for url in pending if not check(url)]
            if pending and time.monotonic() > deadline:
                raise ClusterUpError(f"not {what} within {START_TIMEOUT_S:g} s: {', '.join(pending)} (logs in "
                                     f"{self.root / 'logs'})")
            if pending:
                time.sleep(0.2)

    def pids(self) -> dict[str, int]:
        """Each started process's name and PID."""
        return {p.name: p.proc.pid for p in self.processes}

    def exited(self) -> list[tuple[str, int]]:
        """(name, exit code) of the started processes that are no longer running."""
        return [(p.name, code) for p in self.processes if (code := p.proc.poll()) is not None]

    def stop(self) -> None:
        """SIGTERM the nodes, then the etcd members (a node deregisters through etcd as it stops), each group
        waited for, SIGKILL for what outlives :data:`STOP_TIMEOUT_S`."""
        nodes = [p for p in self.processes if not p.name.startswith("etcd-")]
        members = [p for p in self.processes if p.name.startswith("etcd-")]
        for group in (nodes, members):
            for p in group:
                if p.proc.poll() is None:
                    p.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for p in group:
                try:
                    p.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait(10)

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------ the command


def load_demo(nodes: Sequence[Node], rows: int) -> Node:
    """``walgate demo``'s data set and ``rows`` rows, through the HTTP API of the node its one vgroup is placed on
    (which it returns): one vgroup, so every row goes to one node (SQL INSERTs are not forwarded between nodes yet,
    docs/cluster.md); its topics are the cluster's and any node's bootstrap reaches them. Statements that are ``IF
    NOT EXISTS``: a restarted cluster loads it again harmlessly, with more rows."""
    from walgate.gateway.cli import ApiClient
    from walgate.gateway.demo import insert, setup, subtables

    database, *rest = setup(vgroups=1)
    ApiClient(nodes[0].http_url).sql(database)
    [[*_, placed, _]] = ApiClient(nodes[0].http_url).sql("SHOW power.VGROUPS")["data"]
    [owner] = [n for n in nodes if n.node_id == placed]
    client = ApiClient(owner.http_url)
    for statement in (*rest, *subtables()):
        client.sql(statement)
    rng, now_ms = random.Random(1), int(time.time() * 1000)
    for start in range(0, rows, 1000):
        client.sql(insert(rng, min(1000, rows - start), now_ms + start))
    return owner


def how_to_reach(layout: Plan, root: Path) -> list[str]:
    """The lines printed once the cluster is ready: every process's address, then commands that use them."""
    first = layout.nodes[0]
    lines = [f"walgate cluster: {len(layout.members)} etcd member(s), {len(layout.nodes)} node(s), data in {root}"]
    lines += [f"  etcd {m.name:<4} {m.client_url}" for m in layout.members]
    lines += [f"  node {n.node_id:<4} Kafka {n.bootstrap}  HTTP {n.http_url}  data {root / f'node{n.node_id}'}"
              for n in layout.nodes]
    bootstrap = layout.bootstrap
    lines += [
        "",
        f"bootstrap servers: {bootstrap}",
        f"etcd endpoints:    {layout.etcd_spec}",
        "",
        "Try it:",
        f'  walgate sql --url {first.http_url} "SHOW DNODES"',
        f"  walgate topic create events -p {max(3, len(layout.nodes))} -b {bootstrap}   # partitions placed over "
        "the nodes",
        f'  walgate sql --url {first.http_url} "SHOW kafka_events.VGROUPS"',
        f"  kcat -b {bootstrap} -L",
        f"  echo hello | kcat -b {bootstrap} -P -t events -p 1",
        f"  kcat -b {bootstrap} -C -t events -o beginning -e",
        f"  kcat -b {bootstrap} -C -t topic_meters -o beginning -e   # the demo's data",
        "  python3 - <<'EOF'",
        "  from confluent_kafka import Consumer, Producer, TopicPartition",
        f"  p = Producer({{'bootstrap.servers': '{bootstrap}'}})",
        "  p.produce('events', b'from python', partition=2); p.flush(10)",
        f"  c = Consumer({{'bootstrap.servers': '{bootstrap}', 'group.id': 'example'}})",
        "  c.assign([TopicPartition('events', 2, 0)]); m = c.poll(10); print(m and m.value()); c.close()",
        "  EOF",
    ]
    return lines


def _usage(args: argparse.Namespace) -> Plan:
    if not ipaddress.ip_address(args.address).is_loopback:
        raise ValueError(f"--address {args.address} is not a loopback address: walgate cluster up runs a cluster "
                         "on this machine only, without authentication (docs/cluster.md)")
    hosts = loopback_hosts(args.address, max(args.nodes, args.etcd_members))
    return plan(args.nodes, args.etcd_members, hosts, kafka_port=args.kafka_port, http_port=args.http_port,
                etcd_port=args.etcd_port)


def _cmd_up(args: argparse.Namespace) -> int:
    try:
        layout = _usage(args)
    except ValueError as e:
        print(f"walgate: {e}", file=sys.stderr)
        return 2
    root: Path = (args.data_dir or Path(tempfile.mkdtemp(prefix="walgate-cluster-"))).resolve()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        raise _StopRequested(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    cluster, code = LocalCluster(layout, root), 0
    try:
        print(f"starting {len(layout.members)} etcd member(s) and {len(layout.nodes)} node(s) in {root} ...",
              flush=True)
        cluster.start()
        for name, pid in cluster.pids().items():
            print(f"  {name}: pid {pid}")
        if args.rows >= 0:
            owner = load_demo(list(layout.nodes), args.rows)
            print(f"demo data: database power (1 vgroup, on node {owner.node_id}), supertable meters, 100 subtables,"
                  f" {args.rows} rows, topics topic_meters and topic_power")
        print("\n".join(how_to_reach(layout, root)))
        print("\nwalgate cluster ready (Ctrl-C stops it)", flush=True)
        reported: set[str] = set()
        while True:
            for name, exit_code in cluster.exited():
                if name not in reported:
                    reported.add(name)
                    print(f"{name} exited with code {exit_code} (log {root / 'logs' / (name + '.log')})", flush=True)
            time.sleep(0.5)
    except _StopRequested as stop:
        print(f"{stop}: ", end="")
    except ClusterUpError as e:
        print(f"walgate: {e}", file=sys.stderr)
        code = 1
    except Exception as e:  # loading the demo data (ApiError, OSError): reported, then everything is stopped
        print(f"walgate: cluster up failed: {e}", file=sys.stderr)
        code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C does not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        if cluster.processes:
            print("stopping the nodes, then etcd ...", flush=True)
            cluster.stop()
            print(f"stopped. The data is kept in {root} (etcd in {cluster.etcd_dir()}, node N in {root}/nodeN, logs in "
                  f"{root / 'logs'}); `walgate cluster up --data-dir {root}` with the same flags starts it again",
                  flush=True)
    return code


def cluster_spec(text: str) -> str:
    """``--cluster etcd=http(s)://host:port[,...]`` (``walgate serve``, ``walgate cluster status``, ...): the etcd
    endpoints (checked by :class:`~walgate.gateway.config.Config`)."""
    kind, sep, endpoints = text.partition("=")
    if not sep or kind != "etcd" or not endpoints:
        raise argparse.ArgumentTypeError(f"expected etcd=http://host:port[,...] (or https://), got {text!r}")
    return endpoints


def add_etcd_flags(group: argparse._ArgumentGroup, password_elsewhere: str = "") -> None:
    """The ``--cluster-etcd-*`` flags (TLS, user and password) of ``walgate serve`` and the ``walgate cluster``
    commands that read etcd; ``password_elsewhere`` names where else the password may be given."""
    group.add_argument("--cluster-etcd-ssl-cafile", type=Path, metavar="PEM",
                       help="CA certificates of etcd's https:// endpoints (default: the system's trust store)")
    group.add_argument("--cluster-etcd-ssl-certfile", type=Path, metavar="PEM",
                       help="client certificate for etcd's --client-cert-auth (with --cluster-etcd-ssl-keyfile)")
    group.add_argument("--cluster-etcd-ssl-keyfile", type=Path, metavar="PEM", help="its unencrypted private key")
    group.add_argument("--cluster-etcd-user", metavar="NAME", help="an etcd user (etcd with auth enabled)")
    group.add_argument("--cluster-etcd-password-file", type=Path, metavar="FILE",
                       help=f"the file holding that user's password ({password_elsewhere}or WALGATE_CLUSTER_ETCD_PASSWORD)")


def _shown(name: str) -> Callable[[argparse.Namespace], int]:
    """``walgate cluster <name>`` (:mod:`walgate.admin.cluster_status`, imported when it runs: it brings the etcd
    and Kafka clients, which ``walgate serve`` and ``sql`` need not load to start)."""

    def run(args: argparse.Namespace) -> int:
        from walgate.admin.cluster_status import COMMANDS
        return COMMANDS[name](args)
    return run


def _add_shown(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``walgate cluster status``, ``nodes`` and ``partitions``: the cluster as its etcd holds it."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cluster", dest="cluster_etcd_endpoints", type=cluster_spec, required=True,
                        metavar="etcd=URL[,URL...]", help="the cluster's etcd, as walgate serve --cluster takes it")
    common.add_argument("--cluster-name", default="walgate", metavar="NAME",
                        help="the cluster's name (its nodes' cluster.name; default walgate)")
    common.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    common.add_argument("--timeout", type=float, default=10.0, metavar="S", help="give up on etcd after S seconds")
    add_etcd_flags(common.add_argument_group("reaching etcd (as walgate serve reaches it)"))
    actions.add_parser("status", parents=[common], help="whether the cluster is healthy: its controller, nodes down, "
                       "offline and under-replicated vgroups (as rpk cluster health)").set_defaults(run=_shown("status"))
    actions.add_parser("nodes", parents=[common], help="every node: address, rack, live, broker epoch, controller"
                       ).set_defaults(run=_shown("nodes"))
    partitions = actions.add_parser("partitions", parents=[common], help="every replicated vgroup: leader, leader "
                                    "epoch, replicas, ISR, under-replicated, offline")
    partitions.add_argument("--under-replicated", action="store_true",
                            help="only the vgroups whose ISR is smaller than their replicas")
    partitions.set_defaults(run=_shown("partitions"))
    add_elect(actions)  # (it speaks Kafka's protocol: walgate/admin/elect.py)
    add_reassign(actions)  # (so does it: walgate/admin/reassign.py)
    add_decommission(actions)  # (through a node's HTTP API: walgate/admin/decommission.py)


def add_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``walgate cluster up``, ``status``, ``nodes``, ``partitions`` and ``elect``."""
    cluster = commands.add_parser("cluster", help="a whole cluster on this machine (etcd and nodes); what a "
                                  "cluster's etcd says of it")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start etcd members and walgate nodes with the demo's data, in the "
                            "foreground; Ctrl-C stops them all (docs/cluster.md)")
    up.add_argument("--nodes", type=int, default=3, metavar="N", help="walgate nodes (default 3)")
    up.add_argument("--etcd-members", type=int, default=3, metavar="N", help="etcd members (default 3)")
    up.add_argument("--data-dir", type=Path, metavar="DIR",
                    help="every process's data and logs (default: a new directory under the temp dir; kept)")
    up.add_argument("--address", default="127.0.0.1", metavar="IP",
                    help="the first loopback address: process i listens on the i-th after it (default 127.0.0.1)")
    up.add_argument("--kafka-port", type=int, default=9092, metavar="N", help="default 9092")
    up.add_argument("--http-port", type=int, default=6041, metavar="N", help="default 6041")
    up.add_argument("--etcd-port", type=int, default=2379, metavar="N",
                    help="etcd's client port, its peer port the next (default 2379)")
    up.add_argument("--rows", type=int, default=1000, metavar="N",
                    help="rows of the demo's power.meters (default 1000; -1: no demo data)")
    up.set_defaults(run=_cmd_up)
    _add_shown(actions)

