"""What a write appended to the replicated vnodes this node leads, for its caller to wait for (issue 25: acks=all).

A caller that answers a write only once the in-sync replicas hold it (SQL, line protocol and CSV writes; a Produce of
rows with ``acks=all``) runs the write inside :func:`recording`: every append :class:`~walgate.storage.commit.Commits`
then makes to a replicated vnode this node leads is noted there as a :class:`LedAppend` (the vnode, the leader epoch
it was appended in, read from the vnode's epoch cache on its lane at the append, and its last WAL version), and the
caller waits for exactly those (:meth:`ReplicaManager.writes_acknowledged
<walgate.gateway.replicas.ReplicaManager.writes_acknowledged>`); a write noting nothing (no replicated vnode led
here) waits for nothing. Inside :func:`recording` such a write is also refused before its append while the vnode's
ISR is below ``min.insync.replicas`` (:meth:`Store.written_vnode <walgate.storage.store.Store.written_vnode>`), as
Kafka's ``Partition.appendRecordsToLeader`` checks it first for ``acks=all``; outside (``acks=1``) it is not.

The notes travel in a :class:`~contextvars.ContextVar`: the gateway's storage lane runs each call in a copy of its
caller's context (:class:`~walgate.gateway.storage_thread.StorageThread`), whose list is the caller's; appends on
the lane's threads add to it (``list.append`` is atomic), nothing else is shared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from walgate.storage.lanes import VnodeKey

__all__ = ["LedAppend", "note", "recording", "waited_for"]


@dataclass(frozen=True)
class LedAppend:
    """Entries appended to vnode ``key``, led here in ``leader_epoch``, up to WAL version ``last_version``."""

    key: VnodeKey
    leader_epoch: int
    last_version: int


_noted: ContextVar[list[LedAppend] | None] = ContextVar("walgate_led_appends", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[LedAppend]]:
    """Note the led appends of the calls made inside (the module docstring) in the list given; an enclosing
    recording sees none of them."""
    noted: list[LedAppend] = []
    token = _noted.set(noted)
    try:
        yield noted
    finally:
        _noted.reset(token)


def waited_for() -> bool:
    """Whether the running call's caller waits for the high watermark (it runs inside :func:`recording`)."""
    return _noted.get() is not None


def note(appended: LedAppend) -> None:
    """Note ``appended`` for the caller recording (none: nobody waits, nothing kept)."""
    noted = _noted.get()
    if noted is not None:
        noted.append(appended)
