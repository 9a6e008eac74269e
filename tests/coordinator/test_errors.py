"""The coordinator's error mapping table."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from walgate.coordinator import (
    ERROR_CODES,
    FencedInstanceId,
    GroupError,
    GroupIdNotFound,
    GroupNotRecorded,
    IllegalGeneration,
    NonEmptyGroup,
    NotCoordinatorNow,
    RebalanceInProgress,
    UnknownMemberId,
)


def test_each_group_error_maps_to_its_kafka_code():
    assert {cls.__name__: int(code) for cls, code in ERROR_CODES.items()} == {
        "GroupError": -1,
        "UnknownMemberId": 25,
        "FencedInstanceId": 82,
        "IllegalGeneration": 22,
        "RebalanceInProgress": 27,
        "GroupIdNotFound": 69,
        "NonEmptyGroup": 68,
        "GroupNotRecorded": 15,
        "NotCoordinatorNow": 16,
        "ConsumerProtocolError": 23,
        "AckError": 121,
    }
    for cls in (
        UnknownMemberId,
        FencedInstanceId,
        IllegalGeneration,
        RebalanceInProgress,
        GroupIdNotFound,
        NonEmptyGroup,
        GroupNotRecorded,
        NotCoordinatorNow,
    ):
        assert issubclass(cls, GroupError)
        assert cls("why").error_code is ERROR_CODES[cls]


def test_base_class_is_an_unknown_server_error():
    assert GroupError.error_code is ErrorCode.unknown_server_error
