"""The mark of a single node's committed offsets still to be imported into a replicated cluster's
``__consumer_offsets`` (storage/offsets_import.py) and the rule of what is imported: the mark is there once written
and gone once done; every refused write (ENOSPC, EIO, a short write, a failed fsync or rename) raises OSError and
leaves no mark or a whole one, and no temporary file; a mark cut at any byte or with a byte flipped still says the
import is pending (its presence is its meaning); only partitions the cluster holds no commit of are committed."""

from __future__ import annotations

from pathlib import Path

import pytest
from faults import FAULT_KINDS, Faults, flipped_in_line, truncations

from walgate.storage import offsets_import
from walgate.storage.coordinator_log import Committed
from walgate.storage.fileio import SyncLatency

REFUSALS = [("write", k) for k in FAULT_KINDS] + [("fsync", "enospc"), ("fsync", "eio"), ("replace", "eio")]


def test_the_mark_is_pending_once_written_and_gone_once_done(tmp_path: Path) -> None:
    assert not offsets_import.pending(tmp_path)
    offsets_import.mark(tmp_path, syncs=SyncLatency())
    assert offsets_import.pending(tmp_path)
    offsets_import.mark(tmp_path, syncs=SyncLatency())  # a start that stopped before the catalog's rewrite: again
    assert offsets_import.pending(tmp_path)
    offsets_import.done(tmp_path, syncs=SyncLatency())
    assert not offsets_import.pending(tmp_path) and list(tmp_path.iterdir()) == []
    offsets_import.done(tmp_path, syncs=SyncLatency())  # done twice (a stop before the log line): nothing to remove


@pytest.mark.parametrize(("op", "kind"), REFUSALS)
def test_a_refused_mark_raises_and_leaves_none_or_a_whole_one(tmp_path: Path, op: str, kind: str) -> None:
    faults = Faults()
    with faults.active():
        faults.fail_kind(op, kind)
        with pytest.raises(OSError):
            offsets_import.mark(tmp_path, syncs=SyncLatency())
        assert faults.injected == 1
    assert not list(tmp_path.glob("*.tmp"))
    if offsets_import.pending(tmp_path):  # (a failed fsync of the directory after the rename: the mark is whole)
        assert (tmp_path / offsets_import.IMPORT_FILE).read_bytes().endswith(b'{"import":"pending"}\n')
    offsets_import.mark(tmp_path, syncs=SyncLatency())  # the disk has room again
    assert offsets_import.pending(tmp_path)


def test_a_damaged_mark_still_says_the_import_is_pending(tmp_path: Path) -> None:
    offsets_import.mark(tmp_path, syncs=SyncLatency())
    path = tmp_path / offsets_import.IMPORT_FILE
    for _ in truncations(path):
        assert offsets_import.pending(tmp_path)
    for _ in flipped_in_line(path, 0):
        assert offsets_import.pending(tmp_path)


def test_only_partitions_the_cluster_holds_no_commit_of_are_imported() -> None:
    old = {("t", 0): Committed(4, 2, "m", 1), ("t", 1): Committed(6, -1, None, 1), ("u", 0): Committed(9, 0, "", 1),
           ("gone", 0): Committed(1, 0, None, 1)}
    # t-0 none yet, t-1 committed since by a consumer, u-0 imported by a previous start, "gone" not answered for
    now = {("t", 0): -1, ("t", 1): 8, ("u", 0): 9}
    assert offsets_import.to_import(old, now) == {("t", 0): Committed(4, 2, "m", 1)}
    assert offsets_import.to_import(old, {}) == {}
    assert offsets_import.by_group([("g", "t", 0, old[("t", 0)]), ("h", "u", 0, old[("u", 0)]),
                                    ("g", "t", 1, old[("t", 1)])]) == {
        "g": {("t", 0): old[("t", 0)], ("t", 1): old[("t", 1)]}, "h": {("u", 0): old[("u", 0)]}}
