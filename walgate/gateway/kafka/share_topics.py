"""The engine's topics as share groups' administration sees them (:class:`~walgate.coordinator.share_admin.ShareTopics`):
topic keys are topic ids as strings, as the share coordinator keys its partitions. Storage thread only."""

from __future__ import annotations

import uuid

from walgate.storage.engine import Engine

__all__ = ["EngineTopics", "topic_uuid"]


class EngineTopics:
    """Names, keys and partition counts of the engine's topics."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def key(self, name: str) -> str | None:
        topic_id = self._engine.topic_id(name)
        return None if topic_id is None else str(topic_id)

    def name(self, key: str) -> str | None:
        return self._engine.topic_name(uuid.UUID(key))

    def partitions(self, name: str) -> int:
        return self._engine.partition_count(name)


def topic_uuid(key: str | None) -> uuid.UUID:
    """The topic id on the wire of a topic key (the zero UUID for none)."""
    return uuid.UUID(int=0) if key is None else uuid.UUID(key)
