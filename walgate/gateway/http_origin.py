"""Cross-origin browser requests refused on the HTTP port, before any handler runs.

A web page a developer visits can make the browser send requests to ``http://127.0.0.1:6041``: a ``text/plain``
POST (a "simple request", e.g. ``fetch(url, {mode: 'no-cors', method: 'POST', body: 'DROP DATABASE power'})`` or
an HTML form) is sent without a CORS preflight, so the browser's same-origin policy only hides the answer: the
statement would run. Browsers label every request they send, so the server can tell such requests apart and refuse
them (403, TDengine-REST style JSON error, nothing run):

* ``Sec-Fetch-Site: cross-site`` (any method), or ``same-site`` on a method other than GET/HEAD/OPTIONS (another
  port of the same host is "same-site" to the browser, a foreign origin to us);
* an ``Origin`` header that is not the server's own origin (the request's scheme and its ``Host`` header, with
  default ports made explicit) and not in the allow-list (``http_allowed_origins``), including ``Origin: null``
  (sandboxed frames, ``file://`` pages);
* DNS rebinding: on a loopback socket, a browser request (one with ``Origin`` or ``Sec-Fetch-Site``) whose ``Host``
  is not a loopback name (``localhost``, ``127.x.y.z``, ``[::1]``) or an allowed origin's host: a rebound name makes
  the page "same-origin" with walgate in the browser's eyes, but the ``Host`` header still names the attacker's
  domain.

Requests without these headers (curl, ``taosrest``, scripts, Kafka tools) are not browser requests and pass
unchanged; so do same-origin ones (the web console at ``/ui``). An allowed origin passes every check.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

__all__ = ["FORBIDDEN_ORIGIN", "parse_origins", "same_origin_middleware"]

log = logging.getLogger("walgate.http.origin")

FORBIDDEN_ORIGIN = 0x0303  # "code" of the 403 answer (TDengine 3: TSDB_CODE_MND_NO_RIGHTS, insufficient privilege)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]
"""(scheme, lower-case host without brackets, port): an origin as compared here."""


def _origin(scheme: str, netloc: str) -> Origin | None:
    """``scheme://netloc`` as an :data:`Origin`, or None when it is not a well-formed http(s) origin."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port
    except ValueError:
        return None
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path or parts.query or parts.username:
        return None
    return scheme, parts.hostname.lower(), port if port is not None else _DEFAULT_PORTS[scheme]


def parse_origins(text: str | Iterable[str]) -> frozenset[Origin]:
    """The allow-list from a comma-separated string (or strings) of ``scheme://host[:port]``; raises ``ValueError``
    for an entry that is no http(s) origin."""
    entries = text.split(",") if isinstance(text, str) else list(text)
    out = set()
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        scheme, sep, netloc = entry.rstrip("/").partition("://")
        origin = _origin(scheme, netloc) if sep else None
        if origin is None:
            raise ValueError(f"{entry!r} is not an origin (scheme://host[:port], http or https)")
        out.add(origin)
    return frozenset(out)


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _refusal(request: web.Request, allowed: frozenset[Origin]) -> str | None:
    """Why ``request`` is a cross-origin browser request to refuse, or None to let it through."""
    origin_header = request.headers.get("Origin")
    site = request.headers.get("Sec-Fetch-Site", "").lower()
    if origin_header is None and not site:
        return None  # not sent by a browser's fetch/form machinery
    own = _origin(request.scheme, request.host)
    if origin_header is not None:
        origin = _origin(*origin_header.partition("://")[::2]) if "://" in origin_header else None
        if origin is not None and origin in allowed:
            return None
        if origin is None or origin != own:
            return f"Origin {origin_header[:100]!r} is not this server's"
    if site == "cross-site" or (site == "same-site" and request.method not in _SAFE_METHODS):
        return f"Sec-Fetch-Site is {site}"
    sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
    if sock and _is_loopback(str(sock[0])) and (own is None or not _is_loopback(own[1])) \
            and (own is None or all(own[1] != a[1] for a in allowed)):
        return f"Host {request.host[:100]!r} is not a loopback name on a loopback address (DNS rebinding)"
    return None


def same_origin_middleware(allowed: frozenset[Origin] = frozenset()) -> Middleware:
    """The middleware refusing cross-origin browser requests (see the module docstring) with a 403 JSON answer;
    ``allowed``: origins from :func:`parse_origins` that may call the API from a browser."""

    @web.middleware
    async def same_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
        why = _refusal(request, allowed)
        if why is None:
            return await handler(request)
        log.warning("refused a cross-origin browser request %s %s from %s: %s", request.method, request.path,
                    request.remote, why, extra={"peer": request.remote, "method": request.method, "path": request.path})
        return web.json_response({"code": FORBIDDEN_ORIGIN, "desc": f"cross-origin request refused: {why}"},
                                 status=403)

    return same_origin
