"""The LRU of supertables' whole tag tables, bounded in bytes (issue 23: a SELECT's preparation).

A SELECT over a supertable is prepared with the tag table (``tbname`` and tag columns) of each vnode's subtables
(:meth:`Vnode.tag_table <walgate.storage.vnode.Vnode.tag_table>`): built from the vnode's meta store, it costs time in
proportion to the subtables (~1.5 s for 200,000), on a call holding the vnode. Entries are keyed by the vnode's
:attr:`~walgate.storage.vnode.Vnode.tables_version` and the supertable's definition: the version changes with every
table created, dropped or altered in the vnode (and with every cut or rebuild of its tables), so an entry found is
the table the vnode would build now. Keys of tables changed since are never asked again and age out. One table larger
than the bound is not kept. Calls holding different vnodes use it at once from their threads (a lock).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import pyarrow as pa

__all__ = ["TagTableCache"]


class TagTableCache:
    """LRU of tag tables by key, at most ``max_bytes`` of Arrow buffers together; counts the lookups that found
    their table (``hits``) and those that built it (``misses``)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[Hashable, pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], pa.Table]) -> pa.Table:
        """The table kept under ``key``, else ``build()``'s (built outside the lock), kept when it fits."""
        with self._lock:
            table = self._items.get(key)
            if table is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return table
            self.misses += 1
        table = build()
        size = table.nbytes
        if size > self.max_bytes:
            return table
        with self._lock:
            if key not in self._items:
                self._items[key] = table
                self.size += size
                while self.size > self.max_bytes:
                    _, old = self._items.popitem(last=False)
                    self.size -= old.nbytes
        return table
