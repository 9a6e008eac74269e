"""walgate's internal APIs: requests only cluster nodes send each other, in Kafka's framing, never advertised.

Each API is described by Kafka message-JSON descriptors beside this module (``<Name>Request.json``,
``<Name>Response.json``), turned into kio-style dataclasses by :func:`walgate.wire.legacy.message_class` as Kafka's
own descriptors are, so that :mod:`walgate.wire.protocol` decodes and encodes them, and
:mod:`walgate.wire.messages_gen` generates their typed views, like any API's. Their api keys are above Kafka's
(10000 and up), so that no Kafka client's request is ever read as one; ApiVersions never lists them
(:func:`walgate.gateway.kafka.handlers.advertised`): a node's registration names the highest version of each it
answers (:attr:`NodeInfo.internal <walgate.cluster.model.NodeInfo.internal>`), and a node sends another the highest
both answer, so nodes of two releases work together during a rolling upgrade.

=========  =============  ========  ==========================================================================
api key    name           versions  what
=========  =============  ========  ==========================================================================
10001      WalFetch       0-1       a follower copies its leader's WAL entries (docs/plans/replication-wiring.md,
                                    step 4; :mod:`walgate.gateway.kafka.handlers.wal_fetch`); v1: topics' log
                                    starts
10002      VnodeSnapshot  0         a follower below its leader's log start pages the leader's snapshot of an
                                    SQL vgroup (docs/plans/vnode-snapshot.md; KIP-630's FetchSnapshot;
                                    :mod:`walgate.gateway.kafka.handlers.vnode_snapshot`)
=========  =============  ========  ==========================================================================
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Final

from walgate.wire.legacy import message_class, parse

__all__ = ["API_NAMES", "KEYS", "VERSIONS", "VNODE_SNAPSHOT", "WAL_FETCH", "descriptor", "schemas"]

WAL_FETCH: Final = 10001
"""The api key of WalFetch, the internal API every release answers (version 0 at least)."""
VNODE_SNAPSHOT: Final = 10002
"""The api key of VnodeSnapshot."""

_APIS: Final = {WAL_FETCH: ("wal_fetch", "WalFetch"), VNODE_SNAPSHOT: ("vnode_snapshot", "VnodeSnapshot")}
_DIR: Final = Path(__file__).parent

API_NAMES: Final[dict[int, str]] = {key: snake for key, (snake, _) in _APIS.items()}
"""Api key -> snake_case API name (as kio names Kafka's)."""


@functools.cache
def descriptor(name: str) -> dict[str, Any]:
    """The parsed descriptor ``<name>.json`` beside this module (e.g. ``"WalFetchRequest"``)."""
    return parse((_DIR / f"{name}.json").read_text())


def _versions(api: str) -> tuple[int, int]:
    low, _, high = descriptor(f"{api}Request")["validVersions"].partition("-")
    return int(low), int(high or low)


VERSIONS: Final[dict[int, tuple[int, int]]] = {key: _versions(api) for key, (_, api) in _APIS.items()}
"""Api key -> (min, max) version."""

KEYS: Final[frozenset[tuple[int, int]]] = frozenset(
    (key, v) for key, (low, high) in VERSIONS.items() for v in range(low, high + 1))
"""Every (api_key, version) of an internal API."""


@functools.cache
def schemas(api_key: int, version: int) -> tuple[type, type]:
    """(request class, response class) of (api_key, version) in :data:`KEYS`, generated on first use."""
    if (api_key, version) not in KEYS:
        raise KeyError((api_key, version))
    api = _APIS[api_key][1]
    return message_class(descriptor(f"{api}Request"), version), message_class(descriptor(f"{api}Response"), version)
