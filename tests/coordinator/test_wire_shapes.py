"""The coordinator's response dicts are what the wire layer's version-agnostic builders take.

The contract the gateway wires against: every response goes through
``walgate.wire.protocol.build_response`` unchanged and encodes, at every version
walgate speaks, except JoinGroup's ``protocol_name``, which versions < 7 cannot
carry as null (Kafka sends ``""`` there).
"""

from __future__ import annotations

from typing import Any

import pytest
from coordinator_helpers import Harness, MemoryOffsetStore
from kio.schema.errors import ErrorCode

from walgate.coordinator import PartitionCommit, commit_offsets, delete_offsets, fetch_offsets
from walgate.wire.protocol import WIRE_VERSIONS, build_response
from walgate.wire.serial import encoder

JOIN, SYNC, HEARTBEAT, LEAVE, DESCRIBE, LIST, DELETE_GROUPS = 11, 14, 12, 13, 15, 16, 42
OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47


def _encodes(api_key: int, version: int, fields: dict[str, Any]) -> bytes:
    message = build_response(api_key, version, fields)
    return bytes(encoder(type(message))(bytearray(), [], message))


def _versions(api_key: int, low: int = 0) -> range:
    first, last = WIRE_VERSIONS[api_key]
    return range(max(first, low), last + 1)


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.stable_pair()
    return harness


def test_join_responses(h):
    error = h.answer(h.join(client="x", group="other"))
    follower = h.answer(h.join("d-2", client="d"))
    leader_join = h.join("c-1", client="c")
    h.join("d-2", client="d")
    leader = h.answer(leader_join)
    assert error["protocol_name"] is None and len(leader["members"]) == 2
    for version in _versions(JOIN):
        for response in (error, follower, leader):
            if version < 7 and response["protocol_name"] is None:
                response = {**response, "protocol_name": ""}
            assert _encodes(JOIN, version, response)


def test_sync_heartbeat_and_leave_responses(h):
    ok = h.answer(h.sync("d-2", 1))
    error = h.answer(h.sync("d-2", 7))
    for version in _versions(SYNC):
        assert _encodes(SYNC, version, ok) and _encodes(SYNC, version, error)
    for version in _versions(HEARTBEAT):
        assert _encodes(HEARTBEAT, version, {"error_code": h.heartbeat("c-1", 1)})
    leave = h.leave(("c-1", None), ("nobody", "i"))
    for version in _versions(LEAVE, low=3):
        assert _encodes(LEAVE, version, leave)


def test_admin_responses(h):
    described = h.groups.describe(["g", "nope"], has_offsets=lambda g: False, report_not_found=True)
    for version in _versions(DESCRIBE):
        assert _encodes(DESCRIBE, version, {"groups": described})
    listed = h.groups.list_groups()
    for version in _versions(LIST):
        assert _encodes(LIST, version, {"error_code": ErrorCode.none, "groups": listed})
    deleted = h.groups.delete(["g", "nope"], has_offsets=lambda g: False, now_ms=h.now)
    for version in _versions(DELETE_GROUPS):
        assert _encodes(DELETE_GROUPS, version, {"results": deleted})


def test_offset_responses(h):
    store = MemoryOffsetStore()
    plan = commit_offsets(
        h.groups,
        store,
        group_id="g",
        generation_id=1,
        member_id="c-1",
        group_instance_id=None,
        topics=[("t", [PartitionCommit(0, 5)])],
        partition_exists=lambda t, p: True,
        report_group_not_found=True,
        now_ms=h.now,
    )
    store.commit(plan.records)
    for version in _versions(OFFSET_COMMIT):
        assert _encodes(OFFSET_COMMIT, version, plan.response)
    fetched = fetch_offsets(store, group_id="g", topics=None)
    for version in _versions(OFFSET_FETCH, low=8):
        assert _encodes(OFFSET_FETCH, version, {"groups": [fetched]})
    deleted = delete_offsets(
        h.groups, store, group_id="g", topics=[("t", [0])], topic_exists=lambda t: True, now_ms=h.now
    )
    for version in _versions(OFFSET_DELETE):
        assert _encodes(OFFSET_DELETE, version, deleted.response)
