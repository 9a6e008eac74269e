"""KIP-848 group configs acted on by the consumer-group coordinator (fake clock): a group's own
``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` over the broker's, read at each heartbeat."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from test_consumer_group import hb, make


def test_a_groups_own_session_timeout_and_heartbeat_interval_win_over_the_brokers() -> None:
    stored = {"fast": {"consumer.session.timeout.ms": "10000", "consumer.heartbeat.interval.ms": "2000"}}
    groups = make(session_timeout_ms=45_000, heartbeat_interval_ms=5_000,
                  group_configs=lambda group_id: stored.get(group_id, {}))
    fast, slow = hb(groups, 0, group_id="fast"), hb(groups, 0, group_id="slow")
    assert (fast["error_code"], fast["heartbeat_interval_ms"]) == (ErrorCode.none, 2_000)
    assert slow["heartbeat_interval_ms"] == 5_000
    assert groups.tick(9_999) == []
    assert groups.tick(10_000) == [("fast", fast["member_id"])]
    assert groups.tick(44_999) == []
    stored["slow"] = {"consumer.heartbeat.interval.ms": "7000"}  # a change applies at the next heartbeat
    again = hb(groups, 44_999, slow["member_id"], slow["member_epoch"], group_id="slow", owned=[("t", [0, 1, 2, 3])])
    assert (again["error_code"], again["heartbeat_interval_ms"]) == (ErrorCode.none, 7_000)
    assert groups.tick(45_000) == []  # the heartbeat restarted its session
    assert groups.tick(44_999 + 45_000) == [("slow", slow["member_id"])]
