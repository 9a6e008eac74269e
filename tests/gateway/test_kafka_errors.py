"""The error-mapping tables of the Kafka handlers: one per domain, merged in handlers/common.py (issues 13, 23).

Every public exception class of walgate.storage, walgate.coordinator, walgate.security and walgate.wire (found by
walking their modules, so a new one is covered without a change here) must map to a Kafka error code through its own
domain's table, and through no other domain's: the one the class names (``error_code``) when it names one, else a
code other than UNKNOWN_SERVER_ERROR, which is kept for what no table knows. Every entry of every table must win over
its base classes' entries (most specific first).
"""

from __future__ import annotations

import errno
import importlib
import inspect
import logging
import pkgutil
from collections.abc import Mapping

import pytest

import walgate.coordinator
import walgate.security
import walgate.storage
import walgate.wire
from walgate.coordinator.consumer_membership import HeartbeatError
from walgate.gateway.kafka.handlers.common import (
    AUTO_CREATE,
    CREATE_PARTITIONS,
    DESCRIBE_CLIENT_QUOTAS,
    DOMAINS,
    ERRORS,
    GROUP_WRITE,
    INIT_PRODUCER_ID,
    PRODUCE,
    TRANSACTIONS,
    _merged,
    answered,
    error_of,
)
from walgate.gateway.kafka.handlers.produce import _refused
from walgate.storage.coordinator_records import UnknownRecordKind
from walgate.storage.errors import (
    AlreadyExists,
    InvalidValue,
    LimitExceeded,
    NotFound,
    NotHere,
    OffsetOutOfRange,
    RequestTooLarge,
    StorageUnavailable,
)
from walgate.storage.lanes import LaneViolation, Relane
from walgate.storage.meta_reader import ReaderGaveUp
from walgate.storage.producers import SequenceError
from walgate.storage.wal import CorruptEntry
from walgate.storage.write_plan import NeedTables
from walgate.wire.errors import CorruptRecord, ErrorCode, InvalidRecord, RecordTooLarge

E = ErrorCode


@pytest.mark.parametrize(
    ("exc", "overrides", "code"),
    [
        (NotFound("no topic"), {}, E.unknown_topic_or_partition),
        (OffsetOutOfRange("past the end"), {}, E.offset_out_of_range),
        (StorageUnavailable("disk full"), {}, E.kafka_storage_error),
        (OSError(errno.ENOSPC, "No space left on device"), {}, E.kafka_storage_error),
        (LimitExceeded("too many partitions"), {}, E.policy_violation),
        (InvalidValue("bad value"), {}, E.invalid_request),
        (AlreadyExists("exists"), {}, E.invalid_request),
        (CorruptEntry("checksum"), {}, E.corrupt_message),
        (CorruptRecord("crc"), {}, E.corrupt_message),
        (InvalidRecord("bad batch"), {}, E.invalid_record),
        (RecordTooLarge("big"), {}, E.message_too_large),
        # Produce: refused data is INVALID_RECORD, but a full disk stays KAFKA_STORAGE_ERROR
        (InvalidValue("bad row"), PRODUCE, E.invalid_record),
        (SequenceError(E.out_of_order_sequence_number, "gap"), PRODUCE, E.invalid_record),
        (RequestTooLarge("big request"), PRODUCE, E.record_list_too_large),
        (StorageUnavailable("disk full"), PRODUCE, E.kafka_storage_error),
        (NotFound("gone"), PRODUCE, E.unknown_topic_or_partition),
        (NotHere("vgroup 0 of database d is on node 5", 5), PRODUCE, E.not_leader_or_follower),
        (NotHere("vgroup 0 of database d is on node 5", 5), {}, E.not_leader_or_follower),
        # group coordinator writes: Kafka's storeOffsets maps KAFKA_STORAGE_ERROR to NOT_COORDINATOR
        (StorageUnavailable("disk full"), GROUP_WRITE, E.not_coordinator),
        (OSError(errno.EIO, "I/O error"), GROUP_WRITE, E.not_coordinator),
        (NotFound("gone"), GROUP_WRITE, E.unknown_topic_or_partition),
        (LimitExceeded("too many"), CREATE_PARTITIONS, E.invalid_partitions),
        (StorageUnavailable("disk full"), INIT_PRODUCER_ID, E.coordinator_load_in_progress),
    ],
)
def test_the_table(exc: BaseException, overrides: dict, code: ErrorCode) -> None:
    assert error_of(exc, overrides) == code


def test_every_entry_is_a_kafka_error_code() -> None:
    for table in (ERRORS, PRODUCE, GROUP_WRITE, CREATE_PARTITIONS, INIT_PRODUCER_ID, TRANSACTIONS, AUTO_CREATE,
                  DESCRIBE_CLIENT_QUOTAS):
        assert all(isinstance(code, ErrorCode) and code != E.none for code in table.values())


def _raise_at_one_place(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001
        return caught


def test_unexpected_exceptions_are_unknown_server_error_with_one_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="walgate.kafka")
    for _ in range(3):
        assert error_of(_raise_at_one_place(KeyError("dict changed size"))) == E.unknown_server_error
    records = [r for r in caplog.records if "UNKNOWN_SERVER_ERROR" in r.getMessage()]
    assert len(records) == 3 and all(r.levelno == logging.ERROR for r in records)
    assert [r.exc_info is not None for r in records] == [True, False, False]  # no traceback flood


def test_a_raw_oserror_is_one_warning_line_without_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="walgate.kafka")
    assert error_of(_raise_at_one_place(OSError(errno.EIO, "I/O error"))) == E.kafka_storage_error
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None and "KAFKA_STORAGE_ERROR" in record.getMessage()


async def test_answered_turns_a_failed_call_into_its_answer() -> None:
    async def ok() -> str:
        return "done"

    async def full_disk() -> str:
        raise StorageUnavailable("disk full")

    assert await answered(ok(), lambda code: f"failed {code.name}") == "done"
    assert await answered(full_disk(), lambda code: f"failed {code.name}", GROUP_WRITE) == "failed not_coordinator"


def _domain_exceptions() -> list[type[BaseException]]:
    """Every public exception class defined in a module of walgate.storage, walgate.coordinator, walgate.security or
    walgate.wire."""
    found = []
    for package in (walgate.storage, walgate.coordinator, walgate.security, walgate.wire):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            found += [cls for name, cls in vars(module).items()
                      if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module.__name__
                      and not name.startswith("_")]
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


DOMAIN_EXCEPTIONS = _domain_exceptions()
CARRY_THEIR_CODE = {HeartbeatError}
"""Exceptions whose Kafka error is chosen per instance where they are raised, and which their own module answers."""
SIGNALS = {ReaderGaveUp, NeedTables, Relane, LaneViolation, UnknownRecordKind}
"""Control flow, caught where they are raised for: a coordinator record's key of a kind a later version writes
(the replay of a replicated coordinator partition skips it with a warning, KIP-915); of the HTTP ingest path (a meta.db reader that cannot answer: the
vnode's own lookups; a planner that needs tables looked up: the node looks them up and plans again), of the storage
lane (a call on vnode lanes that needs the whole lane: its dispatcher runs it again); or a bug's report (a call on
vnode lanes touching what it does not hold), answered UNKNOWN_SERVER_ERROR and logged with its traceback as every
bug is. No Kafka handler meets them as a domain error."""

TABLES = {"ERRORS": {}, "PRODUCE": PRODUCE, "GROUP_WRITE": GROUP_WRITE, "CREATE_PARTITIONS": CREATE_PARTITIONS,
          "TRANSACTIONS": TRANSACTIONS, "AUTO_CREATE": AUTO_CREATE, "DESCRIBE_CLIENT_QUOTAS": DESCRIBE_CLIENT_QUOTAS,
          "INIT_PRODUCER_ID": INIT_PRODUCER_ID}


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance without calling its constructor (whose arguments differ): error_of looks at the type only."""
    return cls.__new__(cls)


def test_the_domain_exceptions_are_all_found() -> None:
    assert {NotFound, StorageUnavailable, SequenceError, CorruptEntry, CorruptRecord, RecordTooLarge,
            HeartbeatError} <= set(DOMAIN_EXCEPTIONS)
    assert len(DOMAIN_EXCEPTIONS) >= 30


@pytest.mark.parametrize("cls", [c for c in DOMAIN_EXCEPTIONS if c not in CARRY_THEIR_CODE | SIGNALS],
                         ids=lambda cls: f"{cls.__module__.removeprefix('walgate.')}.{cls.__qualname__}")
def test_every_domain_exception_maps_to_a_kafka_error_code(cls: type[BaseException]) -> None:
    code = error_of(_instance(cls))
    assert isinstance(code, ErrorCode)
    named = getattr(cls, "error_code", None)
    if named is not None:
        assert code == named
    else:
        assert code != E.unknown_server_error


@pytest.mark.parametrize("overrides", list(TABLES.values()), ids=list(TABLES))
def test_each_entry_wins_over_the_entries_of_its_base_classes(overrides: dict) -> None:
    for cls in {**ERRORS, **overrides}:
        assert error_of(_instance(cls), overrides) == overrides.get(cls, ERRORS.get(cls)), cls


def _domain_of(cls: type[BaseException]) -> str:
    """The domain an exception class belongs to: the package that defines it."""
    return cls.__module__.split(".")[1]


def _resolved(cls: type[BaseException], table: Mapping[type[BaseException], ErrorCode]) -> ErrorCode | None:
    """What ``table`` answers for ``cls``: its most specific entry along the MRO, None if none."""
    return next((table[c] for c in cls.__mro__ if c in table), None)


def test_each_domain_has_one_table() -> None:
    assert set(DOMAINS) == {_domain_of(cls) for cls in DOMAIN_EXCEPTIONS} == {"storage", "wire", "coordinator",
                                                                               "security"}


@pytest.mark.parametrize("cls", [c for c in DOMAIN_EXCEPTIONS if c not in CARRY_THEIR_CODE | SIGNALS],
                         ids=lambda cls: f"{cls.__module__.removeprefix('walgate.')}.{cls.__qualname__}")
def test_every_domain_exception_maps_to_exactly_one_code_in_its_own_domains_table(cls: type[BaseException]) -> None:
    own = DOMAINS[_domain_of(cls)]
    code = _resolved(cls, own)
    assert code is not None, f"{cls.__qualname__} is not in its domain's table"
    named = getattr(cls, "error_code", None)  # GroupError, the coordinator's base never raised, names UNKNOWN
    assert code == named if named is not None else code != E.unknown_server_error
    assert error_of(_instance(cls)) == code  # the merged table answers what its domain says
    listed = [domain for domain, table in DOMAINS.items() if cls in table]
    assert listed in ([], [_domain_of(cls)]), f"{cls.__qualname__} is listed by {listed}"


def test_the_merged_table_is_every_domains_table_and_nothing_else() -> None:
    assert dict(ERRORS) == {cls: code for table in DOMAINS.values() for cls, code in table.items()}
    assert sum(len(table) for table in DOMAINS.values()) == len(ERRORS)  # no class in two domains' tables


def test_a_class_in_two_domains_tables_is_refused() -> None:
    with pytest.raises(ValueError, match="NotFound"):
        _merged({"storage": {NotFound: E.unknown_topic_or_partition}, "other": {NotFound: E.invalid_request}})


def test_sequence_error_carries_its_code_and_produce_answers_it() -> None:
    exc = SequenceError(E.invalid_producer_epoch, "fenced")
    assert exc.error_code is E.invalid_producer_epoch
    assert _refused(3, exc, {})["error_code"] == E.invalid_producer_epoch
