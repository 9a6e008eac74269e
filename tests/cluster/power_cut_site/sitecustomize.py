"""Loaded by every Python process started with this directory on ``PYTHONPATH`` (tests/cluster/power_cut.py's
``environment``): when ``WGT_POWER_CUT`` is set, installs the power-cut recorder into the process and unsets the
variable, so the process's own children (SQL workers) run without it."""

import importlib.util
import os
import sys
from pathlib import Path

if os.environ.pop("WGT_POWER_CUT", None):
    _spec = importlib.util.spec_from_file_location("power_cut", Path(__file__).parents[1] / "power_cut.py")
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["power_cut"] = _module  # before it runs: its dataclasses look their module up
    _spec.loader.exec_module(_module)
    _module.install()
