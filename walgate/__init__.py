"""walgate: a Kafka-wire-protocol gateway over TDengine-style vnode WAL storage.

Importing walgate never imports hypothesis (a test-only dependency), so neither ``walgate serve`` nor its worker
processes (spawned: they import walgate afresh) load it: kio 0.6.5 (pinned in pyproject.toml) imports
``hypothesis.strategies`` when it can, to register strategies for its phantom types, as its first phantom type's
module loads. Unless hypothesis is imported already (a test process, which may use them), kio is loaded here with
hypothesis hidden, taking the path it takes where hypothesis is not installed.
"""

import sys

__version__ = "0.1.0"


def _load_kio_without_hypothesis() -> None:
    if "hypothesis" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # an import of it now raises ImportError
    try:
        import kio.static.primitive  # noqa: F401  # its phantom types: their module tries hypothesis
    finally:
        del sys.modules["hypothesis"]


_load_kio_without_hypothesis()
