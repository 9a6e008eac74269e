"""The data dir's incarnation id: which data dir a cluster node's registration belongs to.

``node.incarnation`` in the data dir holds one line, ``walgate-incarnation <32 hex digits> <crc32c, 8 hex
digits>``: made (random) the first time the data dir runs as a cluster node, written atomically and fsynced
(:func:`walgate.storage.fileio.replace_file`), and registered with the node id in etcd. A data dir without the file
gets a new incarnation, so a node whose data dir was emptied cannot register as its old self
(:func:`walgate.cluster.model.check_registration`). A damaged file is an error, never a new incarnation: the node
would otherwise lose its identity silently.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import crc32c

from walgate.storage import fileio

__all__ = ["FILE_NAME", "IncarnationError", "load_or_create"]

FILE_NAME = "node.incarnation"
_LINE = re.compile(rb"^walgate-incarnation ([0-9a-f]{32}) ([0-9a-f]{8})\n$")


class IncarnationError(Exception):
    """The data dir's incarnation file is damaged or could not be written; the message says which and what to do."""


def _line(incarnation: str) -> bytes:
    return b"walgate-incarnation %s %08x\n" % (incarnation.encode(), crc32c.crc32c(incarnation.encode()))


def load_or_create(data_dir: Path, syncs: fileio.SyncLatency | None = None) -> str:
    """The data dir's incarnation id, made and written durably when the data dir has none."""
    path = data_dir / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        incarnation = secrets.token_hex(16)
        try:
            fileio.replace_file(path, _line(incarnation), syncs=syncs or fileio.SyncLatency())
        except OSError as e:
            raise IncarnationError(f"{path}: cannot write the node's incarnation id: {e}") from e
        return incarnation
    except OSError as e:
        raise IncarnationError(f"{path}: cannot read the node's incarnation id: {e}") from e
    m = _LINE.match(data)
    if m is None or int(m.group(2), 16) != crc32c.crc32c(m.group(1)):
        raise IncarnationError(
            f"{path} is damaged ({data[:80]!r}): it names which data dir this node's registration belongs to; restore"
            f" it from a backup, or delete it and start the node with a new node id (its data is then a new node's)")
    return m.group(1).decode()
