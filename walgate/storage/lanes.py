"""The lanes storage code runs on (issue 23): how it reaches the coordinator lane, and what a call on vnode lanes holds.

**The coordinator lane.** The coordinator log (committed offsets, group records) and the group coordinator belong to
the coordinator lane. Storage-lane code that must read or write them (SHOW CONSUMERS / SUBSCRIPTIONS, DROP CONSUMER
GROUP, a dropped topic's offsets) runs that part through :meth:`CoordinatorLane.run`, which waits for it: the storage
lane may wait for the coordinator lane, never the reverse. An engine opened alone (tools, tests) has no second lane:
:data:`INLINE` runs the function at once.

**Vnode lanes.** The storage lane runs *exclusive* calls (the whole engine, alone) and *keyed* calls, each holding a
set of vnodes (:data:`VnodeKey`), several at once on threads of their own (the gateway's dispatcher,
:mod:`walgate.gateway.storage_thread`). :func:`holding` marks the thread of a keyed call with what it holds; an
exclusive call, and an engine used on one thread, hold everything (:func:`held` is None). What each part of the
shared state (:class:`~walgate.storage.store.Store`) may see:

* the catalog (databases, supertables, topics, users, ACLs, configs) and the maps of what is open (``vnodes``,
  ``indexes``, ``evaluators``, ``producers``, topic ids): changed by exclusive calls only (``Catalog`` refuses
  otherwise: :func:`check_exclusive`), so keyed calls read them at once without a lock;
* a vnode (its WAL, meta store and table cache, the offset indexes of the topics over it, its Kafka-native
  partition's producer state): changed and read only by calls that hold it (``Store.local_vnode`` refuses another:
  :func:`check_vnode`), in submission order per vnode; its group-commit syncs are taken and marked done on its lane;
* a database's table count (``max_tables``): changed only by calls holding every vnode of the database (a write
  planned elsewhere holds them all, every other write is exclusive), so the limit sees every creation before it;
* the durability notes (:class:`~walgate.storage.durability.Unsynced`): per thread, each call taking its own;
* the topics snapshot: published at the end of calls; keyed calls change no catalog, so what they publish is what
  an exclusive call left (two publishing at once build the same snapshot);
* TDengine topics' batch cache: read and filled by exclusive calls only (a TDengine topic's partitions are never
  keyed: :func:`partition_keys`);
* the open-file cache, the tag table cache, fsync latency counters, damage log and producer ids: locked, any
  thread.

A keyed call computes its keys from what it was asked (on the event loop, from the published topics), checks them
again against the catalog when it runs and raises :class:`Relane` *before changing anything* when they no longer
cover what it must touch: it then runs again, exclusive.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from walgate.storage.catalog import DatabaseDef, TopicDef

__all__ = ["INLINE", "CoordinatorLane", "LaneViolation", "Relane", "VnodeKey", "check_exclusive", "check_vnode",
           "covers", "database_keys", "held", "holding", "partition_keys", "TopicLookup"]

T = TypeVar("T")


class CoordinatorLane(Protocol):
    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the coordinator lane (at once when called there), its writes durable before the calling
        storage-lane call answers."""
        ...

    @property
    def separate(self) -> bool:
        """Whether the coordinator lane is a thread of its own (then only the storage lane publishes topics)."""
        ...


class _Inline:
    separate = False

    def run(self, fn: Callable[[], T]) -> T:
        return fn()


INLINE: CoordinatorLane = _Inline()
"""No second lane: everything runs on the caller's thread."""


# ------------------------------------------------------------------ vnode lanes (issue 23, plan step 6)

VnodeKey = tuple[str, int]
"""(database, vgroup index): one vnode's lane. Calls holding disjoint sets of them run at once."""

_held = threading.local()


class Relane(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a call running on vnode lanes (:func:`holding`) before it changed anything, when it finds that it
    needs more than the vnodes it holds (the catalog moved since its keys were computed, a write's plan must be made
    again, a schema change): the dispatcher runs it again with the whole storage lane."""


class LaneViolation(RuntimeError):
    """A call on vnode lanes touched state it does not hold (a bug: every keyed call checks its keys first)."""


@contextmanager
def holding(keys: frozenset[VnodeKey]) -> Iterator[None]:
    """The calling thread runs a call that holds the vnodes ``keys`` only (while the ``with`` lasts)."""
    _held.keys = keys
    try:
        yield
    finally:
        _held.keys = None


def held() -> frozenset[VnodeKey] | None:
    """The vnodes the calling thread's call holds; None: the whole storage lane (an exclusive call, or an engine used
    on one thread: tools, tests)."""
    keys: frozenset[VnodeKey] | None = getattr(_held, "keys", None)
    return keys


def covers(keys: frozenset[VnodeKey] | None) -> bool:
    """Whether the calling thread's call may touch ``keys`` (None: everything, the catalog included)."""
    now = held()
    return now is None or (keys is not None and keys <= now)


def database_keys(names: Iterable[str | None], databases: Mapping[str, DatabaseDef]) -> frozenset[VnodeKey] | None:
    """Every vnode of each database of ``names``, as ``databases`` define them; None (the whole storage lane) when
    one is None (not known) or not in ``databases``."""
    named = set(names)
    if None in named or not named <= databases.keys():
        return None
    return frozenset((name, i) for name in named if name is not None for i in range(databases[name].vgroups))


def check_vnode(db: str, index: int) -> None:
    """Refuse (:class:`LaneViolation`) a vnode the calling thread's call does not hold."""
    now = held()
    if now is not None and (db, index) not in now:
        raise LaneViolation(f"vnode {index} of database {db} touched by a call holding only {sorted(now)}")


def check_exclusive(what: str) -> None:
    """Refuse (:class:`LaneViolation`) a change of shared state (``what``: the catalog) by a call on vnode lanes."""
    now = held()
    if now is not None:
        raise LaneViolation(f"{what} changed by a call holding only the vnodes {sorted(now)}")


class TopicLookup(Protocol):
    """Topics by name and by id: the published snapshot (on the event loop, where keys are computed) or the engine
    (on the lane, where they are checked)."""

    def topic(self, name: str) -> TopicDef | None: ...

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...


def partition_keys(topics: TopicLookup, partitions: Iterable[tuple[str, int]]) -> frozenset[VnodeKey] | None:
    """The vnodes that Kafka-native topic-partitions ``(name, partition)`` live in (partition p of such a topic is
    vnode p of the topic's own database, and nothing else holds it); None (the whole lane) when one is a TDengine
    topic's (its reads render through the shared batch cache, its rows land in any vnode of its database). A topic
    that does not exist holds nothing: it is answered unknown."""
    keys: set[VnodeKey] = set()
    for name, partition in partitions:
        topic = topics.topic(name)
        if topic is None:
            continue
        if topic.kind != "kafka":
            return None
        keys.add((topic.db, partition))
    return frozenset(keys)
