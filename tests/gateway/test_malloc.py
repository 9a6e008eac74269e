"""walgate.gateway.malloc: megabyte buffers are reused from the heap instead of being mapped and zeroed each time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# a worker thread (the storage thread's arena) copies and frees 300 buffers of 0.5-3 MiB, as requests of varying
# size pass through a connection; prints whether tune() applied and the page faults the loop took
CHURN = """\
import random, resource, sys, threading
from walgate.gateway import malloc
applied = malloc.tune() if sys.argv[1] == "tuned" else None
random.seed(0)
def work():
    for i in range(300):
        buf = bytearray(random.randint(1 << 19, 3 << 20))
        buf[::4096] = b"x" * len(buf[::4096])
        data = bytes(buf)
        del buf, data
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
worker = threading.Thread(target=work)
worker.start()
worker.join()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def churn(mode: str, **env: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env)
    applied, faults = out.stdout.split()
    return applied, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_tuned_thresholds_stop_the_page_fault_churn():
    _, default_faults = churn("default")
    applied, tuned_faults = churn("tuned")
    assert applied == "True"
    assert tuned_faults * 3 < default_faults, f"page faults: {tuned_faults} tuned, {default_faults} with the defaults"


def test_environment_settings_win():
    applied, _ = churn("tuned", MALLOC_MMAP_THRESHOLD_="131072")
    assert applied == "False"
