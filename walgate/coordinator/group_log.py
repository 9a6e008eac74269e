"""The ``walgate.groups`` log: one INFO line per rebalance and per member joining, leaving or expiring.

Every line names the group and its type (``classic`` / ``consumer``) and each member the same way: member id,
client id, client host (the peer address, as Kafka's ``clientHost``: ``/ip``) and principal. walgate has no
authentication, so the principal is always Kafka's :data:`ANONYMOUS_PRINCIPAL`. A rebalance is a classic group's
new generation or a consumer group's new group epoch; its line lists the members of the new generation or epoch::

    rebalance group=g type=classic generation=3 members=2: [member_id=m1 client_id=c1 client_host=/10.0.0.1 principal=User:ANONYMOUS, ...]
    member joined group=g type=consumer member_id=m1 client_id=c1 client_host=/10.0.0.1 principal=User:ANONYMOUS
    member expired group=g type=classic member_id=m1 client_id=c1 client_host=/10.0.0.1 principal=User:ANONYMOUS reason="session timeout (10000 ms)"
    member left group=g type=consumer member_id=m2 client_id=c2 client_host=/10.0.0.2 principal=User:ANONYMOUS instance_id=i2 member_epoch=-2
    group upgraded group=g type=consumer from=classic epoch=3 members=2

A static member that rejoins under a new member id says ``instance_id=... replaces=<old member id>``; one that
leaves with member epoch -2 keeps its partitions until it rejoins. Ids come from clients: :func:`value` quotes and
escapes any that is not printable or has a space, so that every event stays one line.

The callers are the coordinator's state machines, which never read the clock: the time of a line is the logging
record's own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final, Protocol

__all__ = [
    "ANONYMOUS_PRINCIPAL",
    "Member",
    "log",
    "member_expired",
    "member_joined",
    "member_left",
    "rebalanced",
    "upgraded",
    "value",
]

log = logging.getLogger("walgate.groups")

ANONYMOUS_PRINCIPAL: Final = "User:ANONYMOUS"
"""Kafka's ``KafkaPrincipal.ANONYMOUS``: the principal of every client while walgate has no authentication."""


class Member(Protocol):
    """What the lines say about a member (both protocols' member classes have it)."""

    @property
    def member_id(self) -> str: ...

    @property
    def client_id(self) -> str: ...

    @property
    def client_host(self) -> str: ...


def value(text: str | None) -> str:
    """*text* as a line shows it: as it is when printable without spaces, else quoted and escaped (ids come from
    clients, and a newline in one must not start a line of its own)."""
    if text is None:
        return "None"
    return text if text and text.isprintable() and " " not in text else repr(text)


def _member(member: Member) -> str:
    return (
        f"member_id={value(member.member_id)} client_id={value(member.client_id)} "
        f"client_host={value(member.client_host)} principal={ANONYMOUS_PRINCIPAL}"
    )


def rebalanced(group_id: str, group_type: str, epoch_name: str, epoch: int, members: Iterable[Member]) -> None:
    """A new generation (*epoch_name* ``generation``) or group epoch (``epoch``) with *members*."""
    if log.isEnabledFor(logging.INFO):
        listed = [_member(m) for m in members]
        log.info("rebalance group=%s type=%s %s=%d members=%d: [%s]",
                 value(group_id), group_type, epoch_name, epoch, len(listed), ", ".join(listed))


def _extra(fields: dict[str, str | None]) -> str:
    return "".join(f" {key}={value(v)}" for key, v in fields.items() if v is not None)


def member_joined(group_id: str, group_type: str, member: Member, **fields: str | None) -> None:
    """*member* was added to the group; *fields* (None ones left out) follow, e.g. the static member it replaces."""
    if log.isEnabledFor(logging.INFO):
        log.info("member joined group=%s type=%s %s%s", value(group_id), group_type, _member(member), _extra(fields))


def member_left(group_id: str, group_type: str, member: Member, **fields: str | None) -> None:
    """*member* left (LeaveGroup, or a heartbeat with a leave epoch); *fields* as for :func:`member_joined`."""
    if log.isEnabledFor(logging.INFO):
        log.info("member left group=%s type=%s %s%s", value(group_id), group_type, _member(member), _extra(fields))


def member_expired(group_id: str, group_type: str, member: Member, reason: str) -> None:
    """*member* was removed by a timer (*reason*: which one)."""
    if log.isEnabledFor(logging.INFO):
        log.info('member expired group=%s type=%s %s reason="%s"', value(group_id), group_type, _member(member),
                 reason)


def upgraded(group_id: str, epoch: int, members: int) -> None:
    """A classic group with *members* became a consumer group at *epoch* (its last generation)."""
    log.info("group upgraded group=%s type=consumer from=classic epoch=%d members=%d", value(group_id), epoch,
             members)
