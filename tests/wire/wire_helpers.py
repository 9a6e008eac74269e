"""Shared test helpers: Hypothesis strategies for kio-style schema dataclasses, golden-file access."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial.readers import tz_aware_from_i64

from walgate.wire.serial import FieldInfo, fields_of

GOLDEN = Path(__file__).parent / "golden"

_INTS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)


def _scalar(info: FieldInfo) -> st.SearchStrategy[Any]:
    kind = info.kind
    if kind in _INTS:
        return st.integers(*_INTS[kind])
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "string":
        return _TEXT
    if kind in ("bytes", "records"):
        return st.binary(max_size=40)
    if kind == "uuid":
        return st.none() | st.uuids().filter(lambda u: u.int != 0)
    if kind == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kind == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kind == "timedelta_i64":
        return st.integers(-(2**45), 2**45).map(lambda ms: datetime.timedelta(milliseconds=ms))
    if kind == "datetime_i64":
        return st.integers(0, 2**41).map(tz_aware_from_i64)
    if kind == "entity":
        assert info.entity is not None
        return instances(info.entity)
    raise AssertionError(kind)


def _field(info: FieldInfo) -> st.SearchStrategy[Any]:
    if info.array:
        item = _scalar(info)
        if info.kind == "uuid":
            item = st.uuids().filter(lambda u: u.int != 0)
        values: st.SearchStrategy[Any] = st.lists(item, max_size=3).map(tuple)
    else:
        values = _scalar(info)
    return st.none() | values if info.nullable else values


_CACHE: dict[type, st.SearchStrategy[Any]] = {}


def instances(cls: type) -> st.SearchStrategy[Any]:
    """Random valid instances of a kio-style schema dataclass."""
    strategy = _CACHE.get(cls)
    if strategy is None:
        strategy = st.builds(cls, **{info.name: _field(info) for info in fields_of(cls)})
        _CACHE[cls] = strategy
    return strategy


def golden_frames() -> list[dict[str, Any]]:
    """Every captured request frame: dicts with client, api_key, api_version, hex, expect."""
    frames = []
    for path in sorted(GOLDEN.glob("*.json")):
        capture = json.loads(path.read_text())
        for entry in capture["frames"]:
            frames.append({"file": path.name, "client": capture["client"], **entry})
    return frames
