"""Client quotas (KIP-546) as the catalog stores them: entities, validated values, the record and its replay.

A quota entity is a set of (entity type, name) pairs, Kafka's ``ClientQuotaEntity``: ``user`` and/or ``client-id``,
a name of None meaning the *default* entity of that type (``--entity-default``). It is kept as a sorted tuple
(:data:`Entity`), so equal entities compare equal whatever order a request named them in. Each entity holds quota
values by key: ``producer_byte_rate``, ``consumer_byte_rate`` (bytes per second, whole numbers) and
``request_percentage`` (percent of one request handler's time); all > 0. ``ip`` entities (connection rates) and
``controller_mutation_rate`` are refused: walgate enforces neither.

Durability: one catalog record per changed entity, ``{"op": "client_quota", "entity": [[type, name|null], ...],
"values": {key: value}}`` holding the entity's *whole* set of values after the change (an empty set removes the
entity), so replaying a record is idempotent and the latest record of an entity is its state.
:func:`apply_record` replays one (raising ``ValueError`` for a record it cannot apply, which the catalog quarantines,
changing nothing); :func:`records` rebuilds the state for a rewrite.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

from walgate.storage.errors import InvalidValue

__all__ = ["Entity", "QuotaValues", "QUOTA_OP", "QUOTA_KEYS", "USER", "CLIENT_ID", "MATCH_EXACT", "MATCH_DEFAULT",
           "MATCH_SPECIFIED", "UnsupportedFilter", "alter", "apply_record", "describe", "entity", "record", "records"]

Entity: TypeAlias = tuple[tuple[str, str | None], ...]
"""Sorted ((entity type, name or None for the default), ...): one quota entity."""
QuotaValues: TypeAlias = dict[str, float]

QUOTA_OP: Final = "client_quota"
USER: Final = "user"
CLIENT_ID: Final = "client-id"
_IP: Final = "ip"
_BYTE_RATES: Final = ("producer_byte_rate", "consumer_byte_rate")  # LONG in Kafka: whole numbers
QUOTA_KEYS: Final = (*_BYTE_RATES, "request_percentage")
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_MAX_NAME: Final = 32767  # a Kafka string


class UnsupportedFilter(InvalidValue):
    """A DescribeClientQuotas filter on an entity type walgate does not know (Kafka: UNSUPPORTED_VERSION)."""


def entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The validated :data:`Entity` of ``pairs`` as a request names them; raises :class:`InvalidValue` (Kafka's
    INVALID_REQUEST) for an empty entity, a repeated or unknown type, an empty name, or an ``ip`` entity."""
    seen: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind in seen:
            raise InvalidValue(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind == _IP:
            raise InvalidValue("ip quota entities (connection rates) are not supported by walgate")
        if kind not in (USER, CLIENT_ID):
            raise InvalidValue(f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise InvalidValue(f"Empty {kind} not supported")
        if name is not None and len(name) > _MAX_NAME:
            raise InvalidValue(f"{kind} name too long")
        seen[kind] = name
    if not seen:
        raise InvalidValue("Invalid empty client quota entity")
    return tuple(sorted(seen.items()))


def _check_value(key: str, value: float) -> None:
    if key not in QUOTA_KEYS:
        raise InvalidValue(f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0.0:
        raise InvalidValue(f"Quota {key} must be greater than 0")
    if key in _BYTE_RATES:
        if value > 2**63 - 1:
            raise InvalidValue(f"Proposed value for {key} is too large for a LONG.")
        if value != math.floor(value):
            raise InvalidValue(f"{value} for {key} is not a valid integer")


def alter(current: Mapping[Entity, QuotaValues], which: Entity, ops: Iterable[tuple[str, float, bool]]) -> QuotaValues:
    """The values of ``which`` after ``ops`` ((key, value, remove), in request order) on ``current``; raises
    :class:`InvalidValue` for a repeated key, an unknown key or a bad value (then nothing is to change). Removing a
    key that is not set is no error (Kafka's rule)."""
    values = dict(current.get(which, {}))
    keys: set[str] = set()
    for key, value, remove in ops:
        if key in keys:
            raise InvalidValue(f"Duplicate quota key {key} not updating quota for this entity")
        keys.add(key)
        if remove:
            values.pop(key, None)
        else:
            _check_value(key, value)
            values[key] = float(value)
    return values


def describe(quotas: Mapping[Entity, QuotaValues], components: Iterable[tuple[str, int, str | None]],
             strict: bool) -> list[tuple[Entity, QuotaValues]]:
    """The entities matching a DescribeClientQuotas filter (components: (entity type, match type, match)), as
    Kafka's ``ClientQuotasImage.describe`` matches them; raises :class:`InvalidValue` for a malformed filter and
    :class:`UnsupportedFilter` for an unknown entity type."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for kind, match_type, match in components:
        if not kind:
            raise InvalidValue("Invalid empty entity type.")
        if kind in exact or kind in typed:
            raise InvalidValue(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (USER, CLIENT_ID, _IP):
            raise UnsupportedFilter(f"Unsupported entity type {kind}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise InvalidValue("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = match
        elif match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            if match is not None:
                name = "DEFAULT" if match_type == MATCH_DEFAULT else "SPECIFIED"
                raise InvalidValue(f"Request specified MATCH_TYPE_{name}, but also specified a match string.")
            if match_type == MATCH_DEFAULT:
                exact[kind] = None
            else:
                typed.add(kind)
        else:
            raise InvalidValue(f"Unknown match type {match_type}")
    if _IP in exact or _IP in typed:
        if {USER, CLIENT_ID} & (set(exact) | typed):
            raise InvalidValue("Invalid entity filter component combination. IP filter component should not be used "
                               "with user or clientId filter component.")
    out = []
    for which, values in quotas.items():
        names = dict(which)
        if strict and len(names) != len(exact) + len(typed):
            continue
        if all(k in names and names[k] == v for k, v in exact.items()) and all(k in names for k in typed):
            out.append((which, dict(values)))
    return out


def record(which: Entity, values: Mapping[str, float]) -> dict[str, Any]:
    """The catalog record setting ``which`` to ``values`` (removing it when empty)."""
    return {"op": QUOTA_OP, "entity": [[k, n] for k, n in which], "values": dict(values)}


def apply_record(quotas: dict[Entity, QuotaValues], r: Mapping[str, Any]) -> None:
    """Replay one :func:`record` into ``quotas``; raises ``ValueError`` (changing nothing) when it is malformed."""
    raw, values = r.get("entity"), r.get("values")
    if not isinstance(raw, list) or not isinstance(values, dict):
        raise ValueError(f"client quota record: entity {raw!r}, values {values!r}")
    pairs = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and (item[1] is None or isinstance(item[1], str))):
            raise ValueError(f"client quota record: bad entity entry {item!r}")
        pairs.append((item[0], item[1]))
    try:
        which = entity(pairs)
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"client quota record: {key} is {value!r}")
            _check_value(key, float(value))
    except InvalidValue as exc:
        raise ValueError(f"client quota record: {exc.message}") from None
    if values:
        quotas[which] = {k: float(v) for k, v in values.items()}
    else:
        quotas.pop(which, None)


def records(quotas: Mapping[Entity, QuotaValues]) -> list[dict[str, Any]]:
    """Records that rebuild ``quotas``."""
    return [record(which, values) for which, values in quotas.items()]
