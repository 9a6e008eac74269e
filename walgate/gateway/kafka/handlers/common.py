"""Helpers shared by handlers: the one error-mapping table, the leader epoch decision, durations, the result of a
request that gets no response (:class:`Unanswered`).

Errors: a handler answers each partition / group / resource on its own. An
exception raised while serving one item becomes that item's error code
through :func:`error_of` and never leaves the handler, so one bad item
neither fails its siblings nor closes the connection. Each domain keeps its
own table next to its exceptions (``storage/errors.py``, ``wire/errors.py``,
``coordinator/errors.py``, ``security/errors.py``); :data:`ERRORS` is their
merge, done once here (a class in two tables is refused at import), looked up
most specific class first along the exception's MRO, and shared by every
handler. An API that answers differently passes overrides, each what Kafka
answers there:

* :data:`PRODUCE`: data the engine refuses is INVALID_RECORD, a request
  above its size limit RECORD_LIST_TOO_LARGE;
* :data:`GROUP_WRITE` (OffsetCommit, OffsetDelete, DeleteGroups): a refused
  write is NOT_COORDINATOR, as Kafka's group coordinator answers a
  KAFKA_STORAGE_ERROR of its offsets append (``GroupMetadataManager.storeOffsets``);
  clients find the coordinator again and retry;
* :data:`CREATE_PARTITIONS`: a limit is INVALID_PARTITIONS;
* :data:`INIT_PRODUCER_ID`: a refused write is COORDINATOR_LOAD_IN_PROGRESS,
  what Kafka's producer-id manager answers when it has no id to give (every
  client retries it);
* :data:`TRANSACTIONS` (the transaction APIs): a transaction log or producer id
  write the disk refused is COORDINATOR_NOT_AVAILABLE, as Kafka's transaction
  coordinator answers a failed append to its log; clients find the coordinator
  again and retry;
* :data:`AUTO_CREATE` (Metadata creating a topic it was asked for): a topic the
  engine refuses to create is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers a
  topic its auto-creation did not create;
* :data:`DESCRIBE_CLIENT_QUOTAS`: a filter naming an unknown entity type is
  UNSUPPORTED_VERSION (Kafka's ``ClientQuotasImage.describe``).

An exception the table does not know is UNKNOWN_SERVER_ERROR and a bug: it is
logged at ERROR, with its traceback the first time it is raised at that place
(one line after that, so a failing partition cannot flood the log). Handlers
whose answer is one coordinator call answer its failure with :func:`answered`.

Leader epoch: a partition of one copy has one leader forever, so its leader epoch is 0; a replicated one's is
its partition state's (issue 25). Metadata reports it, OffsetForLeaderEpoch
answers from the vnode's leader-epoch cache, and a request naming an older epoch gets FENCED_LEADER_EPOCH, a newer
one UNKNOWN_LEADER_EPOCH, as a Kafka leader answers (KIP-320: :class:`walgate.gateway.kafka.leaders.Reads`).
"""

from __future__ import annotations

import datetime
import logging
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Generic, NamedTuple, TypeVar

from walgate.coordinator.errors import ERROR_CODES as COORDINATOR_ERRORS
from walgate.security.errors import ERROR_CODES as SECURITY_ERRORS
from walgate.storage.errors import ERROR_CODES as STORAGE_ERRORS
from walgate.storage.errors import LimitExceeded, RequestTooLarge, StorageError, StorageUnavailable
from walgate.storage.partitions import LEADER_EPOCH
from walgate.storage.quotas import UnsupportedFilter
from walgate.wire.errors import ERROR_CODES as WIRE_ERRORS
from walgate.wire.errors import ErrorCode

__all__ = [
    "DOMAINS", "ERRORS", "PRODUCE", "GROUP_WRITE", "CREATE_PARTITIONS", "INIT_PRODUCER_ID", "TRANSACTIONS", "AUTO_CREATE",
    "DESCRIBE_CLIENT_QUOTAS", "LEADER_EPOCH", "Table", "Deferred", "Unanswered",
    "error_of", "answered", "millis",
]

T = TypeVar("T")


class Unanswered(NamedTuple):
    """A handler's result for a request that gets no response (Produce with ``acks=0``): ``fields`` are the answer
    it would have had. The server sends nothing; the request metrics count what the fields say was done (records
    appended per topic), not their error codes, and a ``throttle_time`` in them mutes the connection that long.
    ``refused`` names what was refused (empty when nothing was): the server then closes the connection, the only way
    a client that waits for no answer learns of an error (Kafka's ``handleProduceRequest`` with acks=0)."""

    fields: Mapping[str, Any]
    refused: str = ""


class Deferred(NamedTuple, Generic[T]):
    """A handler's result once what its request does is done in request order, its answer still to come (Produce:
    its appends made; their durability and high watermark still awaited): ``answer`` awaits the rest and gives the
    fields, or :class:`Unanswered`. The server reads and handles the connection's next Produce requests meanwhile
    and writes the answers in request order (:mod:`walgate.gateway.kafka.answer_order`), so that one replication
    round carries several requests' appends."""

    answer: Coroutine[Any, Any, T]


log = logging.getLogger("walgate.kafka")


Table = Mapping[type[BaseException], ErrorCode]

DOMAINS: Mapping[str, Table] = {"storage": STORAGE_ERRORS, "wire": WIRE_ERRORS, "coordinator": COORDINATOR_ERRORS,
                                  "security": SECURITY_ERRORS}
"""Each domain's table (exception class -> Kafka error code), kept next to its exceptions."""


def _merged(tables: Mapping[str, Table]) -> Table:
    """One table of every domain's; a class in two domains' tables would have two codes, and is refused."""
    merged: dict[type[BaseException], ErrorCode] = {}
    for domain, table in tables.items():
        if twice := merged.keys() & table.keys():
            raise ValueError(f"error codes of {sorted(c.__name__ for c in twice)} given twice (again by {domain})")
        merged.update(table)
    return merged


ERRORS: Table = _merged(DOMAINS)
PRODUCE: Table = {StorageError: ErrorCode.invalid_record, RequestTooLarge: ErrorCode.record_list_too_large}
GROUP_WRITE: Table = {StorageUnavailable: ErrorCode.not_coordinator, OSError: ErrorCode.not_coordinator}
CREATE_PARTITIONS: Table = {LimitExceeded: ErrorCode.invalid_partitions}
INIT_PRODUCER_ID: Table = {
    StorageUnavailable: ErrorCode.coordinator_load_in_progress, OSError: ErrorCode.coordinator_load_in_progress,
}
TRANSACTIONS: Table = {StorageUnavailable: ErrorCode.coordinator_not_available, OSError: ErrorCode.coordinator_not_available}
AUTO_CREATE: Table = {StorageError: ErrorCode.unknown_topic_or_partition}
DESCRIBE_CLIENT_QUOTAS: Table = {UnsupportedFilter: ErrorCode.unsupported_version}

_logged: set[tuple[type[BaseException], str, int]] = set()


def error_of(exc: BaseException, overrides: Table = {}) -> ErrorCode:  # noqa: B006 - read only
    """The Kafka error code answering ``exc`` (see the module docstring); logs the unexpected."""
    for cls in type(exc).__mro__:
        code = overrides.get(cls, ERRORS.get(cls))
        if code is not None:
            if cls is OSError:  # the storage layer should have turned it into StorageUnavailable
                _report(exc, f"answering {code.name.upper()} for", logging.WARNING, with_traceback=False)
            return code
    _report(exc, "answering UNKNOWN_SERVER_ERROR for an unexpected", logging.ERROR, with_traceback=True)
    return ErrorCode.unknown_server_error


def _report(exc: BaseException, what: str, level: int, *, with_traceback: bool) -> None:
    """One line per occurrence; the traceback only the first time ``exc``'s type is raised at its place."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = (type(exc), tb[-1].filename, tb[-1].lineno or 0) if tb else (type(exc), "", 0)
    first = where not in _logged
    _logged.add(where)
    log.log(level, "%s %s: %s", what, type(exc).__name__, exc, exc_info=exc if first and with_traceback else None)


async def answered(call: Awaitable[T], failed: Callable[[ErrorCode], T], overrides: Table = {}) -> T:  # noqa: B006
    """``await call``, or ``failed(error code)`` when it raises (the code of :func:`error_of`)."""
    try:
        return await call
    except Exception as exc:  # noqa: BLE001 - answered, the connection stays
        return failed(error_of(exc, overrides))


def millis(value: datetime.timedelta) -> int:
    """A request's duration field (a ``timedelta`` in the request view) in ms."""
    return int(value.total_seconds() * 1000)
