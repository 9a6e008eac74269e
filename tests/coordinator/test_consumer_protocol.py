"""The bounded consumer-protocol decoders, checked against kio's encoder."""

from __future__ import annotations

import contextlib
import struct

import pytest
from coordinator_helpers import asg, sub
from hypothesis import given
from hypothesis import strategies as st

from walgate.coordinator import ConsumerProtocolError, assigned_partitions, subscribed_topics


@pytest.mark.parametrize("version", [0, 1, 3, 7])
def test_subscribed_topics_reads_the_v0_prefix_of_any_version(version):
    metadata = sub("t", "ünïcode", owned={"t": [0, 1]}, version=version)
    assert subscribed_topics(metadata) == frozenset({"t", "ünïcode"})


def test_subscription_without_topics():
    assert subscribed_topics(sub()) == frozenset()


def test_assigned_partitions():
    assert assigned_partitions(asg({"t": [0, 2], "u": [5]})) == {"t": (0, 2), "u": (5,)}
    assert assigned_partitions(asg({})) == {}
    assert assigned_partitions(b"") == {}


def test_assignment_listing_a_topic_twice_is_merged():
    body = struct.pack(">hi", 0, 2) + struct.pack(">h1sii", 1, b"t", 1, 0) + struct.pack(">h1sii", 1, b"t", 1, 3)
    assert assigned_partitions(body + struct.pack(">i", -1)) == {"t": (0, 3)}


@pytest.mark.parametrize(
    "metadata",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00\x00\x00",  # topic count truncated
        b"\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",  # null topics array
        b"\x00\x00\x7f\xff\xff\xff",  # 2^31-1 topics in 0 bytes: refused before allocating
        b"\x00\x00\x00\x00\x00\x01\xff\xff",  # null topic name
        b"\x00\x00\x00\x00\x00\x01\x00\x05ab",  # truncated topic name
        b"\x00\x00\x00\x00\x00\x00",  # user_data missing
        b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05ab",  # truncated user_data
    ],
)
def test_bad_subscriptions_raise(metadata):
    with pytest.raises(ConsumerProtocolError):
        subscribed_topics(metadata)


@pytest.mark.parametrize(
    "assignment",
    [
        b"\x00",
        b"\x00\x00\x7f\xff\xff\xff",
        b"\x00\x00\x00\x00\x00\x01\x00\x01t\x7f\xff\xff\xff",
        b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00",
    ],
)
def test_bad_assignments_raise(assignment):
    with pytest.raises(ConsumerProtocolError):
        assigned_partitions(assignment)


@given(st.binary(max_size=64))
def test_any_bytes_parse_or_raise_consumer_protocol_error(data):
    for decode in (subscribed_topics, assigned_partitions):
        with contextlib.suppress(ConsumerProtocolError):
            decode(data)


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.lists(st.integers(0, 2**31 - 1), max_size=5), max_size=4))
def test_assignment_round_trip_with_kio(partitions):
    assert assigned_partitions(asg(partitions)) == {t: tuple(p) for t, p in partitions.items()}
