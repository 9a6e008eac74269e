"""What storage calls back into: the protocols the gateway implements and passes to :meth:`Engine.open`.

Storage never imports the gateway; it is handed these two objects at construction and calls them on the thread
that calls the engine (the gateway's storage thread):

* a :class:`RecordsListener` is told after every append that gave a topic-partition new records (the gateway wakes
  the long-poll Fetches waiting on it), and after every append to a vnode's WAL, whatever it holds (the gateway
  wakes the followers' WalFetches waiting on the vnode: a vnode with no topic, or only meta entries, too);
* a :class:`ConsumersView` lists the consumer-group members the gateway's coordinator knows, for SHOW CONSUMERS,
  SHOW SUBSCRIPTIONS and DROP CONSUMER GROUP.

Without them (tools and tests that open an engine alone) nobody is told and no consumer is listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["NO_CONSUMERS", "NO_LISTENER", "ConsumerRow", "ConsumersView", "RecordsListener"]


@dataclass(frozen=True)
class ConsumerRow:
    """A consumer-group member as SHOW CONSUMERS lists it (supplied by the gateway's coordinator)."""

    group: str
    member_id: str
    client_id: str
    host: str
    state: str  # rebalancing | ready
    assignment: dict[str, tuple[int, ...]]
    last_heartbeat_ms: int


class RecordsListener(Protocol):
    def records_appended(self, topic: str, partition: int) -> None:
        """``topic``'s ``partition`` got new records (called after the append, on the engine's thread)."""

    def vnode_appended(self, db: str, index: int) -> None:
        """Vnode ``index`` of database ``db`` got new WAL entries (called after the append, on the thread of the
        call holding the vnode)."""


class ConsumersView(Protocol):
    def consumers(self) -> list[ConsumerRow]:
        """Every consumer-group member known now (called on the engine's thread)."""


class _NoListener:
    def records_appended(self, topic: str, partition: int) -> None:
        pass

    def vnode_appended(self, db: str, index: int) -> None:
        pass


class _NoConsumers:
    def consumers(self) -> list[ConsumerRow]:
        return []


NO_LISTENER: RecordsListener = _NoListener()
NO_CONSUMERS: ConsumersView = _NoConsumers()
