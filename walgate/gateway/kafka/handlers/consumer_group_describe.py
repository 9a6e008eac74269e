"""ConsumerGroupDescribe (key 69) v0–v1: KIP-848 groups with members, epochs, current and target assignment.

Topic ids are looked up on the storage thread, in the same call as the coordinator's; a failure is answered as
every requested group's error code (:mod:`.common`).
"""

from __future__ import annotations

import uuid
from typing import Any

from walgate.coordinator.classic import Completion
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.handlers.common import answered
from walgate.storage.engine import Engine

API_KEY, MIN_VERSION, MAX_VERSION = 69, 0, 1
_NO_AUTH_OPS = -2147483648


def _with_ids(assignment: dict[str, Any], engine: Engine) -> dict[str, Any]:
    return {"topic_partitions": [
        {**t, "topic_id": engine.topic_id(t["topic_name"]) or uuid.UUID(int=0)} for t in assignment["topic_partitions"]
    ]}


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups

    def describe(engine: Engine) -> tuple[list[dict[str, Any]], list[Completion]]:
        groups = svc.groups.consumer.describe(request.group_ids)
        for g in groups:
            g["authorized_operations"] = _NO_AUTH_OPS
            for m in g["members"]:
                m["assignment"] = _with_ids(m["assignment"], engine)
                m["target_assignment"] = _with_ids(m["target_assignment"], engine)
        return groups, []

    groups = await answered(broker.group_call(describe), lambda code: [
        {"group_id": g, "error_code": code, "error_message": None, "members": [], "authorized_operations": _NO_AUTH_OPS}
        for g in request.group_ids
    ])
    return {"throttle_time": 0, "groups": groups}
