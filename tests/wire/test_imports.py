"""The functional core stays sans-IO: importing walgate.wire or walgate.storage loads no event loop."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import walgate.wire

WIRE_MODULES = sorted(m.name for m in pkgutil.walk_packages(walgate.wire.__path__, "walgate.wire."))
PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("asyncio", "aiokafka", "uvloop", "aiohttp"))))
"""


def loaded_io_modules(*modules: str) -> list[str]:
    """Event-loop modules loaded by importing *modules* in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", PROBE, *modules], check=True, capture_output=True, text=True,
                         timeout=120)
    return list(json.loads(out.stdout))


def test_wire_modules_are_found():
    assert {"walgate.wire.record_batch", "walgate.wire.serial.codegen", "walgate.wire.protocol"} <= set(WIRE_MODULES)


def test_importing_wire_loads_no_asyncio():
    assert loaded_io_modules("walgate.wire", *WIRE_MODULES) == []


def test_importing_storage_loads_no_asyncio():
    assert loaded_io_modules("walgate.storage", "walgate.storage.engine") == []
