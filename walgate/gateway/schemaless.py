"""Schemaless writes in a cluster (docs/cluster.md): the supertables a line-protocol write needs go through the
cluster's catalog stream before its rows.

A write whose rows need a new supertable, or new columns or tags of one, of a cluster database is refused by the
engine before anything is written (:class:`~walgate.storage.write_plan.SchemaChangeNeeded`, naming the changes the
single node would make: :func:`~walgate.storage.write_plan.merge_schema`). :func:`with_schemas` then

1. catches up with the stream (another node may have made them: the node a write was forwarded to, or a node that
   raced this one);
2. refuses a new supertable named like a table of its database, as a single node does (``... is a normal table, not
   a supertable``), once the node of its name's vgroup said whether one exists (tables live in their vnodes, not in
   the cluster's catalog: the planner sees only this node's); a node that cannot be asked refuses the write (503);
3. stages them (:meth:`Engine.make_schemas <walgate.storage.engine.Engine.make_schemas>`, which refuses a change
   whose supertable is not the one the write was planned against any more) and has them appended (checked by the
   controller against the whole stream) and applied here (:meth:`SharedCatalog.run
   <walgate.gateway.shared_catalog.SharedCatalog.run>`), then plans the write again: its rows are written, or
   forwarded to the nodes owning their vgroups, as any write's. A write is parsed and planned twice when its changes
   are made, once more for each refusal.

Two nodes making the same change both write their rows: the controller takes one record, the other node's is refused
(the supertable exists, or changed since), it catches up and, planning again, finds nothing left to change. With conflicting types the
write planned again against the winner's supertable is refused as on a single node (``field f is ... but the column
is ...``). Without etcd's majority the change is refused (:class:`~walgate.storage.errors.ClusterUnavailable`: HTTP
503), nothing written; writes needing no change go on.

A single node makes a line-protocol body's changes apart from its rows the same way, through :class:`LocalSchemas`
in the stream's place (an exclusive call of their own, nothing to catch up with, no other node to ask): the body,
planned on its database's vnodes, is refused there when it needs them (``schemas_apart``: :meth:`Ingest.write
<walgate.storage.ingest.Ingest.write>`) and planned again once they are made, so that only the changes, not the
whole write, hold the storage lane.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from walgate.gateway.storage_thread import StorageThread
from walgate.storage.catalog import StableDef
from walgate.storage.errors import ClusterUnavailable, InvalidValue
from walgate.storage.write_plan import SchemaChangeNeeded

__all__ = ["ATTEMPTS", "Changes", "LocalSchemas", "SchemaStream", "no_other_node", "with_schemas"]

log = logging.getLogger("walgate.cluster")

ATTEMPTS = 8
"""Plans of one write at most (each but the last followed by a change, refused when another node changed the
supertable meanwhile); a write still needing a change after that is refused, nothing written."""
T = TypeVar("T")
Changes = list[tuple[StableDef | None, StableDef]]


class SchemaStream(Protocol):
    """Where a write's supertable changes are made: the cluster's catalog stream (:class:`~walgate.gateway
    .shared_catalog.SharedCatalog`) or a single node's storage lane (:class:`LocalSchemas`)."""

    async def catch_up(self) -> None:
        """Apply here what others made meanwhile."""

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, which makes the changes, on the storage lane; what it changed made everyone's."""


S = TypeVar("S", bound=SchemaStream)


class LocalSchemas:
    """A single node's :class:`SchemaStream`: its catalog is its own (nothing to catch up with), and changes are made
    by an exclusive call of their own on ``storage``."""

    def __init__(self, storage: StorageThread) -> None:
        self.storage = storage

    async def catch_up(self) -> None:
        return None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.storage.call(fn, *args)


async def no_other_node(_: SchemaStream, __: Changes) -> None:
    """A single node's ``no_clash``: its tables are all its own, which its planner sees."""


async def with_schemas(shared: S | None, make: Callable[[Changes], object], write: Callable[[], Awaitable[T]],
                       no_clash: Callable[[S, Changes], Awaitable[None]]) -> T:
    """``write()``'s result, the supertables it needs made first through ``shared`` (module docstring; ``make``: the
    engine's call that makes them, once ``no_clash`` did not refuse them: it raises when a new supertable is named
    like a table). Without ``shared`` (a cluster node that has not joined the cluster yet) ``write()`` as is: one
    that needs a change is refused as unavailable (retriable)."""
    refused: tuple[Changes, InvalidValue] | None = None
    for _ in range(ATTEMPTS):
        try:
            return await write()
        except SchemaChangeNeeded as e:
            if shared is None:  # a cluster node starting, its catalog stream not followed yet
                raise ClusterUnavailable("This node has not joined the cluster yet: a write that creates or widens a"
                                         " supertable is refused, nothing written; retry") from None
            if refused is not None and refused[0] == e.changes:  # the refusal stands after catching up (an ALTER's:
                raise refused[1] from None  # a CREATE refused is there after catching up, or the write refused)
            changes = e.changes
        await shared.catch_up()
        await no_clash(shared, changes)
        try:
            await shared.run(make, changes)
            refused = None
        except InvalidValue as e:  # another write changed the supertable first: plan against what it made
            log.info("a schemaless change of %s was refused: %s", ", ".join(
                f"{new.db}.{new.name}" for _, new in changes), e.message)
            refused = (changes, e)
            await shared.catch_up()
    raise ClusterUnavailable(f"The supertables of this write kept changing meanwhile ({ATTEMPTS} plans): nothing was "
                             "written; retry")
