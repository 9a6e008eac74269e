"""The web console's routes: the page under ``/ui`` and its JSON API under ``/ui/api/``.

- ``GET /ui`` (and ``/ui/``): the page; ``GET /ui/static/{name}``: its script and style sheet. Everything the
  page loads ships in this package (no CDN, no network), and a Content-Security-Policy allows only this origin.
- ``GET /ui/api/topics``: every topic with, per partition, log start, high watermark, WAL bytes and segments
  (:func:`.views.topics`); the page derives records/s from successive high watermarks.
- ``GET /ui/api/groups``: every consumer group with state, members, assignment and lag per partition
  (:func:`.views.groups`), then every share group (:func:`.views.share_groups`).
- ``GET /ui/api/databases``: databases, supertables and subtables (:func:`.views.databases`).
- ``GET /ui/api/tail?topic=T&partition=P&limit=N``: the newest N (1..:data:`MAX_TAIL`, default
  :data:`DEFAULT_TAIL`) records of a partition (:func:`.views.tail`).
- ``GET /ui/api/cluster``: in cluster mode every node and every vgroup with its leader, replicas and ISR, as this
  node last read them (:func:`.cluster_page.cluster_page`); ``{"cluster": null}`` on a single node (the page then
  shows no Cluster tab).

The SQL box posts to ``/rest/sql``. Answers are JSON; a bad or missing query parameter, an unknown topic or
partition is a 400 ``{"code", "desc"}`` like every HTTP API error (the application's error middleware maps the
:class:`~walgate.storage.errors.StorageError` raised). Every engine and coordinator read runs on the storage
thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.gateway.cluster_member import ClusterMember
from walgate.gateway.console import views
from walgate.gateway.console.cluster_page import cluster_page, placed_vgroups
from walgate.gateway.kafka.groups import GroupService
from walgate.gateway.replicas import ReplicaManager
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.storage.errors import InvalidValue

__all__ = ["DEFAULT_TAIL", "MAX_TAIL", "STATIC_DIR", "add_console"]

STATIC_DIR = Path(__file__).parent / "static"
MAX_TAIL = 500
DEFAULT_TAIL = 50
_MAX_TOPIC_NAME = 249  # Kafka's limit

_FILES = {"console.js": "text/javascript", "console.css": "text/css"}
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def add_console(app: web.Application, engine: Engine, storage: StorageThread, groups: GroupService,
                shares: Callable[[], ShareCoordinator | None] | None = None,
                member: Callable[[], ClusterMember | None] | None = None,
                replicas: Callable[[], ReplicaManager | None] | None = None) -> None:
    """Add the console's routes to ``app`` (whose middleware maps engine errors to JSON answers); ``shares()``: the
    share coordinator once the Kafka listeners run (None before, or without share groups); in cluster mode
    ``member()``, the node's membership, and ``replicas()``, its replica manager once replication runs (None
    before, or without ``replication.enable``)."""
    console = _Console(engine, storage, groups, shares, member, replicas)
    app.router.add_get("/ui", console.page)
    app.router.add_get("/ui/", console.page)
    app.router.add_get("/ui/static/{name}", console.static)
    app.router.add_get("/ui/api/topics", console.topics)
    app.router.add_get("/ui/api/groups", console.groups)
    app.router.add_get("/ui/api/databases", console.databases)
    app.router.add_get("/ui/api/tail", console.tail)
    app.router.add_get("/ui/api/cluster", console.cluster)


class _Console:
    def __init__(self, engine: Engine, storage: StorageThread, groups: GroupService,
                 shares: Callable[[], ShareCoordinator | None] | None,
                 member: Callable[[], ClusterMember | None] | None,
                 replicas: Callable[[], ReplicaManager | None] | None) -> None:
        self._engine = engine
        self._storage = storage
        self._groups = groups
        self._shares = shares
        self._member = member
        self._replicas = replicas

    async def page(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers={**_PAGE_HEADERS, "Content-Type": "text/html"})

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in _FILES:
            raise web.HTTPNotFound()
        return web.FileResponse(STATIC_DIR / name, headers={**_PAGE_HEADERS, "Content-Type": _FILES[name]})

    async def topics(self, request: web.Request) -> web.Response:
        return _json({"topics": await self._storage.call(views.topics, self._engine)})

    async def groups(self, request: web.Request) -> web.Response:
        shares = self._shares() if self._shares is not None else None

        engine = self._engine
        listed = await self._storage.call(views.groups, engine, self._groups.groups)
        if shares is not None:  # the share coordinator's part on its lane, then the high watermarks on the storage lane
            ids = {g["group_id"] for g in listed}
            shared = await self._groups.lane.call(lambda: views.share_groups(engine.topics(), shares, ids))
            listed += await self._storage.call(views.high_watermarks, engine, shared)
        return _json({"groups": listed})

    async def databases(self, request: web.Request) -> web.Response:
        return _json({"databases": await self._storage.call(views.databases, self._engine)})

    async def tail(self, request: web.Request) -> web.Response:
        topic = request.query.get("topic", "")
        if not 0 < len(topic) <= _MAX_TOPIC_NAME:
            raise InvalidValue(f"query parameter 'topic' must be a topic name of 1 to {_MAX_TOPIC_NAME} characters")
        partition = _int_param(request, "partition", None, 0, 2**31 - 1)
        limit = _int_param(request, "limit", DEFAULT_TAIL, 1, MAX_TAIL)
        return _json(await self._storage.call(views.tail, self._engine, topic, partition, limit))

    async def cluster(self, request: web.Request) -> web.Response:
        member = self._member() if self._member is not None else None
        if member is None:
            return _json({"cluster": None})
        manager = self._replicas() if self._replicas is not None else None
        # taken on the event loop, the only place the membership and the replica manager's states change
        view, epochs = member.view, dict(member.broker_epochs)
        states = {} if manager is None else dict(manager.states.states)
        placed = await self._storage.call(placed_vgroups, self._engine)
        return _json(cluster_page(member.keys.cluster_id, member.node_id, view, epochs, states, placed))


def _int_param(request: web.Request, name: str, default: int | None, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None and default is not None:
        return default
    if raw is None or not 0 < len(raw) <= 10 or not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise InvalidValue(f"query parameter {name!r} must be an integer from {low} to {high}")
    return int(raw)


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json", headers={"Cache-Control": "no-store"})
