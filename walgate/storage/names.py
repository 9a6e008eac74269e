"""Identifier rules: which names of databases, tables, columns and topics walgate accepts.

No name ever becomes a path (docs/architecture.md, "Fault model"): directories and files are named by internal ids
(:func:`new_db_id`, a topic's ``topic_id``), checked by :func:`is_db_id` before a path is built from one. The rules
here are TDengine's (docs: SQL manual, "Naming Conventions and Limitations") and Kafka's, so a name walgate takes
is one both systems take:

* database: ASCII letters, digits and ``_``, not starting with a digit, at most 64 bytes (TDengine; escaped names
  are for tables and columns only);
* table, supertable: 1 to 192 bytes; with backquotes TDengine takes any visible character but ``.``, so walgate
  refuses ``.``, the backquote and control characters (NUL, newline ...);
* column, tag: the same characters, at most 64 bytes;
* TDengine topic (``CREATE TOPIC``): at most 192 bytes of ASCII letters, digits, ``_`` and ``-`` (a plain TDengine
  name, or a backquoted one Kafka also takes: every topic is a Kafka topic, and TDengine refuses ``.``);
* Kafka topic (CreateTopics): Kafka's rule, 1 to 249 characters of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``
  (:func:`walgate.storage.topic_configs.validate_topic_name`);
* every topic, whichever way it is created (CreateTopics, auto-creation, ``CREATE TOPIC``): Kafka's collision
  rule, a name with ``.`` or ``_`` that another topic's equals once ``.`` is read as ``_`` (``alice.a`` beside
  ``alice_a``) is refused (:func:`collision_key`; Kafka's ``Topic.hasCollision``: their metric names would be one).

Names already in a data dir are never re-checked: a data dir written before these rules opens as it was.
"""

from __future__ import annotations

import re
import uuid
from typing import TypeGuard

from walgate.storage.errors import InvalidValue

__all__ = [
    "DB_NAME_MAX",
    "TABLE_NAME_MAX",
    "COLUMN_NAME_MAX",
    "TOPIC_NAME_MAX",
    "validate_database_name",
    "validate_table_name",
    "validate_column_name",
    "validate_sql_topic_name",
    "collision_key",
    "new_db_id",
    "is_db_id",
    "is_topic_id",
]

DB_NAME_MAX = 64
TABLE_NAME_MAX = 192
COLUMN_NAME_MAX = 64
TOPIC_NAME_MAX = 192

_DB = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOPIC = re.compile(r"[A-Za-z0-9_-]+")
_DB_ID = re.compile(r"[0-9a-f]{32}")


def _shown(name: str) -> str:
    """The name for an error message: quoted, control characters escaped, long ones cut."""
    return repr(name if len(name) <= 80 else name[:80] + "...")


def validate_database_name(name: str) -> None:
    if not _DB.fullmatch(name) or len(name.encode()) > DB_NAME_MAX:
        raise InvalidValue(f"Invalid database name {_shown(name)}: 1 to {DB_NAME_MAX} ASCII letters, digits and "
                           "underscores, not starting with a digit")


def _check_object_name(kind: str, name: str, limit: int) -> None:
    size = len(name.encode("utf-8", "surrogatepass"))
    if not 0 < size <= limit or not name.isprintable() or "." in name or "`" in name:
        raise InvalidValue(f"Invalid {kind} name {_shown(name)}: 1 to {limit} bytes of visible characters, "
                           "without '.' and '`'")


def validate_table_name(name: str) -> None:
    """A table or supertable name (see the module docstring)."""
    _check_object_name("table", name, TABLE_NAME_MAX)


def validate_column_name(name: str) -> None:
    """A column or tag name (see the module docstring)."""
    _check_object_name("column", name, COLUMN_NAME_MAX)


def validate_sql_topic_name(name: str) -> None:
    if not _TOPIC.fullmatch(name) or len(name) > TOPIC_NAME_MAX:
        raise InvalidValue(f"Invalid topic name {_shown(name)}: 1 to {TOPIC_NAME_MAX} ASCII letters, digits, "
                           "'_' and '-'")


def collision_key(name: str) -> str | None:
    """What two topic names that collide in Kafka's sense have in common: the name with ``.`` as ``_``; None for
    a name with neither character, which collides with nothing but itself."""
    if "." not in name and "_" not in name:
        return None
    return name.replace(".", "_")


def new_db_id() -> str:
    """A fresh database id: 32 lowercase hex digits (a UUID4), the name of the database's directory."""
    return uuid.uuid4().hex


def is_db_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _DB_ID.fullmatch(value) is not None


def is_topic_id(value: object) -> bool:
    """A topic id as the catalog stores it: a UUID in its canonical text form (the name of its index files)."""
    if not isinstance(value, str):
        return False
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False
