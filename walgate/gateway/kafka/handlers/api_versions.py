"""ApiVersions (key 18) v0–v4: what this broker handles, derived from the handler table.

An ApiVersions request of a version above this range never reaches here: the
server answers it with the KIP-511 v0 fallback (UNSUPPORTED_VERSION + the list).
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.broker import Broker

API_KEY, MIN_VERSION, MAX_VERSION = 18, 0, 4


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    return {
        "error_code": 0,
        "throttle_time": 0,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi} for key, (lo, hi) in sorted(broker.versions.items())
        ],
    }
