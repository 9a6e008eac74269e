"""Heartbeat while this node loads the group's replicated coordinator partition: NONE, as Kafka's
GroupCoordinator.handleHeartbeat answers ("the group is still loading, so respond just blindly"); the other refusals
as they are (walgate/gateway/kafka/handlers/heartbeat.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from walgate.gateway.kafka.handlers import heartbeat
from walgate.wire.errors import ErrorCode


class Coordinators:
    """A node's coordinator view (``GroupCoordinators``' surface a refusal reads): every group's partition led by
    ``owner``; ``loading``: this node is still loading it."""

    def __init__(self, owner: int, loading: bool) -> None:
        self.member = SimpleNamespace(node_id=1)
        self.replicated = SimpleNamespace(loading=lambda group_id: loading)
        self._owner = owner

    async def owner(self, key: str) -> int:
        return self._owner


def unasked(*args: Any) -> Any:
    """The group service's run(): a refused heartbeat never reaches it."""
    raise AssertionError("the group service was asked on a refused heartbeat")


async def answer(coordinators: Coordinators) -> int:
    groups = SimpleNamespace(groups=None, run=unasked)
    broker: Any = SimpleNamespace(authorizer=None, coordinators=coordinators, groups=groups)
    request: Any = {"group_id": "g", "generation_id": 3, "member_id": "m-1", "group_instance_id": None}
    response = await heartbeat.handle(broker, SimpleNamespace(), SimpleNamespace(**request))  # type: ignore[arg-type]
    return int(response["error_code"])


async def test_a_heartbeat_to_a_coordinator_loading_the_group_is_answered_none() -> None:
    assert await answer(Coordinators(owner=1, loading=True)) == ErrorCode.none


async def test_a_heartbeat_to_another_nodes_group_is_not_coordinator() -> None:
    assert await answer(Coordinators(owner=2, loading=False)) == ErrorCode.not_coordinator
    assert await answer(Coordinators(owner=-1, loading=False)) == ErrorCode.coordinator_not_available
