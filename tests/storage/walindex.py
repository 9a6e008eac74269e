"""Reading a WAL's in-memory index the way a timestamp lookup would (tests of the running max column)."""

from __future__ import annotations

from bisect import bisect_left

from walgate.storage.wal import Wal


def version_for_timestamp(wal: Wal, ts: int) -> int | None:
    """First version of the first entry whose running max timestamp is >= ``ts`` (None when there is none)."""
    for seg in wal.segments:
        if seg.running_max and seg.running_max[-1] >= ts:
            return seg.versions[bisect_left(seg.running_max, ts)]
    return None
