"""The classic group protocol, driven directly with a fake clock (plain ints)."""

from __future__ import annotations

import re

import pytest
from coordinator_helpers import RANGE, SUB_T, Harness, asg, sub
from kio.schema.errors import ErrorCode

from walgate.coordinator import VALID_PREVIOUS_STATES, ClassicGroup, ClassicGroups, GroupState

E = ErrorCode
PR = GroupState.PREPARING_REBALANCE
CR = GroupState.COMPLETING_REBALANCE


def _join_ok(member_id: str, generation: int, leader: str, members: list[dict] | None = None, **extra: object) -> dict:
    response = {
        "error_code": E.none,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": leader,
        "skip_assignment": False,
        "member_id": member_id,
        "members": members or [],
    }
    response.update(extra)
    return response


def _join_error(error: ErrorCode, member_id: str) -> dict:
    return {
        "error_code": error,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def _sync_ok(assignment: bytes, protocol_name: str = "range") -> dict:
    return {"error_code": E.none, "protocol_type": "consumer", "protocol_name": protocol_name, "assignment": assignment}


def _sync_error(error: ErrorCode) -> dict:
    return {"error_code": error, "protocol_type": None, "protocol_name": None, "assignment": b""}


def _member(member_id: str, metadata: bytes = SUB_T, instance: str | None = None) -> dict:
    return {"member_id": member_id, "group_instance_id": instance, "metadata": metadata}


# ---------------------------------------------------------------------------- states


def test_transition_table_is_kafkas():
    assert {
        GroupState.EMPTY: {PR},
        PR: {GroupState.STABLE, CR, GroupState.EMPTY},
        CR: {PR},
        GroupState.STABLE: {CR},
        GroupState.DEAD: set(GroupState),
    } == VALID_PREVIOUS_STATES


@pytest.mark.parametrize("source", list(GroupState))
@pytest.mark.parametrize("target", list(GroupState))
def test_transition_to_asserts_the_table_and_stamps_the_time(source, target):
    group = ClassicGroup("g", now_ms=5)
    group.state = source
    if source in VALID_PREVIOUS_STATES[target]:
        group.transition_to(target, 42)
        assert (group.previous_state, group.state, group.state_timestamp_ms) == (source, target, 42)
    else:
        with pytest.raises(AssertionError, match=f"before moving to {target.value}"):
            group.transition_to(target, 42)
        assert (group.state, group.state_timestamp_ms) == (source, 5)


def test_state_values_are_kafkas_names():
    assert [s.value for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


# ---------------------------------------------------------------------------- joining


def test_member_id_required_dance_then_initial_delay():
    h = Harness()
    first = h.join(client="c")
    assert h.answer(first) == _join_error(E.member_id_required, "c-1")
    assert h.group().state is GroupState.EMPTY
    assert h.group().pending_join_members == {"c-1"}

    second = h.join("c-1", client="c")
    assert h.answer(second) is None  # parked: the initial rebalance waits 2 s
    assert h.group().state is PR
    assert h.groups.next_deadline() == 2_000
    h.sleep(1_999)
    assert h.answer(second) is None
    h.sleep(1)
    assert h.answer(second) == _join_ok("c-1", 1, "c-1", [_member("c-1")])
    assert h.group().state is CR


def test_member_id_reservation_expires_after_the_session_timeout():
    h = Harness()
    h.join(client="c", session=7_000)
    assert h.groups.next_deadline() == 7_000
    h.sleep(7_000)
    assert h.group().pending_join_members == set()
    assert h.answer(h.join("c-1", client="c")) == _join_error(E.unknown_member_id, "c-1")


def test_join_without_member_id_before_v4_is_added_at_once():
    h = Harness()
    rid = h.join(client="c", require_known=False)
    assert h.answer(rid) is None
    assert list(h.group().members) == ["c-1"]
    h.sleep(2_000)
    assert h.answer(rid) == _join_ok("c-1", 1, "c-1", [_member("c-1")])


def test_two_members_join_sync_and_become_stable():
    h = Harness()
    a, join_a = h.dance("c")
    b, join_b = h.dance("d")
    h.sleep_until(2_000)  # d arrived during the delay: it is extended once
    assert (h.answer(join_a), h.answer(join_b)) == (None, None)
    assert h.groups.next_deadline() == 4_000
    h.sleep_until(4_000)
    assert h.answer(join_a) == _join_ok(a, 1, a, [_member(a), _member(b)])
    assert h.answer(join_b) == _join_ok(b, 1, a)
    assert h.group().state is CR
    assert h.heartbeat(b, 1) == E.none  # heartbeats are fine while awaiting the assignment

    sync_b = h.sync(b, 1)
    assert h.answer(sync_b) is None  # the follower waits for the leader's assignment
    sync_a = h.sync(a, 1, {a: asg({"t": [0, 1]}), b: asg({"t": [2, 3]}), "stranger": b"x"})
    assert h.answer(sync_a) == _sync_ok(asg({"t": [0, 1]}))
    assert h.answer(sync_b) == _sync_ok(asg({"t": [2, 3]}))
    assert h.group().state is GroupState.STABLE
    assert (h.heartbeat(a, 1), h.heartbeat(b, 1)) == (E.none, E.none)
    # A follower syncing again in Stable gets its assignment at once.
    assert h.answer(h.sync(b, 1)) == _sync_ok(asg({"t": [2, 3]}))


def test_leader_sync_without_an_assignment_for_a_member_gives_it_empty_bytes():
    h = Harness()
    _a, b = h.stable_pair(assignment_a=b"A", assignment_b=b"")
    assert h.group().members[b].assignment == b""
    assert h.answer(h.sync(b, 1)) == _sync_ok(b"")


def test_initial_delay_batches_joiners_up_to_the_rebalance_timeout():
    h = Harness()
    joins = {}
    for at, client in [(0, "a"), (1_000, "b"), (3_000, "c"), (4_500, "d")]:
        h.sleep_until(at)
        joins[client] = h.dance(client, rebalance=5_000)
        if client == "a":
            assert h.groups.next_deadline() == 2_000  # delay 2000, 3000 of the rebalance timeout left
        if client == "b":
            assert h.groups.next_deadline() == 2_000
        if client == "c":
            assert h.groups.next_deadline() == 4_000  # extended by the delay: 1000 left
        if client == "d":
            assert h.groups.next_deadline() == 5_000  # extended by what was left: nothing left
    assert not h.answers
    h.sleep_until(5_000)
    ids = [member_id for member_id, _ in joins.values()]
    assert ids == ["a-1", "b-2", "c-3", "d-4"]
    for _member_id, rid in joins.values():
        assert h.answer(rid)["generation_id"] == 1
    assert list(h.group().members) == ids


def test_initial_rebalance_without_new_members_waits_one_delay():
    h = Harness(initial_rebalance_delay_ms=3_000)
    _, rid = h.dance("a")
    assert h.groups.next_deadline() == 3_000
    h.sleep_until(2_999)
    assert h.answer(rid) is None
    h.sleep_until(3_000)
    assert h.answer(rid)["generation_id"] == 1


def test_third_member_triggers_a_rebalance_that_completes_when_all_rejoined():
    h = Harness()
    a, b = h.stable_pair()
    h.sleep_until(5_000)
    c, join_c = h.dance("e")
    assert c == "e-3"
    assert h.answer(join_c) is None
    assert h.group().state is PR
    assert h.groups.next_deadline() == 14_000  # sessions; the rebalance times out at 35000
    assert h.heartbeat(a, 1) == E.rebalance_in_progress
    assert h.answer(h.sync(b, 1)) == _sync_error(E.rebalance_in_progress)

    join_a = h.join(a, client="c")
    assert h.answer(join_a) is None
    join_b = h.join(b, client="d")  # the last one: the join phase completes at once
    assert h.answer(join_a) == _join_ok(a, 2, a, [_member(a), _member(b), _member(c)])
    assert h.answer(join_b) == _join_ok(b, 2, a)
    assert h.answer(join_c) == _join_ok(c, 2, a)
    assert h.group().state is CR
    assert h.heartbeat(a, 1) == E.illegal_generation
    assert h.heartbeat(a, 2) == E.none


def test_rebalance_timeout_removes_dynamic_members_that_did_not_rejoin():
    h = Harness()
    a, b = h.stable_pair()
    h.sleep_until(5_000)
    c, join_c = h.dance("e")
    h.sleep_until(6_000)
    join_a = h.join(a, client="c")
    for t in range(9_000, 35_000, 5_000):  # b stays alive but never rejoins
        h.sleep_until(t)
        assert h.heartbeat(b, 1) == E.rebalance_in_progress
    h.sleep_until(34_999)
    assert h.answer(join_a) is None
    h.sleep_until(35_000)
    assert h.answer(join_a) == _join_ok(a, 2, a, [_member(a), _member(c)])
    assert h.answer(join_c) == _join_ok(c, 2, a)
    assert list(h.group().members) == [a, c]
    assert h.heartbeat(b, 1) == E.unknown_member_id


def test_rebalance_timeout_with_no_dynamic_member_rejoined_empties_the_group():
    h = Harness()
    a, b = h.stable_pair()
    h.sleep_until(5_000)
    join_a = h.join(a, client="c")  # the leader rejoins: rebalance until 35000 ...
    h.leave((a, None))  # ... then leaves; b keeps heartbeating but never rejoins
    assert h.answer(join_a) == _join_error(E.unknown_member_id, "")
    for t in range(9_000, 35_000, 5_000):
        h.sleep_until(t)
        assert h.heartbeat(b, 1) == E.rebalance_in_progress
    h.sleep_until(35_000)
    group = h.group()
    assert (group.state, group.generation_id, group.members, group.leader_id) == (GroupState.EMPTY, 2, {}, None)


def test_rebalance_with_nobody_rejoined_waits_another_rebalance_timeout():
    h = Harness()
    a, b = _static_pair(h)
    h.sleep_until(5_000)
    c, _ = h.dance("e")  # a dynamic member joins (rebalance until 35000) and leaves again
    h.leave((c, None))
    for t in range(9_000, 40_000, 5_000):  # the static members heartbeat but do not rejoin
        h.sleep_until(t)
        assert h.heartbeat(a, 1, instance="ia") == E.rebalance_in_progress
        assert h.heartbeat(b, 1, instance="ib") == E.rebalance_in_progress
    # At 35000 nobody had rejoined: static members are kept and the phase waits until 65000.
    assert (h.group().state, list(h.group().members)) == (PR, [a, b])
    h.sleep_until(40_000)
    join_a = h.join(a, client="c", instance="ia")
    for t in range(44_000, 65_000, 5_000):
        h.sleep_until(t)
        h.heartbeat(b, 1, instance="ib")
    h.sleep_until(64_999)
    assert h.answer(join_a) is None
    h.sleep_until(65_000)
    assert h.answer(join_a) == _join_ok(a, 2, a, [_member(a, instance="ia"), _member(b, instance="ib")])
    assert list(h.group().members) == [a, b]


def test_leader_that_does_not_rejoin_is_replaced_by_a_member_that_did():
    h = Harness()
    a, b = h.stable_pair()
    h.sleep_until(5_000)
    _, join_c = h.dance("e")
    join_b = h.join(b, client="d")
    for t in range(9_000, 35_000, 5_000):
        h.sleep_until(t)
        h.heartbeat(a, 1)
    h.sleep_until(35_000)
    assert h.answer(join_b)["leader"] == b
    assert h.answer(join_c)["leader"] == b
    assert h.group().leader_id == b


# ---------------------------------------------------------------------------- sessions


def test_session_timeout_removes_a_silent_member_and_rebalances():
    h = Harness()
    a, b = h.stable_pair()  # sessions restarted by the sync responses at 4000
    h.sleep_until(9_000)
    assert h.heartbeat(a, 1) == E.none
    h.sleep_until(13_999)
    assert list(h.group().members) == [a, b]
    h.sleep_until(14_000)
    assert list(h.group().members) == [a]
    assert h.group().state is PR
    assert h.heartbeat(b, 1) == E.unknown_member_id
    assert h.heartbeat(a, 1) == E.rebalance_in_progress
    join_a = h.join(a, client="c")
    assert h.answer(join_a) == _join_ok(a, 2, a, [_member(a)])


def test_heartbeats_keep_a_member_alive():
    h = Harness()
    a, b = h.stable_pair()
    for t in range(9_000, 60_000, 9_000):
        h.sleep_until(t)
        assert h.heartbeat(a, 1) == E.none
        assert h.heartbeat(b, 1) == E.none
    assert h.group().state is GroupState.STABLE
    assert h.groups.next_deadline() == 54_000 + 10_000


def test_member_parked_in_join_is_not_expired():
    h = Harness()
    a, b = h.stable_pair()
    h.sleep_until(5_000)
    join_a = h.join(a, client="c", protocols=(("range", sub("t", "u")),))  # new metadata: rebalance
    assert h.group().state is PR
    for t in range(9_000, 30_000, 5_000):
        h.sleep_until(t)
        assert h.heartbeat(b, 1) == E.rebalance_in_progress
    # a's session deadline (14000) passed while its join was parked: spared.
    assert list(h.group().members) == [a, b]
    join_b = h.join(b, client="d")
    assert h.answer(join_a)["generation_id"] == 2
    assert h.answer(join_b)["generation_id"] == 2
    # Its session runs again from the join response.
    h.sleep_until(29_000 + 10_000)
    assert a not in h.group().members


def test_new_member_parked_in_join_expires_after_the_new_member_join_timeout():
    h = Harness(new_member_join_timeout_ms=8_000)
    a, b = h.stable_pair()
    h.sleep_until(5_000)
    _c, join_c = h.dance("e", rebalance=60_000)
    for t in range(6_000, 14_000, 3_000):
        h.sleep_until(t)
        h.heartbeat(a, 1)
        h.heartbeat(b, 1)
    h.sleep_until(13_000)
    assert h.answer(join_c) == _join_error(E.unknown_member_id, "")
    assert list(h.group().members) == [a, b]
    assert h.group().state is PR


def test_pending_member_holds_the_join_phase_until_it_joins_or_expires():
    h = Harness()
    a, b = h.stable_pair()
    h.sleep_until(5_000)
    join_a = h.join(a, client="c")  # the leader rejoins: rebalance
    assert h.answer(h.join(client="e", session=8_000)) == _join_error(E.member_id_required, "e-3")
    join_b = h.join(b, client="d")
    assert (h.answer(join_a), h.answer(join_b)) == (None, None)  # e-3 may still join
    h.sleep_until(12_999)
    assert h.answer(join_a) is None
    h.sleep_until(13_000)
    assert h.answer(join_a) == _join_ok(a, 2, a, [_member(a), _member(b)])
    assert h.answer(join_b) == _join_ok(b, 2, a)


def test_heartbeat_during_preparing_rebalance_restarts_the_session():
    h = Harness()
    _a, b = h.stable_pair()
    h.sleep_until(5_000)
    h.dance("e")
    h.sleep_until(13_000)
    assert h.heartbeat(b, 1) == E.rebalance_in_progress
    h.sleep_until(22_999)
    assert b in h.group().members
    h.sleep_until(23_000)
    assert b not in h.group().members


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout():
    h = Harness()
    a, join_a = h.dance("c", rebalance=20_000)
    b, join_b = h.dance("d", rebalance=20_000)
    h.sleep_until(4_000)
    h.answer(join_a), h.answer(join_b)
    sync_a = h.sync(a, 1, {a: b"A", b: b"B"})
    assert h.answer(sync_a) == _sync_ok(b"A")
    for t in range(8_000, 24_001, 4_000):  # b heartbeats but never syncs
        h.sleep_until(t)
        assert h.heartbeat(b, 1) == (E.none if t < 24_000 else E.unknown_member_id)
        h.heartbeat(a, 1)
    assert list(h.group().members) == [a]
    assert h.group().state is PR


# ---------------------------------------------------------------------------- CompletingRebalance / Stable joins


def test_join_with_same_metadata_while_completing_returns_the_current_generation():
    h = Harness()
    a, join_a = h.dance("c")
    b, join_b = h.dance("d")
    h.sleep_until(4_000)
    h.answer(join_a), h.answer(join_b)
    assert h.answer(h.join(a, client="c")) == _join_ok(a, 1, a, [_member(a), _member(b)])
    assert h.answer(h.join(b, client="d")) == _join_ok(b, 1, a)
    assert h.group().state is CR


def test_join_with_new_metadata_while_completing_rebalances_and_fails_parked_syncs():
    h = Harness()
    a, join_a = h.dance("c")
    b, join_b = h.dance("d")
    h.sleep_until(4_000)
    h.answer(join_a), h.answer(join_b)
    sync_b = h.sync(b, 1)
    join_b2 = h.join(b, client="d", protocols=(("range", sub("t", "u")),))
    assert h.answer(sync_b) == _sync_error(E.rebalance_in_progress)
    assert h.group().state is PR
    join_a2 = h.join(a, client="c")
    assert h.answer(join_a2)["generation_id"] == 2
    assert h.answer(join_b2)["generation_id"] == 2


def test_follower_join_with_same_metadata_in_stable_changes_nothing():
    h = Harness()
    a, b = h.stable_pair()
    assert h.answer(h.join(b, client="d")) == _join_ok(b, 1, a)
    assert h.group().state is GroupState.STABLE


def test_leader_join_in_stable_forces_a_rebalance():
    h = Harness()
    a, b = h.stable_pair()
    join_a = h.join(a, client="c")
    assert h.answer(join_a) is None
    assert h.group().state is PR
    assert h.heartbeat(b, 1) == E.rebalance_in_progress


def test_cooperative_rebalance_members_keep_their_partitions():
    """cooperative-sticky: revoke first (generation 2), reassign after the immediate rejoin (generation 3)."""
    coop = "cooperative-sticky"

    def protocols(owned):
        return ((coop, sub("t", owned={"t": owned} if owned else None)),)

    h = Harness()
    a, join_a = h.dance("c", protocols=protocols([]))
    h.sleep_until(2_000)
    assert h.answer(join_a)["generation_id"] == 1
    h.sync(a, 1, {a: asg({"t": [0, 1, 2, 3]})}, protocol_name=coop)

    h.sleep_until(3_000)
    b, join_b = h.dance("d", protocols=protocols([]))
    assert h.heartbeat(a, 1) == E.rebalance_in_progress
    join_a = h.join(a, client="c", protocols=protocols([0, 1, 2, 3]))
    response = h.answer(join_a)
    assert response["generation_id"] == 2 and response["protocol_name"] == coop
    assert response["members"] == [
        _member(a, sub("t", owned={"t": [0, 1, 2, 3]})),
        _member(b, sub("t")),
    ]
    assert h.answer(join_b)["generation_id"] == 2
    # The leader revokes 2 and 3 from itself and gives them to nobody yet.
    sync_b = h.sync(b, 2, protocol_name=coop)
    h.sync(a, 2, {a: asg({"t": [0, 1]}), b: asg({})}, protocol_name=coop)
    assert h.answer(sync_b) == _sync_ok(asg({}), coop)
    assert [c.assignment for c in h.groups.consumers()] == [{"t": (0, 1)}, {}]

    # Having revoked partitions, the leader rejoins at once; b follows.
    join_a = h.join(a, client="c", protocols=protocols([0, 1]))
    assert h.group().state is PR
    assert h.heartbeat(b, 2) == E.rebalance_in_progress
    join_b = h.join(b, client="d", protocols=protocols([]))
    assert h.answer(join_a)["generation_id"] == 3
    assert h.answer(join_b)["generation_id"] == 3
    sync_a = h.sync(a, 3, {a: asg({"t": [0, 1]}), b: asg({"t": [2, 3]})}, protocol_name=coop)
    sync_b = h.sync(b, 3, protocol_name=coop)
    assert h.answer(sync_a) == _sync_ok(asg({"t": [0, 1]}), coop)
    assert h.answer(sync_b) == _sync_ok(asg({"t": [2, 3]}), coop)
    assert [(c.member_id, c.state, c.assignment) for c in h.groups.consumers()] == [
        (a, "ready", {"t": (0, 1)}),
        (b, "ready", {"t": (2, 3)}),
    ]


# ---------------------------------------------------------------------------- protocol selection


def test_protocol_selection_takes_the_most_voted_protocol_all_members_support():
    h = Harness()
    members = [
        ("a", (("range", b"ra"), ("roundrobin", b"rr-a"))),
        ("b", (("roundrobin", b"rr-b"), ("range", b"rb"))),
        ("c", (("sticky", b"s"), ("roundrobin", b"rr-c"), ("range", b"rc"))),
    ]
    rids = [h.dance(client, protocols=protocols)[1] for client, protocols in members]
    h.sleep_until(6_000)
    leader = h.answer(rids[0])
    assert leader["protocol_name"] == "roundrobin"  # sticky is not supported by all; 2 votes to 1
    assert [m["metadata"] for m in leader["members"]] == [b"rr-a", b"rr-b", b"rr-c"]


def test_protocol_selection_tie_goes_to_the_first_protocol_voted_for():
    h = Harness()
    _, join_a = h.dance("a", protocols=(("range", b""), ("roundrobin", b"")))
    h.dance("b", protocols=(("roundrobin", b""), ("range", b"")))
    h.sleep_until(4_000)
    assert h.answer(join_a)["protocol_name"] == "range"


def test_join_with_no_common_protocol_is_inconsistent():
    h = Harness()
    a, _b = h.stable_pair()
    assert h.answer(h.join(client="e", protocols=(("roundrobin", b""),))) == _join_error(
        E.inconsistent_group_protocol, ""
    )
    assert h.answer(h.join(a, client="c", protocols=(("roundrobin", b""),))) == _join_error(
        E.inconsistent_group_protocol, a
    )
    assert h.answer(h.join(client="e", protocol_type="connect")) == _join_error(E.inconsistent_group_protocol, "")
    assert h.group().state is GroupState.STABLE


def test_first_join_needs_a_protocol_type_and_protocols():
    h = Harness()
    assert h.answer(h.join(protocols=())) == _join_error(E.inconsistent_group_protocol, "")
    assert h.answer(h.join(protocol_type="")) == _join_error(E.inconsistent_group_protocol, "")
    assert h.group().state is GroupState.EMPTY


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("session", "error"),
    [
        (5_999, E.invalid_session_timeout),
        (1_800_001, E.invalid_session_timeout),
        (6_000, E.member_id_required),
        (1_800_000, E.member_id_required),
    ],
)
def test_session_timeout_bounds(session, error):
    h = Harness()
    assert h.answer(h.join(session=session)) == _join_error(error, "c-1" if error == E.member_id_required else "")
    assert (h.groups.group("g") is None) == (error == E.invalid_session_timeout)


def test_configured_session_timeout_bounds():
    h = Harness(min_session_timeout_ms=1_000, max_session_timeout_ms=2_000)
    assert h.answer(h.join(session=999))["error_code"] == E.invalid_session_timeout
    assert h.answer(h.join(session=2_000))["error_code"] == E.member_id_required


def test_empty_group_id_is_invalid_everywhere():
    h = Harness()
    assert h.answer(h.join(group="")) == _join_error(E.invalid_group_id, "")
    assert h.answer(h.sync("m", 1, group="")) == _sync_error(E.invalid_group_id)
    assert h.heartbeat("m", 1, group="") == E.invalid_group_id
    assert h.leave(("m", None), group="") == {"error_code": E.invalid_group_id, "members": []}


def test_requests_to_an_unknown_group():
    h = Harness()
    assert h.answer(h.join("m-1")) == _join_error(E.unknown_member_id, "m-1")
    assert h.groups.group("g") is None
    assert h.answer(h.sync("m-1", 1)) == _sync_error(E.unknown_member_id)
    assert h.heartbeat("m-1", 1) == E.unknown_member_id
    assert h.leave(("m-1", None), ("", "i")) == {
        "error_code": E.none,
        "members": [
            {"member_id": "m-1", "group_instance_id": None, "error_code": E.unknown_member_id},
            {"member_id": "", "group_instance_id": "i", "error_code": E.unknown_member_id},
        ],
    }


def test_requests_from_unknown_members_and_wrong_generations():
    h = Harness()
    a, _b = h.stable_pair()
    assert h.answer(h.join("ghost-9", client="g")) == _join_error(E.unknown_member_id, "ghost-9")
    assert h.answer(h.sync("ghost-9", 1)) == _sync_error(E.unknown_member_id)
    assert h.heartbeat("ghost-9", 1) == E.unknown_member_id
    assert h.answer(h.sync(a, 2)) == _sync_error(E.illegal_generation)
    assert h.heartbeat(a, 0) == E.illegal_generation
    assert h.answer(h.sync(a, 1, protocol_name="roundrobin")) == _sync_error(E.inconsistent_group_protocol)
    assert h.answer(h.sync(a, 1, protocol_type="connect")) == _sync_error(E.inconsistent_group_protocol)
    assert h.answer(h.sync(a, 1, protocol_type=None, protocol_name=None)) == _sync_ok(b"A")
    assert h.group().state is GroupState.STABLE


def test_sync_to_an_empty_group_is_unknown_member():
    h = Harness()
    a, b = h.stable_pair()
    h.leave((a, None), (b, None))
    assert h.group().state is GroupState.EMPTY
    assert h.answer(h.sync(a, 2)) == _sync_error(E.unknown_member_id)
    assert h.answer(h.join(a, client="c")) == _join_error(E.unknown_member_id, a)


def test_group_max_size():
    h = Harness(max_group_size=2)
    a, b = h.stable_pair()
    assert h.answer(h.join(client="e", require_known=False)) == _join_error(E.group_max_size_reached, "")
    assert list(h.group().members) == [a, b]
    assert h.answer(h.join(b, client="d"))["error_code"] == E.none  # existing members still rejoin


def test_group_max_size_during_preparing_rebalance_counts_rejoined_members():
    h = Harness(max_group_size=1)
    a, join_a = h.dance("c")
    assert h.answer(h.join(client="d", require_known=False)) == _join_error(E.group_max_size_reached, "")
    assert list(h.group().members) == [a]
    h.sleep_until(2_000)
    assert h.answer(join_a)["generation_id"] == 1


def test_pending_member_cannot_join_with_an_instance_id():
    h = Harness()
    h.join(client="c")
    assert h.answer(h.join("c-1", instance="i")) == _join_error(E.unknown_server_error, "")
    assert h.group().members == {}


# ---------------------------------------------------------------------------- LeaveGroup


def test_leave_triggers_a_rebalance_of_the_others():
    h = Harness()
    a, b = h.stable_pair()
    assert h.leave((b, None)) == {
        "error_code": E.none,
        "members": [{"member_id": b, "group_instance_id": None, "error_code": E.none}],
    }
    assert h.group().state is PR
    assert h.heartbeat(a, 1) == E.rebalance_in_progress
    assert h.answer(h.join(a, client="c")) == _join_ok(a, 2, a, [_member(a)])


def test_leave_of_the_last_parked_member_completes_the_join_phase():
    h = Harness()
    a, b = h.stable_pair()
    join_a = h.join(a, client="c")
    assert h.answer(join_a) is None
    h.leave((b, None))
    assert h.answer(join_a) == _join_ok(a, 2, a, [_member(a)])


def test_leave_answers_the_leavers_parked_join():
    h = Harness()
    a, b = h.stable_pair()
    join_a = h.join(a, client="c")
    h.leave((a, None))
    assert h.answer(join_a) == _join_error(E.unknown_member_id, "")
    assert h.group().leader_id == b


def test_leave_answers_the_leavers_parked_sync():
    h = Harness()
    _a, _join_a = h.dance("c", instance="ia")
    b, _join_b = h.dance("d", instance="ib")
    h.sleep_until(4_000)
    sync_b = h.sync(b, 1, instance="ib")
    h.leave(("", "ib"))  # an admin removes the static member by instance id
    assert h.answer(sync_b) == _sync_error(E.unknown_member_id)
    assert h.group().state is PR


def test_batched_leave_with_per_member_errors():
    h = Harness()
    a, _join_a = h.dance("c", instance="ia")
    assert a == "ia-1"
    b, _join_b = h.dance("d")
    h.join(client="e")  # a pending member, e-3
    h.sleep_until(4_000)
    response = h.leave((b, None), ("ghost", None), ("", "ia"), ("", "nobody"), ("e-3", None), (b, None))
    assert [m["error_code"] for m in response["members"]] == [
        E.none,
        E.unknown_member_id,
        E.none,
        E.unknown_member_id,
        E.none,
        E.unknown_member_id,
    ]
    assert h.group().members == {} and h.group().pending_join_members == set()
    assert h.group().state is GroupState.EMPTY and h.group().generation_id == 2


def test_leave_with_a_fenced_instance_id():
    h = Harness()
    h.dance("c", instance="ia")
    response = h.leave(("ia-old", "ia"))
    assert response["members"] == [
        {"member_id": "ia-old", "group_instance_id": "ia", "error_code": E.fenced_instance_id}
    ]
    assert list(h.group().members) == ["ia-1"]


def test_all_members_leaving_makes_the_group_empty_and_next_join_is_delayed_again():
    h = Harness()
    a, b = h.stable_pair()
    h.leave((a, None), (b, None))
    group = h.group()
    assert (group.state, group.generation_id, group.protocol_name, group.leader_id) == (
        GroupState.EMPTY,
        2,
        None,
        None,
    )
    h.sleep_until(10_000)
    c, join_c = h.dance("e")
    assert h.groups.next_deadline() == 12_000
    h.sleep_until(12_000)
    assert h.answer(join_c) == _join_ok(c, 3, c, [_member(c)])


# ---------------------------------------------------------------------------- static membership


def _static_pair(h: Harness) -> tuple[str, str]:
    a, join_a = h.dance("c", instance="ia")
    b, join_b = h.dance("d", instance="ib")
    h.sleep_until(4_000)
    h.answer(join_a), h.answer(join_b)
    sync_b = h.sync(b, 1, instance="ib")
    h.sync(a, 1, {a: b"A", b: b"B"}, instance="ia")
    h.answer(sync_b)
    h.answers.clear()
    return a, b


def test_static_members_join_without_member_id_required():
    h = Harness()
    rid = h.join(client="c", instance="ia")
    assert h.answer(rid) is None
    assert list(h.group().members) == ["ia-1"]
    assert h.group().static_members == {"ia": "ia-1"}


def test_static_member_restart_takes_its_place_without_rebalance_and_fences_the_old_id():
    h = Harness()
    a, b = _static_pair(h)
    assert (a, b) == ("ia-1", "ib-2")
    h.sleep_until(5_000)
    rid = h.join(client="c2", instance="ia")
    # Pre-v9 clients are told the old leader id, so the restarted leader just syncs.
    assert h.answer(rid) == _join_ok("ia-3", 1, "ia-1")
    group = h.group()
    assert (group.state, group.generation_id, group.leader_id) == (GroupState.STABLE, 1, "ia-3")
    assert group.static_members == {"ia": "ia-3", "ib": "ib-2"}
    assert h.heartbeat(a, 1, instance="ia") == E.fenced_instance_id
    assert h.heartbeat(a, 1) == E.unknown_member_id
    assert h.answer(h.sync(a, 1, instance="ia")) == _sync_error(E.fenced_instance_id)
    assert h.answer(h.join(a, client="c", instance="ia")) == _join_error(E.fenced_instance_id, a)
    assert h.answer(h.sync("ia-3", 1, instance="ia")) == _sync_ok(b"A")
    assert h.heartbeat("ia-3", 1, instance="ia") == E.none
    assert h.heartbeat(b, 1, instance="ib") == E.none
    assert group.members["ia-3"].client_id == "c"  # the member keeps its identity


def test_static_leader_restart_on_v9_is_told_to_skip_the_assignment():
    h = Harness()
    _a, b = _static_pair(h)
    rid = h.join(client="c", instance="ia", skip=True)
    assert h.answer(rid) == _join_ok(
        "ia-3", 1, "ia-3", [_member(b, instance="ib"), _member("ia-3", instance="ia")], skip_assignment=True
    )
    rid = h.join(client="d", instance="ib", skip=True)
    assert h.answer(rid) == _join_ok("ib-4", 1, "ia-3")


def test_static_member_restart_with_another_protocol_rebalances():
    h = Harness()
    two = (("range", SUB_T), ("roundrobin", SUB_T))
    a, _join_a = h.dance("c", instance="ia", protocols=two)
    b, _join_b = h.dance("d", instance="ib", protocols=two)
    h.sleep_until(4_000)
    h.sync(a, 1, {a: b"A", b: b"B"}, instance="ia")
    rid = h.join(client="c", instance="ia", protocols=(("roundrobin", SUB_T),))
    assert h.answer(rid) is None
    assert h.group().state is PR


def test_static_member_restart_fences_its_parked_join():
    h = Harness()
    a, b = _static_pair(h)
    join_a = h.join(a, client="c", instance="ia")  # the leader rejoins: rebalance
    assert h.group().state is PR
    join_new = h.join(client="c", instance="ia")
    assert h.answer(join_a) == _join_error(E.fenced_instance_id, a)
    assert h.answer(join_new) is None
    join_b = h.join(b, client="d", instance="ib")
    assert h.answer(join_new) == _join_ok(
        "ia-3", 2, "ia-3", [_member(b, instance="ib"), _member("ia-3", instance="ia")]
    )
    assert h.answer(join_b) == _join_ok(b, 2, "ia-3")


def test_static_member_restart_while_completing_rebalances_again():
    h = Harness()
    _a, _join_a = h.dance("c", instance="ia")
    b, _join_b = h.dance("d", instance="ib")
    h.sleep_until(4_000)
    sync_b = h.sync(b, 1, instance="ib")
    rid = h.join(client="c", instance="ia")
    assert h.answer(sync_b) == _sync_error(E.rebalance_in_progress)
    assert h.answer(rid) is None
    assert h.group().state is PR


def test_static_members_are_kept_when_they_miss_the_rebalance_timeout():
    h = Harness()
    a, b = _static_pair(h)
    h.sleep_until(5_000)
    join_a = h.join(a, client="c", instance="ia")
    for t in range(9_000, 35_000, 5_000):
        h.sleep_until(t)
        h.heartbeat(b, 1, instance="ib")
    h.sleep_until(35_000)
    assert h.answer(join_a) == _join_ok(a, 2, a, [_member(a, instance="ia"), _member(b, instance="ib")])
    assert list(h.group().members) == [a, b]


# ---------------------------------------------------------------------------- admin APIs and SHOW CONSUMERS


def test_describe_groups():
    h = Harness()
    a, b = h.stable_pair(assignment_a=asg({"t": [0]}), assignment_b=asg({"t": [1]}))
    offsets = {"only-offsets"}
    described = h.groups.describe(
        ["g", "nope", "only-offsets"], has_offsets=offsets.__contains__, report_not_found=True
    )
    member = {"group_instance_id": None, "client_host": "/10.0.0.1", "member_metadata": SUB_T}
    assert described == [
        {
            "error_code": E.none,
            "error_message": None,
            "group_id": "g",
            "group_state": "Stable",
            "protocol_type": "consumer",
            "protocol_data": "range",
            "members": [
                {"member_id": a, "client_id": "c", "member_assignment": asg({"t": [0]}), **member},
                {"member_id": b, "client_id": "d", "member_assignment": asg({"t": [1]}), **member},
            ],
        },
        {
            "error_code": E.group_id_not_found,
            "error_message": "Group nope not found.",
            "group_id": "nope",
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        },
        {
            "error_code": E.none,
            "error_message": None,
            "group_id": "only-offsets",
            "group_state": "Empty",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        },
    ]
    old = h.groups.describe(["nope"], has_offsets=offsets.__contains__, report_not_found=False)
    assert (old[0]["error_code"], old[0]["group_state"]) == (E.none, "Dead")

    h.join(a, client="c")
    rebalancing = h.groups.describe(["g"], has_offsets=offsets.__contains__, report_not_found=True)[0]
    assert (rebalancing["group_state"], rebalancing["protocol_data"]) == ("PreparingRebalance", "")
    assert [(m["member_metadata"], m["member_assignment"]) for m in rebalancing["members"]] == [
        (b"", asg({"t": [0]})),
        (b"", asg({"t": [1]})),
    ]


def test_list_groups_with_filters():
    h = Harness()
    h.stable_pair()
    h.dance("x", group="g2")
    everything = h.groups.list_groups(offset_groups=["old", "g"])
    assert everything == [
        {"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"},
        {"group_id": "g2", "protocol_type": "consumer", "group_state": "PreparingRebalance", "group_type": "classic"},
        {"group_id": "old", "protocol_type": "", "group_state": "Empty", "group_type": "classic"},
    ]
    assert [
        g["group_id"] for g in h.groups.list_groups(states_filter=[" STABLE ", "empty"], offset_groups=["old"])
    ] == [
        "g",
        "old",
    ]
    assert h.groups.list_groups(types_filter=["Classic"]) == everything[:2]
    assert h.groups.list_groups(types_filter=["consumer"]) == []
    assert h.groups.list_groups(states_filter=["dead"]) == []


def test_delete_groups():
    h = Harness()
    h.join(group="empty", client="e")  # MEMBER_ID_REQUIRED leaves an Empty group with a pending member
    h.stable_pair()
    assert h.groups.next_deadline() == 10_000
    results = h.groups.delete(
        ["g", "empty", "nope", "only-offsets", "empty"], has_offsets={"only-offsets"}.__contains__, now_ms=h.now
    )
    assert results == [
        {"group_id": "g", "error_code": E.non_empty_group},
        {"group_id": "empty", "error_code": E.none},
        {"group_id": "nope", "error_code": E.group_id_not_found},
        {"group_id": "only-offsets", "error_code": E.none},
    ]
    assert h.groups.group("empty") is None
    assert h.groups.next_deadline() == 14_000  # the pending member's timer went with its group
    assert h.answer(h.join("e-1", group="empty", client="e")) == _join_error(E.unknown_member_id, "e-1")


def test_remove_empty_groups_keeps_groups_with_members_or_offsets():
    h = Harness()
    h.stable_pair()
    for group in ("a", "b"):
        h.join(group=group, protocols=())  # refused, but the group was created (as in Kafka)
    assert h.groups.remove_empty_groups(has_offsets={"b"}.__contains__, now_ms=h.now) == ["a"]
    assert [g["group_id"] for g in h.groups.list_groups()] == ["g", "b"]


def test_remove_empty_groups_keeps_a_group_whose_new_member_is_about_to_rejoin():
    h = Harness()
    h.join(group="new", client="c")  # MEMBER_ID_REQUIRED: the client rejoins with its member id at once
    assert h.groups.remove_empty_groups(has_offsets=lambda g: False, now_ms=h.now) == []
    h.sleep_until(h.groups.next_deadline())  # it never did: the reservation expires
    assert h.groups.remove_empty_groups(has_offsets=lambda g: False, now_ms=h.now) == ["new"]


def test_consumers_snapshot_for_show_consumers():
    h = Harness()
    a, b = h.stable_pair(assignment_a=asg({"t": [0, 2]}), assignment_b=b"\x00\x00\x00\x00\x00\x09")
    h.sleep_until(6_000)
    h.heartbeat(a, 1)
    h.dance("z", group="other", protocol_type="connect", protocols=(("v1", b"cfg"),))
    infos = h.groups.consumers()
    assert [(i.group_id, i.member_id, i.client_id, i.state, i.assignment, i.last_heartbeat_ms) for i in infos] == [
        ("g", a, "c", "ready", {"t": (0, 2)}, 6_000),
        ("g", b, "d", "ready", None, 4_000),  # assignment bytes that do not parse
        ("other", "z-3", "z", "rebalancing", None, 6_000),
    ]
    assert (infos[0].group_state, infos[0].generation_id, infos[0].session_timeout_ms) == ("Stable", 1, 10_000)
    h.join(a, client="c")
    assert [i.state for i in h.groups.consumers()][:2] == ["rebalancing", "rebalancing"]


def test_follower_that_has_not_synced_is_still_rebalancing():
    h = Harness()
    a, _join_a = h.dance("c")
    b, _join_b = h.dance("d")
    h.sleep_until(4_000)
    h.sync(a, 1, {a: asg({"t": [0]}), b: asg({"t": [1]})})
    assert [(i.member_id, i.state) for i in h.groups.consumers()] == [(a, "ready"), (b, "rebalancing")]
    h.sync(b, 1)
    assert [(i.member_id, i.state) for i in h.groups.consumers()] == [(a, "ready"), (b, "ready")]


def test_groups_are_independent():
    h = Harness()
    _a, _b = h.stable_pair()
    x, join_x = h.dance("x", group="g2")
    h.sleep_until(15_000)  # g's members stay silent: both expire at 14000
    assert h.answer(join_x)["generation_id"] == 1
    assert (h.group("g").state, h.group("g").generation_id, h.group("g").members) == (GroupState.EMPTY, 2, {})
    assert (h.group("g2").state, list(h.group("g2").members)) == (CR, [x])


def test_default_member_ids_are_client_id_dash_uuid4():
    groups = ClassicGroups()
    (completion,) = groups.join(
        "r",
        group_id="g",
        member_id="",
        group_instance_id=None,
        client_id="console-consumer",
        client_host="/127.0.0.1",
        protocol_type="consumer",
        protocols=RANGE,
        session_timeout_ms=45_000,
        rebalance_timeout_ms=300_000,
        require_known_member_id=True,
        now_ms=0,
    )
    member_id = completion.response["member_id"]
    assert re.fullmatch(
        r"console-consumer-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", member_id
    )
