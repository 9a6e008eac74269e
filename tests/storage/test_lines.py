"""Checksummed JSON lines (``lines.py``): what is a record, a bad line, a torn tail (issue 13, item 6)."""

from __future__ import annotations

import pytest

from walgate.storage import lines

A, B = lines.encode({"a": 1}), lines.encode({"b": "x" * 40})


def test_a_torn_tail_is_at_most_one_partial_record():
    for cut in range(1, len(B) - 1):
        scan = lines.scan(A + B[:cut])
        assert [r for _, _, r in scan.records] == [{"a": 1}] and scan.bad == [] and scan.complete == len(A)


@pytest.mark.parametrize("tail", [bytes(100), B[:20] + bytes(30), b"\x00" + B[:-1], b"garbage"])
def test_a_tail_that_is_no_partial_record_is_a_bad_line(tail: bytes):
    scan = lines.scan(A + tail)
    assert [(b.start, b.end, b.repaired) for b in scan.bad] == [(len(A), len(A) + len(tail), False)]
    assert scan.complete == len(A) + len(tail) and [r for _, _, r in scan.records] == [{"a": 1}]


@pytest.mark.parametrize("bit", range(8))
def test_a_record_whose_newline_is_damaged_is_kept(bit: int):
    scan = lines.scan(A + B[:-1] + bytes([B[-1] ^ 1 << bit]))
    assert [r for _, _, r in scan.records] == [{"a": 1}, {"b": "x" * 40}]
    assert [(b.start, b.repaired) for b in scan.bad] == [(len(A), True)] and scan.complete == len(A) + len(B)


def test_the_checksum_is_read_strictly():
    """int() would take " 1abc..." or "1ABC..." for the same number: a flipped bit there would go unseen."""
    line = A[:-1]
    assert lines.decode(line) == {"a": 1}
    for i in range(8):
        for bit in range(8):
            bad = bytearray(line)
            bad[i] ^= 1 << bit
            with pytest.raises(ValueError):
                lines.decode(bytes(bad))
