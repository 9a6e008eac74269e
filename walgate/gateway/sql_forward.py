"""SQL INSERTs, line-protocol and CSV bodies forwarded to the nodes that own their tables (cluster mode; docs/cluster.md
"SQL writes across nodes").

The node asked splits an INSERT by owning node (:func:`walgate.storage.insert_routing.split_insert`), writes its own
part and sends every other node its part at once: the statement's text, unchanged, to that node's ``/rest/sql``
(``/rest/sql/{db}`` with the request's database) with the header :data:`FORWARDED` (``<sender node id>;<positions
of the targets it writes>``), the caller's principal and address, signed with the cluster's node token
(:class:`Caller`, :mod:`walgate.security.node_token`), with the last record of the cluster's catalog the node asked
applied, so that the owner, once it verified the signature and applied that record too (a database, supertable or
user the statement needs, made through the node asked just before), checks the cluster's ACLs for that principal and
address itself. Between nodes whose HTTP API speaks HTTPS the owner's
certificate is verified with :attr:`Caller.ssl` (the node's truststore). A line-protocol or CSV body's part is a body of its own
lines (:func:`~walgate.storage.insert_routing.split_lines`, :func:`~walgate.storage.insert_routing.split_csv`) sent
to the owner's ``/influxdb/v1/write`` or ``/csv/v1/write`` with the same query parameters, and the same headers (no
positions). An owner writes a forwarded part as it writes any
write (all of it or none of it: nothing of a refused part is written) and never forwards one again. A CREATE TABLE,
CREATE STABLE, DROP TABLE or CREATE TOPIC of one table is sent the same way, its tables' positions in the header
(:func:`~walgate.storage.insert_routing.split_tables`), each part with no rows.

Each part's :class:`Outcome` is one of ``written`` (the owner answered 200, or 204, with its rows), ``not_written``
(the owner answered an error, which for 4xx and 503 means it wrote none of the part; the owner is not registered
now; or no connection to it was made) or ``unknown`` (the request was sent and no answer came within
:data:`FORWARD_TIMEOUT_S`, the connection broke before the answer, or the owner answered 500, or 503 with
``"outcome": "unknown"``: a CREATE STABLE the cluster's catalog did not take in time and may still apply: the part
may be written or not). When every part was written the client gets the answer of a write on one node with the sum of the
rows; else :func:`answer`: the first failed part's status and code with ``written``, ``not_written`` and ``unknown``
lists naming each part's node, vgroups, tables and rows (and a body's line numbers).
"""

from __future__ import annotations

import logging
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from walgate.security.node_token import (
    CATALOG_SEQ,
    CLIENT_HOST,
    HEAD_SIGNATURE,
    PRINCIPAL,
    SIGNATURE,
    TIME,
    VERSION,
    VERSION_HEADER,
    Signed,
    head_signature,
    signature,
)
from walgate.storage.errors import InvalidValue, LimitExceeded, StorageUnavailable
from walgate.storage.insert_routing import Part, format_positions
from walgate.storage.select_merge import ARROW_STREAM

__all__ = ["FORWARDED", "FORWARD_TIMEOUT_S", "HERE", "ROWS_HEADER", "SCAN", "TABLES", "TABLES_PATH", "Caller", "Outcome",
           "PartsBudget", "SelectPart", "answer", "merge_rows", "parse_tables", "select_here", "select_part", "select_timeout",
           "send", "tables_exist"]

log = logging.getLogger(__name__)

FORWARDED = "X-Walgate-Forwarded"
"""The header of a forwarded part: ``<sender node id>;<positions>`` (:mod:`walgate.storage.insert_routing`)."""
FORWARD_TIMEOUT_S = 30.0
"""How long the node asked waits for an owner's answer to a forwarded part (then its outcome is ``unknown``)."""
HERE = "here"
"""The :data:`FORWARDED` header's positions of a SELECT's part (then ``;<now>``: :func:`select_part`) or SHOW TABLES':
the rows of the vgroups placed on the node asked."""
SCAN = "scan"
"""The :data:`FORWARDED` header's positions of a SELECT merged from scanned rows (then ``;<now>``:
:func:`select_part`): the rows of the node's vgroups that pass WHERE, answered as an Arrow IPC stream
(:mod:`walgate.storage.select_merge`)."""
_VGROUP = "(?:0|[1-9][0-9]{0,5})"
_NOW = "(0|[1-9][0-9]{0,18})"
_VGROUPS = f"((?:{_VGROUP}(?:,{_VGROUP})*)?)"
_SELECT_PART = re.compile(  # a SELECT's part, its ``now`` and its vgroups (:func:`select_part`)
    f"({HERE}|{SCAN})(?:;{_NOW}?;{_VGROUPS}|;{_NOW})?")
TABLES_PATH = "/cluster/v1/tables"
"""Where a node asks another which tables exist there (:func:`tables_exist`), before a statement spanning nodes does
anything: a DROP TABLE list is checked whole, a new supertable's name against the tables of its name's node."""
TABLES = "tables"
"""The :data:`FORWARDED` header's positions of a :data:`TABLES_PATH` request."""
ROWS_HEADER = "X-Walgate-Rows"
"""The header of the rows a line-protocol write wrote (its answer, 204, has no body)."""
_LISTED = 10  # tables named per part in the answer's ``desc`` (the lists name them all)


class PartsBudget:
    """The bytes of the nodes' parts of one merged SELECT the node asked holds, shared by every part as it is read
    (``limit``: ``sql.max.bytes``): the part that would pass it is refused with :class:`LimitExceeded` before it is
    held, so the parts held never exceed ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def take(self, size: int) -> None:
        """Count ``size`` more bytes held; LimitExceeded past the limit."""
        self.used += size
        if self.used > self.limit:
            raise LimitExceeded(f"the nodes' parts of the query are larger than {self.limit} bytes (sql.max.bytes): "
                                "narrow it with a time range or a tag condition in WHERE")


def select_timeout(statement_s: float | None) -> float | None:
    """How long the node asked waits for another node's part of a SELECT, its statement timeout being
    ``statement_s`` (``sql.timeout.ms``; None: no limit): that, and :data:`FORWARD_TIMEOUT_S` more for the part to
    travel (the statement itself is stopped at ``sql.timeout.ms``, every part with it); no limit when statements
    have none, as on one node."""
    return None if statement_s is None else statement_s + FORWARD_TIMEOUT_S


@dataclass(frozen=True)
class Caller:
    """Who a forwarded request is for (the ``principal`` the node asked authenticated, at ``host``: its client's
    address), the cluster's node ``token`` it is signed with, the context verifying the other node's HTTPS
    certificate (``ssl``; None: the system's CAs) and the last record of the cluster's catalog the node asked had
    applied when the request came (``catalog_seq``: the owner applies it before it runs the part)."""

    principal: str
    host: str
    token: str = field(repr=False)  # a secret: never in a log line
    ssl: ssl.SSLContext | None = None
    catalog_seq: int = 0


@dataclass(frozen=True)
class Outcome:
    """What became of one part: ``state`` ``written`` (``rows`` written), ``not_written`` or ``unknown``, with the
    HTTP ``status``, TDengine-style ``code`` and ``desc`` of the failure (200, 0, "" when written)."""

    part: Part
    state: str
    rows: int = 0
    status: int = 200
    code: int = 0
    desc: str = ""

    def entry(self) -> dict[str, Any]:
        """The part as the answer lists it."""
        entry: dict[str, Any] = {"node": self.part.node, "vgroups": [list(v) for v in self.part.vgroups],
                                 "tables": list(self.part.tables), "rows": self.rows or self.part.rows}
        if self.part.lines:
            entry["lines"] = _ranges(self.part.lines)
        if self.state != "written":
            entry |= {"code": self.code, "desc": self.desc}
        return entry


def _ranges(numbers: tuple[int, ...]) -> list[list[int]]:
    """Ascending ``numbers`` as ``[first, last]`` ranges of consecutive ones."""
    ranges: list[list[int]] = []
    for n in numbers:
        if ranges and ranges[-1][1] == n - 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    return ranges


async def send(part: Part, url: str | None, path: str, body: bytes, sender: int, caller: Caller,
               params: dict[str, str] | None = None, timeout: float = FORWARD_TIMEOUT_S) -> Outcome:
    """``part`` (``body``: the INSERT's whole text, or the part's own line-protocol body) sent by node ``sender`` to
    ``path`` (with query ``params``) of its owner's HTTP API at ``url`` (None: the owner is not registered now, or
    registered without one) for ``caller``."""
    if url is None:
        return Outcome(part, "not_written", status=503, code=StorageUnavailable.code,
                       desc=f"node {part.node} is not registered in the cluster now (down, or not back yet)")
    try:
        status, rows, answered = await _post(url, part.node, path, params, body,
                                             f"{sender};{format_positions(part.positions)}", caller, timeout)
        if status == 204 and rows is not None and rows.isdigit():  # line protocol: no body
            return Outcome(part, "written", rows=int(rows))
    except aiohttp.ClientConnectorError as e:  # no connection was made: nothing was sent
        return Outcome(part, "not_written", status=503, code=StorageUnavailable.code,
                       desc=f"node {part.node} ({url}) cannot be reached: {e.os_error.strerror or e}")
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:  # sent; the answer was lost or garbled
        log.warning("a write's part forwarded to node %d (%s) has no answer: %r", part.node, url, e)
        return Outcome(part, "unknown", status=503, code=StorageUnavailable.code,
                       desc=f"node {part.node} ({url}) gave no answer ({type(e).__name__}: {e}): it may have been"
                            " written or not")
    if not isinstance(answered, dict):
        return _unknown(part, url, status, f"an answer that is not walgate's: {str(answered)[:200]}")
    if status == 200:
        try:
            rows = answered["data"][0][0] if "data" in answered else answered["rows"]  # SQL, or CSV
            return Outcome(part, "written", rows=int(rows))
        except (KeyError, IndexError, TypeError, ValueError):
            return _unknown(part, url, status, f"an answer that is not walgate's: {str(answered)[:200]}")
    desc = f"node {part.node}: {answered.get('desc', '')}"
    code = answered.get("code", 0) if isinstance(answered.get("code"), int) else 0
    if status < 500 or (status == 503 and answered.get("outcome") != "unknown"):  # none of it written (http_api)
        return Outcome(part, "not_written", status=status, code=code, desc=desc)
    return Outcome(part, "unknown", status=status, code=code, desc=f"{desc} (it may have been written or not)")


async def _post(url: str, node: int, path: str, params: dict[str, str] | None, body: bytes, forwarded: str,
                caller: Caller, timeout: float | None, budget: PartsBudget | None = None) -> tuple[int, str | None, Any]:
    """POST ``body`` to ``path`` of node ``node``'s HTTP API at ``url`` with the :data:`FORWARDED` header
    ``forwarded``, signed for ``caller`` and that node: the answer's status, its :data:`ROWS_HEADER` and its JSON
    (None for a 204; the bytes of an Arrow IPC stream, each chunk counted in ``budget`` as it arrives). Raises aiohttp's errors, TimeoutError past ``timeout``
    seconds (None: no limit, but :data:`FORWARD_TIMEOUT_S` to connect), ValueError for an answer that is not JSON,
    LimitExceeded past the budget. Cancelled, it closes the connection (the owner sees its client gone)."""
    signed = Signed(node, "POST", path, params or {}, forwarded, caller.principal, caller.host,
                    time.time_ns() // 1_000_000, body, caller.catalog_seq)
    headers = {FORWARDED: forwarded, "Content-Type": "text/plain", PRINCIPAL: caller.principal,
               CLIENT_HOST: caller.host, TIME: str(signed.time_ms), SIGNATURE: signature(caller.token, signed),
               HEAD_SIGNATURE: head_signature(caller.token, signed), CATALOG_SEQ: str(caller.catalog_seq),
               VERSION_HEADER: VERSION}
    connector = aiohttp.TCPConnector(ssl=caller.ssl if caller.ssl is not None else True)
    limits = aiohttp.ClientTimeout(total=timeout, sock_connect=FORWARD_TIMEOUT_S)
    async with (aiohttp.ClientSession(timeout=limits, connector=connector) as session,
                session.post(url + path, params=params, data=body, headers=headers) as response):
        if response.status == 204:
            return 204, response.headers.get(ROWS_HEADER), None
        if response.content_type == ARROW_STREAM:
            chunks = []
            async for chunk in response.content.iter_any():
                if budget is not None:
                    budget.take(len(chunk))
                chunks.append(chunk)
            return response.status, None, b"".join(chunks)
        return response.status, response.headers.get(ROWS_HEADER), await response.json(content_type=None)


@dataclass(frozen=True)
class SelectPart:
    """One node's part of a SELECT or SHOW TABLES merged over nodes, as the :data:`FORWARDED` header names it
    (:func:`select_part`): ``scan``: the scanned rows that pass WHERE (:data:`SCAN`, Arrow IPC), else the answer
    (:data:`HERE`); ``now_ns``: the instant its ``now`` is read at (ns since the epoch; None: the node's clock, and
    for a SHOW TABLES); ``vgroups``: exactly the vgroups it reads, which the node asked routed to it (None: those it
    serves, as the node asked of the version before sent it)."""

    scan: bool = False
    now_ns: int | None = None
    vgroups: tuple[int, ...] | None = None

    def positions(self) -> str:
        """The header's positions naming this part: ``here`` or ``scan``, then ``;<now ns>`` (empty when None), then
        ``;<vgroup>,<vgroup>...``."""
        now = "" if self.now_ns is None else f";{self.now_ns}"
        if self.vgroups is not None:
            now = f"{now or ';'};{','.join(map(str, self.vgroups))}"
        return (SCAN if self.scan else HERE) + now


async def select_here(node: int, url: str | None, path: str, sql: bytes, sender: int, caller: Caller,
                      timeout: float | None = FORWARD_TIMEOUT_S, part: SelectPart = SelectPart(),
                      budget: PartsBudget | None = None) -> tuple[int, dict[str, Any] | bytes]:
    """Node ``node``'s ``part`` of the SELECT (or ``SHOW TABLES``) ``sql`` (:class:`SelectPart`: its answer over the
    vgroups routed to it, or their scanned rows, its ``now``), asked at ``path`` of its HTTP API at ``url`` (None: not
    registered now) by node ``sender`` for ``caller``: the HTTP status and the JSON answer, TDengine-REST's (a 200 of
    a :data:`SCAN`: the bytes of an Arrow IPC stream, read within ``budget``: past it, a 400 LimitExceeded); an
    owner that cannot be reached, does not answer within ``timeout`` seconds (None: no limit) or answers what is not
    walgate's is a 503 naming it."""
    def failed(why: str) -> tuple[int, dict[str, Any] | bytes]:
        return 503, {"code": StorageUnavailable.code, "desc": f"node {node} {why}"}

    if url is None:
        return failed("is not registered in the cluster now (down, or not back yet)")
    try:
        status, _, answered = await _post(url, node, path, None, sql, f"{sender};{part.positions()}", caller, timeout,
                                          budget)
    except LimitExceeded as e:
        return 400, {"code": e.code, "desc": f"node {node}: {e.message}"}
    except aiohttp.ClientConnectorError as e:
        return failed(f"({url}) cannot be reached: {e.os_error.strerror or e}")
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:
        return failed(f"({url}) gave no answer ({type(e).__name__}: {e})")
    if status == 200 and part.scan and isinstance(answered, bytes):
        return status, answered
    if not _walgate_answer(status, answered, part.scan):
        return failed(f"({url}) answered HTTP {status} with what is not walgate's: {str(answered)[:200]}")
    return status, answered


def select_part(positions: str) -> SelectPart | None:
    """The part that the :data:`FORWARDED` header's ``positions`` name (:meth:`SelectPart.positions`, as
    :func:`select_here` sends them: ``here`` or ``scan``; the instant of ``now`` in ns since the epoch, below 2^63, at
    which every node reads the query's ``now``; the vgroups routed to the node, each read by that one node only), or
    None when they are not of that form. Parts a node of a version before sends: a bare ``here`` or ``scan``, its
    ``now`` this node's clock (rv7 R7-4), and without vgroups, read over every vgroup this node serves."""
    found = _SELECT_PART.fullmatch(positions)
    if found is None:
        return None
    now = found[2] if found[2] is not None else found[4]
    vgroups = None if found[3] is None else tuple(int(v) for v in found[3].split(",") if v)
    if (now is not None and int(now) >= 2**63) or (vgroups is not None and len(set(vgroups)) != len(vgroups)):
        return None
    return SelectPart(found[1] == SCAN, None if now is None else int(now), vgroups)


def _walgate_answer(status: int, answered: Any, scan: bool) -> bool:
    """Whether ``answered``, a node's JSON answer of HTTP ``status`` to its part of a SELECT (``scan``: of scanned
    rows, whose 200 is no JSON), is one walgate gives: an object, whose ``code`` (when it has one) is an integer; a
    200's ``data`` rows, each a list, with their ``column_meta``, a list."""
    if not isinstance(answered, dict) or type(answered.get("code", 0)) is not int:
        return False
    if status != 200:
        return True
    data = answered.get("data")
    return (not scan and isinstance(data, list) and all(isinstance(row, list) for row in data)
            and isinstance(answered.get("column_meta"), list))


def parse_tables(body: bytes) -> list[tuple[str, str]]:
    """The ``(database, table)`` pairs a :data:`TABLES_PATH` request ``body`` asks about (``{"tables": [[db, table],
    ...]}``); InvalidValue when it is not that."""
    try:
        asked = orjson.loads(body)
    except orjson.JSONDecodeError:
        asked = None
    tables = asked.get("tables") if isinstance(asked, dict) else None
    if not isinstance(tables, list) or not all(
            isinstance(t, list) and len(t) == 2 and all(isinstance(n, str) for n in t) for t in tables):
        raise InvalidValue(f'{TABLES_PATH} takes {{"tables": [[database, table], ...]}}, not {body[:100]!r}')
    return [(db, name) for db, name in tables]


async def tables_exist(node: int, url: str | None, tables: list[tuple[str, str]], sender: int,
                       caller: Caller) -> list[bool]:
    """Whether each ``(database, table)`` of ``tables`` exists on node ``node``, which their vgroups are placed on,
    asked at :data:`TABLES_PATH` of its HTTP API at ``url`` (None: not registered now) by node ``sender`` for
    ``caller``; StorageUnavailable naming the node when it cannot be asked, gives no answer within
    :data:`FORWARD_TIMEOUT_S` or answers an error (a question: nothing was done)."""
    if url is None:
        raise StorageUnavailable(f"node {node} is not registered in the cluster now (down, or not back yet), so it "
                                 "cannot be asked whether its tables exist: nothing was done; retry")
    try:
        status, _, answered = await _post(url, node, TABLES_PATH, None,
                                          orjson.dumps({"tables": [list(t) for t in tables]}), f"{sender};{TABLES}",
                                          caller, FORWARD_TIMEOUT_S)
    except aiohttp.ClientConnectorError as e:
        raise StorageUnavailable(f"node {node} ({url}) cannot be reached to ask whether its tables exist: "
                                 f"{e.os_error.strerror or e}; nothing was done") from None
    except (TimeoutError, aiohttp.ClientError, ValueError) as e:
        raise StorageUnavailable(f"node {node} ({url}) gave no answer to whether its tables exist ({type(e).__name__}:"
                                 f" {e}); nothing was done") from None
    exist = answered.get("exist") if isinstance(answered, dict) else None
    if status != 200 or not isinstance(exist, list) or len(exist) != len(tables) or \
            not all(isinstance(e, bool) for e in exist):
        said = answered.get("desc", answered) if isinstance(answered, dict) else answered
        raise StorageUnavailable(f"node {node} ({url}), asked whether its tables exist, answered HTTP {status}: "
                                 f"{str(said)[:200]}; nothing was done")
    return exist


def merge_rows(select_limit: int | None, answers: list[dict[str, Any]], ordered: bool = False) -> dict[str, Any]:
    """The answer of a plain SELECT (no aggregate, ORDER BY or OFFSET) whose every node answered ``answers`` (each
    :func:`select_here`'s: rows, each a list, and their ``column_meta``): their rows one after the other (a plain
    query's rows come in no promised order), cut to the query's LIMIT; ``ordered`` (``SHOW TABLES``, each node's
    rows sorted): all of them sorted by their values' text (first a table's name, which one node alone has).
    StorageUnavailable (retriable) when the nodes' columns differ (a schema change reaching them)."""
    columns = answers[0]["column_meta"]
    other = next((answered["column_meta"] for answered in answers if answered["column_meta"] != columns), None)
    if other is not None:
        raise StorageUnavailable("the nodes' parts of a query have different columns (a schema change is reaching "
                                 f"the nodes): retry the statement ({str(columns)[:200]}; {str(other)[:200]})")
    data = [row for answered in answers for row in answered["data"]]
    if ordered:
        data.sort(key=lambda row: [str(value) for value in row])
    if select_limit is not None:
        data = data[:select_limit]
    return {"code": 0, "column_meta": columns, "data": data, "rows": len(data)}


def _unknown(part: Part, url: str, status: int, what: str) -> Outcome:
    return Outcome(part, "unknown", status=503, code=StorageUnavailable.code,
                   desc=f"node {part.node} ({url}) answered HTTP {status} with {what}: it may have been written or not")


def answer(outcomes: list[Outcome], what: str = "INSERT") -> tuple[int, dict[str, Any]]:
    """The client's answer (HTTP status, JSON body) of a write (the statement ``what``: an INSERT or a body of rows,
    or a CREATE TABLE or DROP TABLE, whose parts have no rows) whose parts ended as ``outcomes``, one or more not
    written: the first failed part's status and code, a ``desc`` saying what was written and what not, and the
    parts by state (module docstring)."""
    failed = [o for o in outcomes if o.state != "written"]
    assert failed, "a write whose every part was written is answered as one written on one node"
    said = []
    for o in outcomes:
        tables = ", ".join(o.part.tables[:_LISTED]) + (", ..." if len(o.part.tables) > _LISTED else "")
        done = {"written": "written" if what == "INSERT" else "done", "unknown": "outcome unknown",
                "not_written": "NOT written" if what == "INSERT" else "NOT done"}[o.state]
        rows = o.rows if o.state == "written" else o.part.rows
        said.append(f"{rows} rows of {tables}" if what == "INSERT" else tables)
        said[-1] += f" on node {o.part.node}: {done}" + (f" ({o.desc})" if o.desc else "")
    first = failed[0]
    body = {"code": first.code, "desc": f"{what} spanning nodes, each node's part all or nothing: " + "; ".join(said),
            "written": [o.entry() for o in outcomes if o.state == "written"],
            "not_written": [o.entry() for o in outcomes if o.state == "not_written"],
            "unknown": [o.entry() for o in outcomes if o.state == "unknown"]}
    return first.status, body

