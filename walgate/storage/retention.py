"""Retention in bounded steps: deleting the WAL segments retention wants gone, a few at a time.

A *round* looks at every vnode once (the vnodes there were when it began, in order); :meth:`Retention.step` goes on
with the round where the last step stopped and returns once it has looked at :data:`STEP_VNODES` vnodes or deleted
:data:`STEP_SEGMENTS` segments (each vnode whose segments go is first synced and checkpointed, see
:meth:`~walgate.storage.vnode.Vnode.apply_retention`), so one call never holds its thread for a whole data dir's
worth of deletions: the engine's other calls run between steps. A vnode left with expired segments at a step's end
stays at the head of the round. A vnode dropped (or reopened) between steps is skipped. Each step is crash-safe on
its own, as a whole round was: segments go oldest first, after the checkpoint their meta entries need, so a kill
between or inside steps leaves a log that is a suffix of the old one; the topics' log starts follow each vnode's
deletions in the same step.
"""

from __future__ import annotations

from collections import deque

from walgate.storage.store import Store
from walgate.storage.topic_views import TopicViews
from walgate.storage.vnode import Vnode

__all__ = ["STEP_SEGMENTS", "STEP_VNODES", "Retention"]

STEP_SEGMENTS = 16
"""Segments one step deletes at most."""
STEP_VNODES = 256
"""Vnodes one step looks at at most (a look is a stat of the oldest sealed segments' files)."""


class Retention:
    """The retention round in progress over one engine's vnodes (see the module docstring)."""

    def __init__(self, store: Store, views: TopicViews, step_segments: int = STEP_SEGMENTS,
                 step_vnodes: int = STEP_VNODES) -> None:
        self.store = store
        self.views = views
        self.step_segments = step_segments
        self.step_vnodes = step_vnodes
        self._round: deque[Vnode] = deque()

    @property
    def in_progress(self) -> bool:
        """Whether a round has vnodes left to look at."""
        return bool(self._round)

    def begin(self) -> None:
        """Start a round over every vnode (one in progress goes on: its vnodes are looked at first)."""
        queued = {id(v) for v in self._round}
        self._round.extend(v for vnodes in self.store.vnodes.values() for v in vnodes if id(v) not in queued)

    def step(self, now_wall: float) -> bool:
        """One bounded step of the round at ``now_wall`` (seconds since the epoch); True while vnodes are left."""
        looked = deleted = 0
        while self._round and looked < self.step_vnodes and deleted < self.step_segments:
            vnode = self._round[0]
            looked += 1
            if not any(v is vnode for v in self.store.vnodes.get(vnode.db.name, ())):
                self._round.popleft()  # dropped since the round began
                continue
            budget = self.step_segments - deleted
            gone = vnode.apply_retention(now_wall, budget)
            if gone:
                self.views.trim_to_retention(vnode)
                deleted += gone
            if gone < budget:  # (else it may have more: looked at again by the next step)
                self._round.popleft()
        return bool(self._round)
