"""The schemas generated for versions Kafka 4.0 removed, checked three independent ways."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.resources
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.old import admin, commit, list_offsets, offset_for_leader_epoch
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType
from wire_helpers import instances

from walgate.wire import legacy
from walgate.wire._kafka_json import DESCRIPTORS, SOURCES
from walgate.wire.serial import decoder, encoder, fields_of

KIO_NAMES = {
    "ListOffsets": "list_offsets", "OffsetCommit": "offset_commit", "OffsetFetch": "offset_fetch",
    "CreateTopics": "create_topics", "DeleteTopics": "delete_topics", "DescribeConfigs": "describe_configs",
    "OffsetForLeaderEpoch": "offset_for_leader_epoch",
}
KAFKA_PYTHON = {
    "ListOffsets": list_offsets, "OffsetCommit": commit, "OffsetFetch": commit, "CreateTopics": admin,
    "DeleteTopics": admin, "DescribeConfigs": admin, "OffsetForLeaderEpoch": offset_for_leader_epoch,
}
LEGACY = [(api, version, kind) for api, versions in legacy.LEGACY_VERSIONS.items() for version in versions
          for kind in ("Request", "Response")]


def _shape(cls: type) -> list[tuple[Any, ...]]:
    """What decides the bytes: name, wire kind, array-ness, nullability, nested shape."""
    return [
        (i.name, i.kind, i.array, i.nullable, i.tag, _shape(i.entity) if i.entity else None) for i in fields_of(cls)
    ]


def _kio_class(api: str, version: int, kind: str) -> type:
    path = schema_name_map[KIO_NAMES[api]][version][getattr(EntityType, kind.lower())]
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def test_every_descriptor_has_a_source_commit():
    assert DESCRIPTORS.keys() == SOURCES.keys()
    assert all(len(commit_id) == 40 for commit_id in SOURCES.values())


@pytest.mark.parametrize("api", sorted(legacy.LEGACY_VERSIONS))
def test_generator_agrees_with_kio_wherever_both_have_a_version(api):
    """Same conventions as kio's code generator: names, kafka types, nullability, defaults."""
    checked = 0
    for version in schema_name_map[KIO_NAMES[api]]:
        for kind in ("Request", "Response"):
            theirs = _kio_class(api, version, kind)
            if theirs.__flexible__ or not legacy._in_range(legacy.descriptor(api + kind)["validVersions"], version):
                continue
            if api == "DescribeConfigs" and version == 3:
                continue  # the vendored descriptor predates the released v3 layout; only v0 is used
            mine = legacy.generate(api + kind, version)
            assert _shape(mine) == _shape(theirs), (api, kind, version)
            checked += 1
    assert checked >= 2


@pytest.mark.parametrize(("api", "version", "kind"), LEGACY)
def test_vendored_descriptors_agree_with_kafka_pythons_copies(api, version, kind, monkeypatch):
    """kafka-python 3 ships Apache Kafka 4.x descriptors; their field ranges still describe v0/v1."""
    mine = legacy.generate(api + kind, version)
    text = importlib.resources.files("kafka.protocol.schemas.resources").joinpath(f"{api}{kind}.json").read_text()
    monkeypatch.setitem(DESCRIPTORS, api + kind, text)
    assert _shape(legacy.generate(api + kind, version)) == _shape(mine)


def _to_kafka_python(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return tuple(_to_kafka_python(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, tuple):
        return [_to_kafka_python(item) for item in value]
    if isinstance(value, ErrorCode):
        return int(value)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return value


def _kafka_python_class(api: str, version: int, kind: str) -> Any:
    return getattr(KAFKA_PYTHON[api], f"{api}{kind}_v{version}")


@pytest.mark.parametrize(("api", "version", "kind"), LEGACY)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_bytes_equal_kafka_pythons_hand_written_classes(api, version, kind, data):
    """kafka-python's 2.x-style protocol classes are written by hand, independently of the JSON."""
    cls = legacy.schemas(legacy.descriptor(f"{api}Request")["apiKey"], version)[kind == "Response"]
    value = data.draw(instances(cls))
    out: list[Any] = []
    mine = b"".join([*out, encoder(cls)(bytearray(), out, value)])
    theirs = _kafka_python_class(api, version, kind)(*_to_kafka_python(value)).encode()
    assert mine == theirs
    assert decoder(cls)(theirs, 0) == (value, len(theirs))


def test_known_v0_layouts():
    """Spot checks against the protocol guide: the fields that exist only in old versions."""
    list_offsets_v0 = legacy.schemas(2, 0)
    assert [i.name for i in fields_of(list_offsets_v0[0])] == ["replica_id", "topics"]
    partition = fields_of(fields_of(fields_of(list_offsets_v0[0])[1].entity)[1].entity)  # type: ignore[arg-type]
    assert [(i.name, i.default) for i in partition] == [
        ("partition_index", dataclasses.MISSING), ("timestamp", dataclasses.MISSING), ("max_num_offsets", 1)
    ]
    commit_v1 = fields_of(legacy.schemas(8, 1)[0])
    assert [i.name for i in commit_v1] == ["group_id", "generation_id_or_member_epoch", "member_id", "topics"]
    commit_partition = fields_of(fields_of(commit_v1[3].entity)[1].entity)  # type: ignore[arg-type]
    assert [i.name for i in commit_partition] == [
        "partition_index", "committed_offset", "commit_timestamp", "committed_metadata"
    ]
    describe_configs_v0 = fields_of(legacy.schemas(32, 0)[1])
    result = fields_of(fields_of(describe_configs_v0[1].entity)[4].entity)  # type: ignore[arg-type]
    assert "is_default" in [i.name for i in result] and "config_source" not in [i.name for i in result]


def test_only_non_flexible_versions_are_generated():
    with pytest.raises(ValueError, match="flexible"):
        legacy.generate("ListOffsetsRequest", 6)
    with pytest.raises(KeyError):
        legacy.schemas(2, 1)
