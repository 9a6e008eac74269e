"""FrameReader: any chunking of a byte stream yields the same frames; bad sizes are caught early."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.wire.errors import FrameTooLarge, MalformedFrame
from walgate.wire.framing import BIG_FRAME, FrameReader, frame


def _stream(bodies: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(body)) + body for body in bodies)


@settings(max_examples=300, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300) | st.integers(BIG_FRAME, BIG_FRAME + 5000).map(lambda n: b"b" * n),
                    max_size=8),
    data=st.data(),
)
def test_any_chunking_yields_the_same_frames(bodies, data):
    stream = _stream(bodies)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    kind = data.draw(st.sampled_from([bytes, bytearray, memoryview]))
    reader = FrameReader(10**7)
    frames = []
    start = 0
    for cut in sorted(set(cuts)) + [len(stream)]:
        frames += reader.feed(kind(stream[start:cut]))
        start = cut
    assert frames == bodies
    assert all(type(f) is bytes for f in frames)
    assert reader.buffered == 0


def test_partial_frames_wait_for_more():
    reader = FrameReader(100)
    assert reader.feed(b"\x00\x00") == []
    assert reader.feed(b"\x00\x03ab") == []
    assert reader.buffered == 6
    assert reader.feed(b"c\x00\x00\x00\x00") == [b"abc", b""]


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300) | st.integers(BIG_FRAME, BIG_FRAME + 5000).map(lambda n: b"b" * n),
                    min_size=1, max_size=5),
    data=st.data(),
)
def test_next_size_names_the_incomplete_frame_and_only_its_bytes_are_held(bodies, data):
    stream = _stream(bodies)
    starts = [sum(4 + len(b) for b in bodies[:i]) for i in range(len(bodies) + 1)]
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))) + [len(stream)]
    reader = FrameReader(10**7)
    start = 0
    for cut in cuts:
        reader.feed(stream[start:cut])
        start = cut
        frame_start = max(s for s in starts if s <= cut)  # the frame being received begins here
        assert cut - frame_start - 4 <= reader.buffered <= cut - frame_start  # (a big frame's size bytes are not kept)
        i = starts.index(frame_start)
        expected = len(bodies[i]) if i < len(bodies) and cut - frame_start >= 4 else None
        assert reader.next_size == expected


def test_too_large_is_raised_from_the_size_alone():
    reader = FrameReader(1000)
    with pytest.raises(FrameTooLarge) as info:
        reader.feed(struct.pack(">i", 1001))
    assert info.value.size == 1001
    assert FrameReader(1000).feed(struct.pack(">i", 1000) + b"x" * 1000) == [b"x" * 1000]


def test_negative_size_is_malformed():
    with pytest.raises(MalformedFrame):
        FrameReader(1000).feed(struct.pack(">i", -5))


def test_big_frame_in_small_pieces_is_linear():
    """10 MiB arriving in 4 KiB reads: must not copy the partial frame on every read."""
    size = 10 * 1024 * 1024
    data = _stream([b"z" * size])
    reader = FrameReader(size)
    started = time.perf_counter()
    frames = [f for i in range(0, len(data), 4096) for f in reader.feed(data[i : i + 4096])]
    elapsed = time.perf_counter() - started
    assert frames == [b"z" * size]
    assert elapsed < 1.0  # quadratic copying would take minutes


def test_many_small_frames_in_one_read():
    bodies = [bytes([i % 256]) * (i % 50) for i in range(20000)]
    assert FrameReader(100).feed(_stream(bodies)) == bodies


def test_frame_prepends_the_total_size():
    chunks = [b"ab", bytearray(b"cde"), memoryview(b"fghi")]
    out = frame(chunks)
    assert out[0] == struct.pack(">i", 9) and out[1:] == chunks
    assert frame([]) == [b"\x00\x00\x00\x00"]
