"""FindCoordinator (key 10) v0–v6: this node coordinates every group (batched keys from v4).

Transaction coordinators (key type 1) are refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and a message: walgate has no
transactions, and that error is fatal at once in clients (COORDINATOR_NOT_AVAILABLE
would be retried until a timeout).

ACLs (as Kafka): a group the principal may not Describe answers GROUP_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from walgate.gateway.kafka.access import Operation, ResourceType, allowed
from walgate.gateway.kafka.broker import Broker
from walgate.wire.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 10, 0, 6
_GROUP = 0


def _one(broker: Broker, key: str, key_type: int) -> dict[str, Any]:
    if key_type != _GROUP:
        return {"key": key, "node_id": -1, "host": "", "port": -1,
                "error_code": ErrorCode.transactional_id_authorization_failed,
                "error_message": "walgate does not support transactions"}
    if not allowed(broker, Operation.DESCRIBE, ResourceType.GROUP, key):
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.group_authorization_failed,
                "error_message": "Not authorized to access group"}
    host, port = broker.address()
    return {"key": key, "node_id": broker.node_id, "host": host, "port": port,
            "error_code": ErrorCode.none, "error_message": None}


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    key_type = getattr(request, "key_type", _GROUP)
    if header.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [_one(broker, k, key_type) for k in request.coordinator_keys]}
    one = _one(broker, request.key, key_type)
    del one["key"]  # v0-v3 answer a single key at the top level
    return {"throttle_time": 0, **one}
