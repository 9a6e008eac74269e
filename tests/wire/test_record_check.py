"""check_records in C (walgate/wire/_record_check.c) gives the answers of its pure-Python walk, message for message.

The extension is built by setup.py (``pip install -e .`` or ``python setup.py build_ext --inplace``); a machine
with a C compiler must have it, so its absence fails here rather than silently testing Python against itself.
"""

from __future__ import annotations

import random

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walgate.wire import record_batch
from walgate.wire.errors import InvalidRecord
from walgate.wire.record_batch import encode_batch

native = record_batch._c_check_records


def python_answer(batch: bytes, sequential: bool) -> str | None:
    try:
        record_batch._python_check_records(batch, sequential)
    except InvalidRecord as exc:
        return str(exc)
    return None


def same_answer(batch: bytes) -> str | None:
    """Both walks' answer for *batch*, sequential or not (asserted equal)."""
    assert native is not None, "walgate.wire._record_check is not built: python setup.py build_ext --inplace"
    for sequential in (False, True):
        want = python_answer(batch, sequential)
        assert native(batch, sequential) == want, (batch.hex(), sequential)
        assert native(memoryview(batch), sequential) == want
    return python_answer(batch, True)


def sample_batches() -> list[bytes]:
    """Valid batches covering one-, two- and many-byte varints, null and empty keys and values, headers."""
    big = b"v" * 70_000  # a three-byte length varint
    return [
        encode_batch(0, [1], [None], [b"x"]),
        encode_batch(0, [5, 6, 7], [b"k", None, b""], [b"a" * 100, None, b""]),
        encode_batch(0, [0, 10**12], [None, b"k" * 9000], [big, b"y"], [[("h", b"1")], [("\u00e9t\u00e9", None)]]),
        encode_batch(0, [3, 1, 2], [None] * 3, [b"v"] * 3, [[("a", b"b"), ("c", b"")], [], [("d" * 200, b"e" * 300)]]),
        encode_batch(0, [9, 9], [None] * 2, [b"v"] * 2, offset_deltas=[0, 5]),
        encode_batch(0, [9, 9], [None] * 2, [b"v"] * 2, offset_deltas=[0, -70_000]),
    ]


def test_valid_batches_pass_both():
    for batch in sample_batches():
        assert python_answer(batch, False) is None
        same_answer(batch)


def test_each_refusal_is_the_same():
    ok = encode_batch(0, [1, 2], [None, None], [b"ab", b"cd"], [[("k", b"v")], []])
    count = ok[57:61]
    cases = {
        "short": ok[:60],
        "compressed": ok[:22] + bytes([ok[22] | 1]) + ok[23:],
        "count one more": ok[:57] + (2 + 1).to_bytes(4, "big") + ok[61:],
        "count one less": ok[:57] + (2 - 1).to_bytes(4, "big") + ok[61:],
        "count negative": ok[:57] + (-1).to_bytes(4, "big", signed=True) + ok[61:],
        "trailing byte": ok + b"\0",
        "truncated": ok[:-1],
        "record length 5": ok[:61] + b"\x0a" + ok[62:],
        "record length too long": ok[:61] + b"\x7e" + ok[62:],
        "11-byte length": ok[:61] + b"\xff" * 10 + b"\x01" + ok[62:],
        "10-byte length then end": ok[:57] + count + b"\xff" * 10,
        "11-byte timestamp": ok[:63] + b"\x80" * 10 + ok[63:],
        "bad header key": ok.replace(b"\x02k\x02v", b"\x02\xff\x02v"),
        "surrogate header key": ok.replace(b"\x02k\x02v", b"\x06\xed\xa0\x80\x02v"),
        "header key overruns": ok.replace(b"\x02k\x02v", b"\x7ek\x02v"),
        "header key negative": ok.replace(b"\x02k\x02v", b"\x03k\x02v"),
        "header value overruns": ok.replace(b"\x02k\x02v", b"\x02k\x7ev"),
        "header count": ok.replace(b"\x02\x02k\x02v", b"\x7e\x02k\x02v"),
        "header count negative": ok.replace(b"\x02\x02k\x02v", b"\x01\x02k\x02v"),
        "key overruns": ok[:66] + b"\x7e" + ok[67:],
    }
    answers = {name: same_answer(data) for name, data in cases.items()}
    assert all(answers.values()), answers
    assert len(set(answers.values())) >= 12  # the cases reach different checks, not one catch-all
    assert same_answer(encode_batch(0, [9, 9], [None] * 2, [b"v"] * 2, offset_deltas=[0, 5])) == \
        "record offset deltas must be 0, 1, 2, ..."


def test_public_check_records_raises_the_native_message():
    bad = encode_batch(0, [1], [None], [b"x"]) + b"\0"
    with pytest.raises(InvalidRecord, match="1 bytes left after 1 records"):
        record_batch.check_records(bad)


def test_random_damage_gets_the_same_answer():
    rng = random.Random(15)
    for batch in sample_batches():
        for _ in range(400):
            data = bytearray(batch)
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(61, len(data))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            if rng.random() < 0.3:
                del data[rng.randrange(61, len(data)):]
            same_answer(bytes(data))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200), st.integers(-3, 20))
def test_arbitrary_records_get_the_same_answer(records: bytes, count: int):
    header = bytearray(encode_batch(0, [1], [None], [b"x"])[:61])
    header[57:61] = count.to_bytes(4, "big", signed=True)
    data = bytes(header) + records
    data = data[:17] + crc32c.crc32c(data[21:]).to_bytes(4, "big") + data[21:]
    same_answer(data)
