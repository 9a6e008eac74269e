"""The control plane's pure model: keys, stored values, the registration and election rules, the record cursor."""

from __future__ import annotations

import dataclasses

import pytest

from walgate.cluster.etcd import parse_endpoints
from walgate.cluster.model import (
    ControlPlaneError,
    Keys,
    NodeInfo,
    RecordCursor,
    RecordGap,
    RegistrationRefused,
    check_registration,
    decode_record,
    decode_snapshot,
    encode_record,
    encode_snapshot,
    leader_key,
    uses_tls,
)


def test_keys_sort_records_by_sequence_and_reject_bad_cluster_ids() -> None:
    keys = Keys("prod-1")
    assert keys.node(3) == b"/walgate/prod-1/nodes/3"
    assert keys.candidate(255) == b"/walgate/prod-1/controller/00000000000000ff"
    assert sorted([keys.record(10), keys.record(9), keys.record(100)]) == [keys.record(9), keys.record(10),
                                                                          keys.record(100)]
    assert keys.record_seq(keys.record(12345)) == 12345
    with pytest.raises(ValueError):
        keys.record_seq(Keys("other").record(1))
    for bad in ("", "a/b", "x" * 65):
        with pytest.raises(ValueError):
            Keys(bad)


def test_values_round_trip_and_foreign_values_are_errors() -> None:
    info = NodeInfo(2, "ab" * 16, ("127.0.0.1:9092",), "r1", "http://127.0.0.1:6041")
    assert NodeInfo.decode(info.encode()) == info
    old = b'{"endpoints": [], "incarnation": "%s", "node_id": 3, "rack": null}' % (b"cd" * 16)
    assert NodeInfo.decode(old) == NodeInfo(3, "cd" * 16), "a registration of a node before SQL forwarding: no URL"
    assert decode_record(encode_record(17, b"x\ny")) == (17, b"x\ny")
    assert decode_snapshot(encode_snapshot(5, b"")) == (5, b"")
    for bad, decode in ((b"{}", NodeInfo.decode), (b"null", NodeInfo.decode), (b"[1]", NodeInfo.decode),
                        (b"nope", decode_record), (b"x\n", decode_snapshot)):
        with pytest.raises(ControlPlaneError):
            decode(bad)


def test_a_controlled_shutdown_mark_round_trips_and_is_absent_from_a_node_not_shutting_down() -> None:
    info = NodeInfo(2, "ab" * 16, ("PLAINTEXT://127.0.0.1:9092",), None, "http://127.0.0.1:6041")
    assert b"shutting_down" not in info.encode(), "a registration reads the same to a node not knowing the mark"
    marked = dataclasses.replace(info, shutting_down=True)
    assert NodeInfo.decode(marked.encode()) == marked and marked.shutting_down
    with pytest.raises(ControlPlaneError, match="not a boolean"):
        NodeInfo.decode(marked.encode().replace(b"true", b'"yes"'))


def test_internal_api_versions_round_trip_and_an_older_registration_answers_version_0_of_walfetch_only() -> None:
    info = NodeInfo(1, "inc", ("PLAINTEXT://h:1",))
    assert b"internal" not in info.encode() and (info.internal_version(10001), info.internal_version(10002)) == (0, -1)
    newer = dataclasses.replace(info, internal=((10001, 1), (10002, 3)))
    assert NodeInfo.decode(newer.encode()) == newer
    assert (newer.internal_version(10001), newer.internal_version(10002), newer.internal_version(10003)) == (1, 3, -1)
    with pytest.raises(ControlPlaneError):
        NodeInfo.decode(newer.encode().replace(b'"10001": 1', b'"10001": "x"'))


def test_registration_rule() -> None:
    mine, other = "a" * 32, "b" * 32
    assert check_registration(1, mine, None, None) is False  # first registration
    assert check_registration(1, mine, mine, None) is False  # a restart after the lease expired
    assert check_registration(1, mine, mine, NodeInfo(1, mine)) is True  # a restart before: revoke the old one
    with pytest.raises(RegistrationRefused, match="must not serve as its old self"):
        check_registration(1, other, mine, None)  # an emptied data dir
    with pytest.raises(RegistrationRefused, match="another live node"):
        check_registration(1, other, None, NodeInfo(1, mine))


def test_the_oldest_candidate_leads() -> None:
    assert leader_key([]) is None
    assert leader_key([(b"b", 9), (b"a", 12), (b"c", 7)]) == (b"c", 7)


def test_cursor_applies_once_in_order_and_reports_gaps() -> None:
    cursor = RecordCursor()
    assert cursor.accept(1, 5)
    cursor.advance(1, 5)
    assert not cursor.accept(1, 5)  # a resumed watch sees it again
    assert cursor.accept(2, 6)
    cursor.advance(2, 6)
    with pytest.raises(RecordGap):
        cursor.accept(4, 9)
    assert (cursor.seq, cursor.revision) == (2, 6)


def test_endpoints() -> None:
    assert parse_endpoints("http://127.0.0.1:2379, 10.0.0.2:22379/") == [("127.0.0.1", 2379), ("10.0.0.2", 22379)]
    assert parse_endpoints("https://h:1,https://g:2") == [("h", 1), ("g", 2)]
    assert not uses_tls("http://127.0.0.1:2379, 10.0.0.2:22379/") and uses_tls("https://h:1, https://g:2")
    for bad in ("", "127.0.0.1", "https://h", "h:x"):
        with pytest.raises(ValueError):
            parse_endpoints(bad)
    with pytest.raises(ValueError, match="all https:// or none"):
        uses_tls("https://h:1,g:2")


def test_membership_names_the_live_nodes_the_known_ones_and_the_controller() -> None:
    from walgate.cluster.model import membership

    n2 = NodeInfo(2, "b" * 32, ("PLAINTEXT://h2:9092",))
    n1 = NodeInfo(1, "a" * 32, ("PLAINTEXT://h1:9092",))
    view = membership([n2.encode(), n1.encode()], [3, 1],
                      [(b"k-late", 20, b"2 11"), (b"k-early", 12, b"1 10")])
    assert view.nodes == (n1, n2) and view.known == (1, 2, 3) and view.controller == 1
    assert membership([], [], []).controller is None
    with pytest.raises(ControlPlaneError):
        membership([], [], [(b"k", 1, b"not-a-node")])


def test_endpoint_for_picks_the_listener_asked_for_else_the_first() -> None:
    from walgate.cluster.model import endpoint_for

    info = NodeInfo(1, "a" * 32, ("PLAINTEXT://h:9092", "SSL://h-tls:9093"))
    assert endpoint_for(info, "SSL") == ("h-tls", 9093)
    assert endpoint_for(info, "SASL_SSL") == ("h", 9092)
    assert endpoint_for(NodeInfo(1, "a" * 32, ()), "SSL") is None
