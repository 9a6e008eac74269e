"""The durable ACL store: Kafka ACL bindings as records of the catalog log (:mod:`walgate.storage.catalog`).

Two record kinds, each a whole change applied or refused as one (a CreateAcls/DeleteAcls request or a
GRANT/REVOKE statement is one record, so a crash leaves all of its bindings or none):

* ``{"op": "create_acls", "acls": [binding, ...]}`` adds bindings none of which is stored yet;
* ``{"op": "delete_acls", "acls": [binding, ...]}`` removes bindings all of which are stored;

a binding is the 7-element list of :meth:`~walgate.security.acl.AclBinding.to_json` (Kafka's wire codes).
A record naming an invalid binding, adding a stored one or removing an unknown one cannot be applied: the
catalog reports and skips it on replay (its damage rules), so a damaged record never grants more than was
granted. The catalog writes a record before the change is visible (it applies, appends, and restores
:attr:`AclStore.current` when the append fails).

:attr:`AclStore.current` is an immutable :class:`~walgate.security.acl.AclSet` replaced whole by each change:
the authorizer reads it from the event loop while the storage thread changes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from walgate.security.acl import AclBinding, AclFilter, AclSet

__all__ = ["OPS", "AclStore", "acl_record"]

OPS = ("create_acls", "delete_acls")


def acl_record(op: str, bindings: Iterable[AclBinding]) -> dict[str, Any]:
    """The catalog record of ``op`` (create_acls / delete_acls) over ``bindings``."""
    return {"op": op, "acls": [b.to_json() for b in bindings]}


class AclStore:
    """The ACL bindings of the catalog (see the module docstring)."""

    def __init__(self) -> None:
        self.current = AclSet()

    def apply(self, r: dict[str, Any]) -> None:
        """Apply one ``create_acls``/``delete_acls`` record; raises ValueError (changing nothing) when it cannot."""
        raw = r.get("acls")
        if not isinstance(raw, list) or not raw:
            raise ValueError(f"'acls' is {raw!r}")
        bindings = [AclBinding.from_json(b) for b in raw]
        new = frozenset(bindings)
        if len(new) != len(bindings):
            raise ValueError("a binding is listed twice")
        have = self.current.bindings
        if r.get("op") == "create_acls":
            if new & have:
                raise ValueError(f"create of {len(new & have)} stored ACL(s)")
            self.current = AclSet(have | new)
        elif r.get("op") == "delete_acls":
            if new - have:
                raise ValueError(f"delete of {len(new - have)} unknown ACL(s)")
            self.current = AclSet(have - new)
        else:
            raise ValueError(f"unknown ACL record {r.get('op')!r}")

    def records(self) -> list[dict[str, Any]]:
        """Records rebuilding the current bindings (none when there are none)."""
        return [acl_record("create_acls", self.current.ordered())] if self.current.bindings else []

    def new(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Those of ``bindings`` not stored yet, once each, in order."""
        out: list[AclBinding] = []
        for b in bindings:
            if b not in self.current.bindings and b not in out:
                out.append(b)
        return out

    def matching(self, f: AclFilter) -> list[AclBinding]:
        return self.current.matching(f)
