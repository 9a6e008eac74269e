"""The group coordinator's partitions over a cluster's nodes (docs/cluster.md, "Group coordinators").

A cluster has one N, its ``coordinators/partitions`` key: Kafka's ``offsets.topic.num.partitions``, made from the
first node's setting and never changed, so every node puts a group in the same partition
(:func:`walgate.storage.coordinator_partitions.partition_for`, Kafka's ``abs(hashCode) % N``) and every data dir
holds N coordinator logs. Each partition has one node, ``coordinators/placement``: decided once, over the nodes
live at that moment, balanced by count with racks alternated (:func:`walgate.cluster.placement.place`), when a
group's coordinator is first looked for, as Kafka creates ``__consumer_offsets`` at the first FindCoordinator. The
node of a group's partition is its coordinator. Pure: the gateway reads and writes the keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from walgate.cluster.model import ControlPlaneError
from walgate.cluster.placement import place
from walgate.storage.coordinator_partitions import partition_for

__all__ = ["CoordinatorPlacement", "decode_partitions", "encode_partitions"]


def encode_partitions(partitions: int) -> bytes:
    return str(partitions).encode()


def decode_partitions(value: bytes) -> int:
    """N as ``coordinators/partitions`` holds it; :class:`ControlPlaneError` when it is not walgate's."""
    text = value.decode(errors="replace")
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ControlPlaneError(f"the cluster's coordinator partitions in etcd are not walgate's: {value[:100]!r}")
    return int(text)


@dataclass(frozen=True)
class CoordinatorPlacement:
    """The node of each coordinator partition, by partition: ``len(nodes)`` is the cluster's N."""

    nodes: tuple[int, ...]

    @classmethod
    def decide(cls, partitions: int, live: Mapping[int, str | None]) -> CoordinatorPlacement:
        """``partitions`` placed over the ``live`` nodes (id -> ``broker.rack``); raises
        :class:`~walgate.cluster.placement.NoLiveNode` when there is none."""
        return cls(tuple(replicas[0] for replicas in place(partitions, live)))

    def partition(self, group_id: str) -> int:
        return partition_for(group_id, len(self.nodes))

    def owner(self, group_id: str) -> int:
        """The node coordinating ``group_id``."""
        return self.nodes[self.partition(group_id)]

    def encode(self) -> bytes:
        return json.dumps({"nodes": list(self.nodes)}).encode()

    @classmethod
    def decode(cls, value: bytes, partitions: int) -> CoordinatorPlacement:
        """The placement ``coordinators/placement`` holds, of a cluster of ``partitions`` partitions;
        :class:`ControlPlaneError` when it is not walgate's or names another number of partitions."""
        try:
            nodes = json.loads(value)["nodes"]
            if not isinstance(nodes, list) or not all(type(n) is int and n >= 0 for n in nodes):
                raise ValueError("not a list of node ids")
        except (ValueError, KeyError, TypeError) as e:
            raise ControlPlaneError(f"the coordinators' placement in etcd is not walgate's: {value[:200]!r} ({e})"
                                    ) from None
        if len(nodes) != partitions:
            raise ControlPlaneError(f"the coordinators' placement in etcd names {len(nodes)} partitions, the cluster "
                                    f"has {partitions}")
        return cls(tuple(nodes))
