"""A replicated cluster's share-group administration from the share coordinator's records
(walgate/coordinator/share_admin.py, docs/cluster.md "Share groups"): a record's summary (start offset, records past
it acknowledged or archived), the groups records name, DescribeShareGroupOffsets answered from records alone (every
recorded share-partition with no topics asked, whichever node used it; lags from the leaders' high watermarks), and
DeleteShareGroupOffsets / DeleteGroups deleting the recorded share-partitions this node leads (a tombstone without
reading them), leaving those led elsewhere to their leader, and answering a topic without records "no offset
information"."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from test_share_admin import Topics
from test_share_membership import Logs

from walgate.coordinator.share_admin import (
    NO_OFFSETS,
    delete_group,
    delete_offsets,
    describe_recorded,
    recorded_groups,
    recorded_summary,
)
from walgate.coordinator.share_coordinator import ShareCoordinator
from walgate.coordinator.share_group import ShareGroups

T0 = {"s": 2, "e": 9, "r": [[2, 3, 2, 1], [4, 4, 0, 2], [5, 5, 4, 5], [6, 8, 0, 1]], "l": 3}
"""A record of t-0: start 2, 2..3 acknowledged, 4 available, 5 archived, 6..8 available; written in epoch 3."""
U0 = {"s": 7, "e": 7, "r": [], "l": 0}
RECORDS = {("g", "t", 0): T0, ("g", "u", 0): U0, ("h", "t", 1): U0, ("g", "t", 1): None}


def rows(found: list[dict]) -> list[tuple[str, int, int, int]]:
    return [(t["topic_name"], p["partition_index"], p["start_offset"], p["lag"]) for t in found for p in t["partitions"]]


def test_a_records_summary_counts_what_is_acknowledged_or_archived_past_its_start() -> None:
    assert recorded_summary(T0) == (2, 3)
    assert recorded_summary(U0) == (7, 0)
    assert recorded_groups(RECORDS.items()) == {"g", "h"}, "a deleted state (None) names no group"


def test_describe_answers_every_recorded_share_partition_and_its_lag_from_the_leaders_high_watermark() -> None:
    marks = {("t", 0): 20}  # u-0's leader did not answer
    assert rows(describe_recorded(Topics(), RECORDS, "g", None, marks)) == [("t", 0, 2, 15), ("u", 0, 7, -1)]
    assert rows(describe_recorded(Topics(), RECORDS, "g", [("t", [1, 0]), ("x", [0])], marks)) == [
        ("t", 1, -1, -1), ("t", 0, 2, 15), ("x", 0, -1, -1)], "asked partitions in order; none recorded: -1"
    assert [t["topic_id"] for t in describe_recorded(Topics(), RECORDS, "g", [("t", [0]), ("x", [0])], {})] == \
        ["t", None]
    assert rows(describe_recorded(Topics(), RECORDS, "h", None, {("t", 1): 5})) == [("t", 1, 7, 0)]
    assert describe_recorded(Topics(), RECORDS, "none", None, marks) == []


def persisted() -> ShareCoordinator:
    """A replicated cluster's coordinator whose node holds no share-partition of the groups in memory."""
    return ShareCoordinator(ShareGroups(), Logs(), persisted=True)


def test_delete_offsets_deletes_the_recorded_share_partitions_led_here_and_leaves_the_others_to_their_leader(
) -> None:
    c = persisted()
    recorded = [k for k, v in RECORDS.items() if v is not None]
    led_here = lambda name, p: (name, p) != ("u", 0)  # noqa: E731 - g's u-0 is recorded, led by another node now
    code, _, results = delete_offsets(c, Topics(), "g", ["t", "u"], led_here, True, recorded)
    assert code == ErrorCode.none
    assert [(t["topic_name"], t["error_code"]) for t in results] == [("t", ErrorCode.none), ("u", ErrorCode.none)]
    assert c.take_records() == [(("g", "t", 0), None)], "a tombstone of t-0, read nowhere; u-0 is its leader's"
    c.written()
    code, _, results = delete_offsets(c, Topics(), "h", ["u"], lambda name, p: True, True, [("h", "t", 1)])
    assert [(t["error_code"], t["error_message"]) for t in results] == [
        (ErrorCode.unknown_topic_or_partition, NO_OFFSETS)], "no record of u: nothing to delete, as Kafka answers"
    assert c.take_records() == []


def test_delete_group_deletes_the_recorded_share_partitions_it_is_given() -> None:
    c = persisted()
    assert delete_group(c, "g", True, [("g", "t", 0), ("h", "t", 1)]) == ErrorCode.none
    assert c.take_records() == [(("g", "t", 0), None)], "only the group's"
    assert delete_group(c, "x", False, []) == ErrorCode.group_id_not_found
