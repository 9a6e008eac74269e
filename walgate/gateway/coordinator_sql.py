"""The SQL statements about consumer groups, run from the event loop on the lane that owns what they read (issue 23):
the storage lane never waits for the coordinator lane for them.

* ``SHOW CONSUMERS``: the group coordinator's members, on the coordinator lane.
* ``SHOW SUBSCRIPTIONS``: the members and the committed offsets on the coordinator lane, then the partitions'
  watermarks and WAL versions on the storage lane (:meth:`walgate.storage.show.Show.subscriptions`): two calls,
  each lane reading only its own state.
* ``DROP CONSUMER GROUP``: on the coordinator lane entirely (the topic checked in the published topics snapshot,
  the members, the committed offsets' deletion, durable before the answer).

An engine used alone (tools, tests) runs them itself, through :class:`walgate.storage.lanes.CoordinatorLane`.
"""

from __future__ import annotations

from walgate.gateway.kafka.groups import GroupService, consumer_rows
from walgate.gateway.storage_thread import StorageThread
from walgate.storage.engine import Engine
from walgate.storage.result import Result
from walgate.storage.show import consumers
from walgate.storage.sql import ast
from walgate.storage.topic_views import drop_consumer_group

__all__ = ["on_coordinator_lane", "run"]


def on_coordinator_lane(stmt: ast.Statement) -> bool:
    """Whether ``stmt`` is one of the statements :func:`run` answers."""
    return isinstance(stmt, ast.DropConsumerGroup) or (
        isinstance(stmt, ast.Show) and stmt.what in ("CONSUMERS", "SUBSCRIPTIONS"))


async def run(stmt: ast.Statement, engine: Engine, groups: GroupService, storage: StorageThread) -> Result:
    """``stmt`` (:func:`on_coordinator_lane`) answered by the coordinator lane, then the storage lane if it needs
    it (module docstring)."""
    coordinator = groups.groups
    if isinstance(stmt, ast.DropConsumerGroup):
        drop = stmt
        return await groups.lane.call(lambda: drop_consumer_group(
            drop, engine.topics(), consumer_rows(coordinator), lambda group, topic: engine.delete_offsets(group, topic)))
    assert isinstance(stmt, ast.Show)
    if stmt.what == "CONSUMERS":
        return consumers(await groups.lane.call(consumer_rows, coordinator))
    members, offsets = await groups.lane.call(lambda: (
        consumer_rows(coordinator), [(g, t, p, c.offset) for g, t, p, c in engine.all_committed()]))
    return await storage.call(lambda: engine.show.subscriptions(members, offsets))
