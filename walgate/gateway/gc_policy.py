"""The cyclic garbage collector's full collections kept rare and small in a serving node.

CPython's full (generation 2) collection traverses every tracked object of the process with the GIL held, so every
client of the node waits for it. It runs once ten generation-1 collections have passed and the objects that survived
into generation 2 since the last one are a quarter of those there. A node that creates subtables, topics or groups
keeps many new objects (its vnodes' caches of tables, say), so both hold often: measured on one node (bench/stalls.py's
line-protocol window, 20,000 new subtables a body), ~200,000 tracked objects, a full collection of 110-170 ms twice
per body, each one a produce round trip of that length for a client of another database (bench/RESULTS.md).

So a serving node (:func:`walgate.gateway.server.run_server`) sets :data:`THRESHOLDS`, whose third raises the
generation-1 collections before a full one from 10 to :data:`FULL_AFTER` (the quarter rule still holds), and
freezes what it loaded at start once it is ready (:func:`settle`: the catalog, indexes and modules are never
traversed again; reference counting still frees them). Young cycles (a request's exception and its traceback)
are still collected by the generation 0 and 1 collections, which this leaves as CPython has them; only cycles that
outlived those wait longer for a full collection (at most ~7 million net allocations: 1,000 x 10 x 700). Measured
(bench/stalls.py, full size): 17 full collections of up to 315 ms over its windows at 100, 5 at 1,000 (the slowest
``/healthz`` in the line-protocol window 338 -> 40 ms); a million subtables written left the same RSS as CPython's
thresholds (888 against 890 MB, bench/subtables.py).
"""

from __future__ import annotations

import gc

FULL_AFTER = 1_000
THRESHOLDS = (700, 10, FULL_AFTER)  # CPython's (700, 10, 10) but the third


def tune() -> None:
    """Set :data:`THRESHOLDS` for this process."""
    gc.set_threshold(*THRESHOLDS)


def settle() -> None:
    """Once a node is ready: what it holds now (its start's objects) moved out of the collector's reach."""
    gc.collect()
    gc.freeze()
