"""The ``walgate`` command line.

- ``walgate serve``  — run a node (HTTP API and Kafka listener); it first raises the soft limit on open files
  to the hard limit (logged).
- ``walgate sql``    — run SQL against a running node over HTTP and print the results.
- ``walgate ingest`` — post a line-protocol or CSV file to a running node.
- ``walgate demo``   — the one-command quick start: a throw-away node, the classic
  ``power.meters`` data set, two topics, a look at the catalog.
- ``walgate repair`` — on a stopped server's data dir (refused while a server holds it): bring back what a damaged
  ``catalog.log`` took out of service (``walgate.storage.repair``).
- ``walgate topic|group|consume|produce`` — admin commands over the Kafka protocol (``walgate.admin``).
- ``walgate cluster up`` — etcd members and nodes on this machine, in the foreground (``walgate.gateway.cluster_up``).

Exit codes: 0 success, 1 the server refused a request or could not be reached,
2 bad usage or configuration. Errors go to stderr; results to stdout (rich tables,
or JSON lines with ``sql --json``).

The client commands (``sql``, ``ingest``) use urllib and never import the server
(aiohttp, uvloop, the engine): ``serve`` and ``demo`` import it when they run,
which keeps ``walgate sql`` starting in a fraction of a second.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import getpass
import logging
import os
import resource
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import fields
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from walgate.admin import add_commands as add_admin_commands
from walgate.admin.commands import DEFAULT_URL
from walgate.gateway.cluster_up import add_command as add_cluster_command
from walgate.gateway.cluster_up import add_etcd_flags, cluster_spec
from walgate.gateway.config import Config, ConfigError, load_config, parse_override
from walgate.gateway.logs import LOG_FORMATS, setup_logging
from walgate.storage.errors import StorageError

__all__ = ["main", "parser", "serve_config", "split_statements", "render_result", "protected_mode_refusal", "ApiClient", "ApiError"]

log = logging.getLogger(__name__)

HTTP_TIMEOUT = 300.0  # seconds; bounds every CLI request (a large ingest included)
ROWS_HEADER = "X-Walgate-Rows"  # = http_api.ROWS_HEADER (not imported: it would load aiohttp)


# ------------------------------------------------------------------ HTTP client


class ApiError(Exception):
    """The server answered with an error, or could not be reached."""


class ApiClient:
    """A minimal synchronous client of the walgate HTTP API (urllib, no dependencies); with ``auth`` (user,
    password), every request carries HTTP Basic credentials."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode() if auth else ""
        self._headers = {"Authorization": f"Basic {token}"} if auth else {}

    def sql(self, sql: str, db: str | None = None) -> dict[str, Any]:
        """Run one statement; returns the TDengine-REST JSON body."""
        path = f"/rest/sql/{quote(db, safe='')}" if db else "/rest/sql"
        _, body = self._post(path, sql.encode("utf-8"), "text/plain; charset=utf-8")
        result: dict[str, Any] = orjson.loads(body)
        return result

    def write_lines(self, db: str, data: bytes, precision: str = "ns") -> int:
        """Post InfluxDB line protocol; returns the number of rows written."""
        query = urlencode({"db": db, "precision": precision})
        headers, _ = self._post(f"/influxdb/v1/write?{query}", data, "text/plain; charset=utf-8")
        return int(headers[ROWS_HEADER])

    def write_csv(self, db: str, data: bytes, *, table: str | None = None, stable: str | None = None) -> int:
        """Post CSV (with a header row) into ``table`` or subtables of ``stable``; returns rows written."""
        params = {"db": db} | ({"table": table} if table else {}) | ({"stable": stable} if stable else {})
        _, body = self._post(f"/csv/v1/write?{urlencode(params)}", data, "text/csv; charset=utf-8")
        return int(orjson.loads(body)["rows"])

    def get_json(self, path: str) -> Any:
        """GET ``path`` (e.g. the console's ``/ui/api/cluster``); its JSON body."""
        _, body = self._send(urllib.request.Request(self.url + path, method="GET", headers=self._headers))
        return orjson.loads(body)

    def _post(self, path: str, data: bytes, content_type: str) -> tuple[Message, bytes]:
        """POST ``data``; returns the answer's headers and body, raises :class:`ApiError` on any failure."""
        return self._send(urllib.request.Request(
            self.url + path, data=data, method="POST", headers={"Content-Type": content_type, **self._headers}
        ))

    def _send(self, request: urllib.request.Request) -> tuple[Message, bytes]:
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
                return response.headers, response.read()
        except urllib.error.HTTPError as e:
            raise ApiError(_error_message(e.code, e.read())) from None
        except urllib.error.URLError as e:
            raise ApiError(f"cannot reach walgate at {self.url}: {e.reason}") from None
        except TimeoutError:
            raise ApiError(f"no answer from walgate at {self.url} within {HTTP_TIMEOUT:.0f} s") from None
        except OSError as e:  # e.g. the connection reset while the body was still being sent
            raise ApiError(f"connection to walgate at {self.url} failed: {e}") from None


def _error_message(status: int, body: bytes) -> str:
    try:
        error = orjson.loads(body)
        return f"{error['desc']} (code {error['code']:#06x}, HTTP {status})"
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return f"HTTP {status}: {body.decode('utf-8', 'replace').strip()}"


# --------------------------------------------------------------------- output


def split_statements(text: str) -> list[str]:
    """Split SQL on ``;`` outside '…', "…" and `…` quotes (a backslash escapes the next
    character inside quotes); blank statements are dropped."""
    statements: list[str] = []
    current: list[str] = []
    quote_char: str | None = None
    chars = iter(text)
    for ch in chars:
        if quote_char is not None:
            if ch == "\\":
                current.append(ch)
                ch = next(chars, "")
            elif ch == quote_char:
                quote_char = None
        elif ch in "'\"`":
            quote_char = ch
        elif ch == ";":
            statements.append("".join(current))
            current = []
            continue
        current.append(ch)
    statements.append("".join(current))
    return [s.strip() for s in statements if s.strip()]


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 200)  # piped output: wrap cells late rather than at 80 columns
    return console


def render_result(console: Console, body: dict[str, Any]) -> None:
    """Print one REST result the way the TDengine shell does."""
    if body.get("database"):
        console.print(f"Database changed to {escape(body['database'])}.")
        return
    meta = body["column_meta"]
    if meta == [["affected_rows", "INT", 4]]:
        console.print(f"Query OK, {body['data'][0][0]} row(s) affected")
        return
    table = Table(*(name for name, _, _ in meta))
    for row in body["data"]:
        table.add_row(*(Text("NULL" if v is None else str(v)) for v in row))
    console.print(table)
    console.print(f"Query OK, {body['rows']} row(s) in set")


def _fail(message: str, code: int = 1) -> int:
    print(f"walgate: {message}", file=sys.stderr)
    return code


# ------------------------------------------------------------------ commands


def protected_mode_refusal(config: Config) -> str | None:
    """Why ``config`` may not be served (Redis's protected mode): a Kafka listener, or the HTTP API, that does not
    authenticate its clients on an address other than loopback, unless ``allow_insecure``; None when it may."""
    insecure = config.insecure_listeners()
    if not insecure or config.allow_insecure:
        return None
    return (f"refusing to start: listener(s) {', '.join(insecure)} would let anyone on the network in "
            "without authentication. Use SASL_PLAINTEXT/SASL_SSL (HTTP then asks for a user's password), SSL with "
            "ssl.client.auth=required, or a loopback address; or pass --allow-insecure (WALGATE_ALLOW_INSECURE=true) to serve them anyway "
            "(docs/security.md)")


def _raise_open_files_limit() -> None:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (or the kernel's ``nr_open`` when the hard limit is
    unlimited), as Kafka's documentation tells operators to, and log the limit in force.

    Failure to raise it is logged, not fatal. ``serve`` calls it before importing the server, so the storage
    layer sizes its cache of open files after it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            target = soft
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open files limit from %d to %d: %s", soft, target, exc)
        else:
            soft = target
    log.info("open files limit: %s (hard limit %s)", soft, "unlimited" if hard == resource.RLIM_INFINITY else hard)


def serve_config(args: argparse.Namespace, env: dict[str, str] | None = None,
                 ignored: list[str] | None = None) -> Config:
    """The :class:`Config` ``walgate serve`` runs with, from its parsed ``args`` and ``env`` (default
    ``os.environ``: the ``WALGATE_*`` variables); raises :class:`ConfigError`."""
    # None = flag not given
    overrides = {field.name: getattr(args, field.name) for field in fields(Config) if hasattr(args, field.name)}
    return load_config(args.config, env=env, overrides=overrides,
                       settings=[parse_override(text) for text in args.override], ignored=ignored)


def _cmd_serve(args: argparse.Namespace) -> int:
    ignored: list[str] = []
    try:
        config = serve_config(args, ignored=ignored)
    except ConfigError as e:
        return _fail(str(e), 2)
    refusal = protected_mode_refusal(config)
    if refusal:
        return _fail(refusal, 2)
    setup_logging(config.log_level, config.log_format)
    for note in ignored:
        log.info("%s", note)
    _raise_open_files_limit()
    import uvloop

    from walgate.gateway import malloc
    from walgate.gateway.cluster_member import ClusterStartError
    from walgate.gateway.server import run_server

    malloc.tune()

    try:
        uvloop.run(run_server(config))
    except ConfigError as e:  # a TLS certificate or key that cannot be loaded
        log.error("walgate failed: %s", e)
        return 2
    except (OSError, StorageError, ClusterStartError) as e:
        log.error("walgate failed: %s", e)
        return 1
    return 0


def credentials(user: str | None) -> tuple[str, str] | None:
    """(user, password) for HTTP Basic auth: ``--user`` or ``WALGATE_USER``, the password from ``WALGATE_PASSWORD``
    or asked for on the terminal (never a flag: it would show in ``ps``); None without a user."""
    user = user or os.environ.get("WALGATE_USER")
    if not user:
        return None
    password = os.environ.get("WALGATE_PASSWORD")
    return user, password if password is not None else getpass.getpass(f"password of walgate user {user}: ")


def _cmd_sql(args: argparse.Namespace) -> int:
    statements = split_statements(args.sql)
    if not statements:
        return _fail("no SQL statement given", 2)
    client, console, db = ApiClient(args.url, credentials(args.user)), _console(), args.db
    for statement in statements:
        try:
            body = client.sql(statement, db)
        except ApiError as e:
            return _fail(str(e))
        db = body.get("database") or db
        if args.json:
            sys.stdout.buffer.write(orjson.dumps(body) + b"\n")
            sys.stdout.flush()
        else:
            render_result(console, body)
    return 0


def _cmd_ingest(args: argparse.Namespace) -> int:
    if args.format == "line" and (args.table or args.stable):
        return _fail("--table / --stable apply to --format csv only", 2)
    if args.format == "csv" and args.precision is not None:
        return _fail("--precision applies to --format line only", 2)
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as e:
        return _fail(f"cannot read {args.file}: {e.strerror}", 2)
    client = ApiClient(args.url, credentials(args.user))
    try:
        if args.format == "line":
            rows = client.write_lines(args.db, data, args.precision or "ns")
        else:
            rows = client.write_csv(args.db, data, table=args.table, stable=args.stable)
    except ApiError as e:
        return _fail(str(e))
    print(f"{rows} row(s) written to {args.db}")
    return 0


def _cmd_repair(args: argparse.Namespace) -> int:
    """Offline, under the data dir's lock (see walgate/storage/repair.py for why not online)."""
    from walgate.storage import datadir, repair

    root: Path = args.data_dir
    if not (root / datadir.CATALOG).exists():
        return _fail(f"{root} is not a walgate data dir (no {datadir.CATALOG})", 2)
    if (args.only is None) != (args.name is None):
        return _fail("--only and --as go together: --only db/<id> --as NAME", 2)
    try:
        fd = datadir.lock(root)
    except StorageError as e:
        return _fail(str(e))
    try:
        found = repair.repair(root, only=args.only, name=args.name, precision=args.precision, dry_run=args.list)
    except StorageError as e:
        return _fail(str(e))
    finally:
        os.close(fd)
    if args.json:
        for f in found:
            sys.stdout.buffer.write(orjson.dumps(f) + b"\n")
        sys.stdout.flush()
        return 0
    table = Table("SOURCE", "WHAT", "STATE", "DETAIL", box=None)
    for f in found:
        table.add_row(escape(f.source), escape(f.what), f.state, escape(f.detail))
    console = _console()
    console.print(table if found else "nothing to repair")
    restored = sum(f.state == "restore" for f in found)
    if args.list:
        console.print(f"{restored} to restore; nothing written (--list)")
    elif restored:
        console.print(f"{restored} restored: catalog.log rewritten; start the server")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    setup_logging("WARNING")
    import uvloop

    from walgate.gateway import malloc
    from walgate.gateway.demo import run_demo

    malloc.tune()
    with contextlib.ExitStack() as stack:
        data_dir = args.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="walgate-demo-")))
        try:
            config = Config(data_dir=data_dir, host=args.host, kafka_port=args.kafka_port, http_port=args.http_port,
                            allow_insecure=args.allow_insecure)
        except ConfigError as e:
            return _fail(str(e), 2)
        refusal = protected_mode_refusal(config)
        if refusal:
            return _fail(refusal, 2)
        try:
            return uvloop.run(run_demo(config, _console(), rate=args.rate, duration=args.duration, consume=args.consume))
        except (OSError, StorageError) as e:
            return _fail(f"demo failed: {e}")


# ---------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    """The ``walgate`` command line's parser (every subcommand)."""
    parser = argparse.ArgumentParser(prog="walgate", description="Kafka-wire gateway over TDengine-style WAL storage.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run a walgate node")
    serve.add_argument("--data-dir", type=Path, metavar="DIR", help="storage directory (required unless set by config or env)")
    serve.add_argument("--config", type=Path, metavar="FILE",
                       help="config file: Kafka's server.properties names (a .properties file) or TOML (a .toml "
                            "file); overridden by WALGATE_* env, then --override, then flags")
    serve.add_argument("--override", action="append", default=[], metavar="NAME=VALUE",
                       help="set one setting by its Kafka name (e.g. listeners=SSL://:9093) or walgate's dotted "
                            "name (http.port=6041), as kafka-server-start.sh --override; repeatable")
    serve.add_argument("--allow-insecure", action="store_true", default=None,
                       help="serve Kafka listeners without authentication on non-loopback addresses "
                            "(protected mode off)")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--kafka-port", type=int, metavar="N", help="Kafka listener port (default 9092; 0 = any free port)")
    serve.add_argument("--http-port", type=int, metavar="N", help="HTTP API port (default 6041; 0 = any free port)")
    serve.add_argument("--advertised-host", help="host named to Kafka clients (default --host)")
    serve.add_argument("--advertised-port", type=int, metavar="N", help="port named to Kafka clients (default --kafka-port)")
    serve.add_argument("--node-id", type=int, metavar="N", help="this node's id (default 0)")
    serve.add_argument("--cluster", dest="cluster_etcd_endpoints", type=cluster_spec, metavar="etcd=URL[,URL...]",
                       help="run as a node of a cluster whose control plane is this etcd (docs/cluster.md); "
                            "default: a single node, no etcd")
    add_etcd_flags(serve.add_argument_group("reaching etcd (docs/cluster.md; server.properties: cluster.etcd.*)"),
                   "or cluster.etcd.password in a properties file, ")
    serve.add_argument("--max-request-bytes", type=int, metavar="N", help="largest accepted request (default 16 MiB)")
    serve.add_argument("--batch-cache-bytes", type=int, metavar="N", help="rendered Kafka batches kept for re-reads (default 256 MiB)")
    serve.add_argument("--connections-max-idle-ms", type=int, metavar="MS",
                       help="close Kafka connections idle this long (default 600000, as Kafka)")
    serve.add_argument("--queued-max-request-bytes", type=int, metavar="N",
                       help="Kafka request bytes read or being handled, all connections together; a connection "
                            "waits for room before reading more (default 100 MiB, at least --max-request-bytes)")
    serve.add_argument("--request-read-timeout-ms", type=int, metavar="MS",
                       help="close a Kafka connection whose request is not received in full this long after it "
                            "began (default 30000)")
    serve.add_argument("--listen-backlog", type=int, metavar="N",
                       help="Kafka listen backlog (default 4096; the kernel caps it at net.core.somaxconn)")
    serve.add_argument("--max-partitions", type=int, metavar="N",
                       help="partitions of all topics and databases together (default 10000)")
    serve.add_argument("--max-tables-per-database", type=int, metavar="N",
                       help="tables (subtables and normal tables) one database may hold; a write creating more is "
                            "refused whole (default 0: no limit)")
    serve.add_argument("--sql-workers", type=int, metavar="N",
                       help="worker processes that run SQL SELECTs, off the storage thread (default 2)")
    serve.add_argument("--sql-timeout-ms", type=int, metavar="MS",
                       help="a SELECT running longer is stopped with an error (default 0: no limit)")
    serve.add_argument("--sql-max-bytes", type=int, metavar="N",
                       help="a SELECT scanning more rows than this (Arrow bytes) is refused (default 1 GiB)")
    serve.add_argument("--sql-answers-max-bytes", type=int, metavar="N",
                       help="answers held in TMPDIR while they are sent, all SELECTs together; past it SELECTs are "
                            "refused (503, retriable) until some are sent (default 4 x --sql-max-bytes)")
    for name, default in (
        ("group-initial-rebalance-delay-ms", "2000: TDengine's rebalance tick"),
        ("group-min-session-timeout-ms", "6000"),
        ("group-max-session-timeout-ms", "1800000"),
        ("group-consumer-session-timeout-ms", "45000"),
        ("group-consumer-heartbeat-interval-ms", "5000"),
    ):
        serve.add_argument(f"--{name}", type=int, metavar="MS", help=f"consumer groups (default {default})")
    for name, default in (
        ("transaction-max-timeout-ms", "900000: the longest transaction.timeout.ms a producer may ask for"),
        ("transactional-id-expiration-ms", "604800000: an idle transactional id is forgotten after it"),
        ("transaction-abort-timed-out-transaction-cleanup-interval-ms", "10000: how often timed-out transactions "
                                                                         "are aborted"),
    ):
        serve.add_argument(f"--{name}", type=int, metavar="MS", help=f"transactions (default {default})")
    serve.add_argument("--transaction-version", type=int, choices=(0, 1, 2),
                       help="the finalized transaction.version feature: 2 (default, KIP-890 part 2) as a new Kafka 4 "
                            "cluster; 0 or 1 keep clients on transaction version 1")
    serve.add_argument("--auto-create-topic-partitions", type=int, metavar="N",
                       help="Metadata creates unknown topics as Kafka-native topics of N partitions (default 0: never)")
    serve.add_argument("--authorizer-class-name", metavar="CLASS",
                       help="Kafka's authorizer.class.name: ACLs are enforced when set (StandardAuthorizer or AclAuthorizer)")
    serve.add_argument("--super-users", metavar="P;P", help="Kafka's super.users, e.g. 'User:admin;User:root'")
    serve.add_argument("--allow-everyone-if-no-acl-found", choices=("true", "false"),
                       help="Kafka's allow.everyone.if.no.acl.found (default false)")
    serve.add_argument("--http-allowed-origins", metavar="ORIGINS",
                       help="comma-separated scheme://host[:port] whose browser pages may call the HTTP API "
                            "(default: none; other cross-origin browser requests get 403)")
    oauth = serve.add_argument_group("OAUTHBEARER token validation (Kafka's sasl.oauthbearer.* settings)")
    oauth.add_argument("--sasl-oauthbearer-jwks-endpoint-url", metavar="URL", help="file:///path of the JWKS")
    oauth.add_argument("--sasl-oauthbearer-expected-issuer", metavar="ISS", help="the tokens' iss (default: any)")
    oauth.add_argument("--sasl-oauthbearer-expected-audience", metavar="AUD", help="comma-separated accepted aud values")
    oauth.add_argument("--sasl-oauthbearer-scope-claim-name", metavar="NAME", help="default scope")
    oauth.add_argument("--sasl-oauthbearer-sub-claim-name", metavar="NAME", help="default sub")
    oauth.add_argument("--sasl-oauthbearer-clock-skew-seconds", type=int, metavar="S", help="default 30")
    serve.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper, help="default INFO")
    serve.add_argument("--log-format", choices=LOG_FORMATS, help="text (default), or json: one JSON object per line")
    serve.set_defaults(run=_cmd_serve)

    sql = commands.add_parser("sql", help="run SQL against a running node")
    sql.add_argument("--url", default=DEFAULT_URL, help=f"HTTP API base URL (default {DEFAULT_URL})")
    sql.add_argument("--db", help="current database for unqualified names")
    sql.add_argument("--json", action="store_true", help="print each result as one JSON line")
    sql.add_argument("--user", "-u", help="walgate user for HTTP Basic auth (default WALGATE_USER; the password "
                     "from WALGATE_PASSWORD, else asked for)")
    sql.add_argument("sql", help="one or more ';'-separated statements")
    sql.set_defaults(run=_cmd_sql)

    ingest = commands.add_parser("ingest", help="write a line-protocol or CSV file")
    ingest.add_argument("--format", required=True, choices=("line", "csv"))
    ingest.add_argument("--db", required=True)
    ingest.add_argument("--precision", choices=("ns", "us", "ms", "s"), help="line protocol timestamps (default ns)")
    target = ingest.add_mutually_exclusive_group()
    target.add_argument("--table", help="CSV: the table to write")
    target.add_argument("--stable", help="CSV: the supertable (a tbname column names each row's subtable)")
    ingest.add_argument("--url", default=DEFAULT_URL, help=f"HTTP API base URL (default {DEFAULT_URL})")
    ingest.add_argument("--user", "-u", help="walgate user for HTTP Basic auth (as walgate sql --user)")
    ingest.add_argument("file", help="input file, or - for stdin")
    ingest.set_defaults(run=_cmd_ingest)

    repair = commands.add_parser("repair", help="bring back what a damaged catalog took out of service (server "
                                 "stopped; docs/data-dir.md)")
    repair.add_argument("--data-dir", type=Path, metavar="DIR", required=True)
    repair.add_argument("--list", action="store_true", help="show what would be done, write nothing")
    repair.add_argument("--only", metavar="db/ID", help="attach this unnamed database directory (with --as)")
    repair.add_argument("--as", dest="name", metavar="NAME", help="its name: a database's, or a Kafka-native topic's")
    repair.add_argument("--precision", choices=("ms", "us", "ns"), help="an attached database's precision when its "
                        "data does not show it (default ms)")
    repair.add_argument("--json", action="store_true", help="one JSON object per finding")
    repair.set_defaults(run=_cmd_repair)

    demo = commands.add_parser("demo", help="one-command quick start: meters data streaming into a node, Ctrl-C stops")
    demo.add_argument("--data-dir", type=Path, metavar="DIR", help="keep the data here (default: a temporary directory, removed)")
    demo.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    demo.add_argument("--kafka-port", type=int, default=9092, metavar="N", help="Kafka listener port (default 9092; 0 = any)")
    demo.add_argument("--http-port", type=int, default=0, metavar="N", help="HTTP API port (default: any free port)")
    demo.add_argument("--allow-insecure", action="store_true",
                      help="serve on a non-loopback --host although nothing authenticates (protected mode off)")
    demo.add_argument("--rate", type=int, default=200, metavar="ROWS", help="rows inserted per second (default 200)")
    demo.add_argument("--duration", type=float, default=0, metavar="S", help="stop after S seconds (default: at Ctrl-C)")
    demo.add_argument("--consume", action="store_true", help="also run a consumer group and show what it receives")
    demo.set_defaults(run=_cmd_demo)

    add_admin_commands(commands)  # topic, group, consume, produce: walgate/admin
    add_cluster_command(commands)  # cluster up: walgate/gateway/cluster_up.py
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``walgate`` console script; returns the exit code."""
    args = parser().parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
