"""walgate/wire/messages.py: generated from the installed schemas, and what decode_view makes of every version."""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire_helpers import instances

from walgate.wire import messages, messages_gen
from walgate.wire.errors import WireError
from walgate.wire.protocol import (
    WIRE_VERSIONS,
    RequestHeader,
    decode_request,
    decode_view,
    encode_request,
    parse_request_header,
    request_class,
)
from walgate.wire.serial import fields_of

ALL_VERSIONS = [(key, v) for key, (low, high) in sorted(WIRE_VERSIONS.items()) for v in range(low, high + 1)]


def test_generated_module_is_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    # stale after kio, wire/legacy.py or WIRE_VERSIONS change: run `python -m walgate.wire.messages_gen`
    assert messages_gen.main(["--check"]) == 0, capsys.readouterr().err
    assert set(messages.REQUESTS) == set(WIRE_VERSIONS) and messages.VERSIONS == WIRE_VERSIONS


def _same(view: Any, kio: Any, where: str) -> None:
    """*view* holds each field of *kio* (recursively); its other fields hold the view's defaults."""
    assert dataclasses.is_dataclass(view), where
    had = {info.name: info for info in fields_of(type(kio))}
    for f in dataclasses.fields(view):
        got = getattr(view, f.name)
        at = f"{where}.{f.name}"
        if f.name not in had:
            assert got == f.default, at
            continue
        want = getattr(kio, f.name)
        if had[f.name].entity is None or want is None:
            assert got == want and type(got) is type(want), at
        elif had[f.name].array:
            assert len(got) == len(want), at
            for i, (g, w) in enumerate(zip(got, want)):
                _same(g, w, f"{at}[{i}]")
        else:
            _same(got, want, at)


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_view_holds_every_field_of_every_version(api_key: int, version: int, data: st.DataObject) -> None:
    value = data.draw(instances(request_class(api_key, version)))
    frame = encode_request(api_key, version, 1, "views", value)[4:]
    header = parse_request_header(frame)
    view = decode_view(header, frame)
    assert type(view) is messages.REQUESTS[api_key]
    _same(view, decode_request(header, frame), f"{type(view).__name__} v{version}")


def test_a_field_the_version_lacks_reads_as_kafka_defaults_it() -> None:
    # Metadata v3 has no allow_auto_topic_creation (v4+): Kafka's default is true; Fetch v4 has no replica_state
    # (v15+, replica_id before): its replica_id is -1 either way
    metadata = request_class(3, 3)(topics=None)
    frame = encode_request(3, 3, 1, None, metadata)[4:]
    view = decode_view(parse_request_header(frame), frame)
    assert view.allow_auto_topic_creation is True and view.include_topic_authorized_operations is False
    assert view.topics is None
    old = request_class(1, 4)(replica_id=-1, max_wait=timedelta(milliseconds=500), min_bytes=1, max_bytes=1 << 20,
                              isolation_level=1, topics=())
    frame = encode_request(1, 4, 1, None, old)[4:]
    fetch = decode_view(parse_request_header(frame), frame)
    assert fetch.replica_state == messages.FetchRequestReplicaState(replica_id=-1, replica_epoch=-1)
    assert fetch.max_wait == timedelta(milliseconds=500) and fetch.isolation_level == 1
    assert fetch.session_id == 0 and fetch.session_epoch == -1 and fetch.rack_id == ""


@pytest.mark.parametrize(("api_key", "version"), [(1, 12), (3, 12), (0, 9), (2, 0)])
def test_garbage_decodes_to_wire_errors_only(api_key: int, version: int) -> None:
    rng = random.Random(api_key * 100 + version)
    header = RequestHeader(api_key, version, 1, None, 0)
    for _ in range(500):
        try:
            decode_view(header, bytes(rng.randrange(256) for _ in range(rng.randrange(80))))
        except WireError:
            pass
