"""Loaded by every Python process started with this directory on ``PYTHONPATH``: when ``WGT_DISK_FULL`` names a
file, every write and sync storage makes (``walgate.storage.fileio``'s ``os``, the seam tests/storage/faults.py
injects through) raises ENOSPC while that file exists, as a full disk answers. The variable is unset so the
process's own children (SQL workers) run without it. A test makes the file to fill the disk and removes it to free
it, without restarting the process."""

import errno
import os
from typing import Any

_FLAG = os.environ.pop("WGT_DISK_FULL", None)

if _FLAG:
    from walgate.storage import fileio

    class _FullDiskOs:
        def __getattr__(self, name: str) -> Any:
            real = getattr(os, name)
            if name not in ("write", "pwrite", "fsync", "fdatasync"):
                return real

            def call(*args: Any, **kwargs: Any) -> Any:
                if os.path.exists(_FLAG):
                    raise OSError(errno.ENOSPC, f"injected ENOSPC in {name} (the disk is full)")
                return real(*args, **kwargs)

            return call

    fileio.os = _FullDiskOs()  # type: ignore[assignment]
