"""``users.key``: the data dir's secret that keys the mock credentials unknown user names are answered with.

SASL SCRAM, SASL PLAIN and HTTP Basic answer a name no user has as if it had a credential
(:func:`walgate.security.scram.mock_credential`), keyed by this secret so that a name gets the same answer at every
request and across restarts, as a real user's stored salt and iterations are. The file holds one checksummed line
(:mod:`walgate.storage.lines`) ``{"mock_key": base64 of 32 random bytes}``, written atomically
(:func:`walgate.storage.fileio.replace_file`) by the first start that finds none (a new data dir, or one from before
this file existed).

A file that does not verify is reported to the :class:`~walgate.storage.damage.DamageLog` (bytes kept) and replaced
by a new key; when the disk refuses the write, the key lives for this process only (logged at WARNING). Either way
the server starts; the mock answers then change once, as they would for users whose passwords all changed.
"""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from pathlib import Path
from typing import Final

from walgate.storage import fileio, lines
from walgate.storage.damage import DamageLog
from walgate.storage.fileio import SyncLatency

__all__ = ["USERS_KEY", "load_users_key"]

log = logging.getLogger("walgate.storage.users")

USERS_KEY: Final = "users.key"
_KEY_BYTES = 32


def load_users_key(path: Path, damage: DamageLog | None = None, syncs: SyncLatency | None = None) -> bytes:
    """The key in ``path``, made (and written, its fsyncs timed into ``syncs``) when the file is missing or does not
    verify (module docstring)."""
    raw = b""
    try:
        raw = path.read_bytes()
        key = base64.b64decode(lines.decode(raw.rstrip(b"\n"))["mock_key"], validate=True)
        if len(key) != _KEY_BYTES:
            raise ValueError(f"a key of {len(key)} bytes")
        return key
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        reason = f"the key of mock credentials: {exc}; a new key is made (unknown names get new mock answers)"
        if damage is None:
            log.warning("%s: %s", path, reason)
        else:
            damage.report(path, 0, len(raw), reason, "reset", raw)
    key = secrets.token_bytes(_KEY_BYTES)
    try:
        fileio.replace_file(path, lines.encode({"mock_key": base64.b64encode(key).decode()}),
                            syncs=SyncLatency() if syncs is None else syncs)
    except OSError as exc:
        log.warning("%s could not be written (%s): the key of mock credentials lasts until the server stops",
                    path, exc.strerror or exc)
    return key
