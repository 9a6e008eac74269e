"""OffsetCommit (key 8) v0–v9: validated by the coordinator, fsynced into the partitions' vnodes, then answered."""

from __future__ import annotations

from typing import Any

from walgate.coordinator.offsets import PartitionCommit, commit_offsets
from walgate.gateway.kafka.broker import Broker
from walgate.gateway.kafka.groups import now_ms

API_KEY, MIN_VERSION, MAX_VERSION = 8, 0, 9


async def handle(broker: Broker, header: Any, request: Any) -> dict[str, Any]:
    svc = broker.groups
    topics = [
        (t.name, [PartitionCommit(p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                                  p.committed_metadata) for p in t.partitions])
        for t in request.topics
    ]

    def commit() -> tuple[dict[str, Any], list[Any]]:
        plan = commit_offsets(
            svc.groups.classic, svc.store,
            group_id=request.group_id,
            generation_id=getattr(request, "generation_id_or_member_epoch", -1),
            member_id=getattr(request, "member_id", ""),
            group_instance_id=getattr(request, "group_instance_id", None),
            topics=topics,
            partition_exists=svc.engine.has_partition,
            report_group_not_found=header.api_version >= 9,
            now_ms=now_ms(),
            consumer=svc.groups.consumer,
        )
        svc.store.commit(plan.records)  # durable (fsynced) before the answer
        return plan.response, []

    return {"throttle_time": 0, **await svc.run(commit)}
