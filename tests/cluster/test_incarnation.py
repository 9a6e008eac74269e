"""The data dir's incarnation file: made once, kept, written durably; a damaged one is an error, never a new id."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
from faults import WRITE_FAULTS, Faults, flipped_in_line, truncations  # noqa: E402

from walgate.cluster.incarnation import FILE_NAME, IncarnationError, load_or_create  # noqa: E402


def test_made_once_and_kept(tmp_path: Path) -> None:
    first = load_or_create(tmp_path)
    assert len(first) == 32 and load_or_create(tmp_path) == first
    assert load_or_create(tmp_path / ".." / tmp_path.name) == first
    other = tmp_path / "other"
    other.mkdir()
    assert load_or_create(other) != first  # an empty data dir is a new incarnation


@pytest.mark.parametrize(("op", "kind"), WRITE_FAULTS)
def test_a_failed_write_leaves_no_file_and_the_next_start_makes_one(tmp_path: Path, op: str, kind: str) -> None:
    faults = Faults()
    with faults.active():
        faults.fail_kind(op, kind)
        with pytest.raises(IncarnationError, match="cannot write"):
            load_or_create(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written, no temporary left
    made = load_or_create(tmp_path)
    assert load_or_create(tmp_path) == made


def test_a_failed_directory_sync_is_an_error(tmp_path: Path) -> None:
    faults = Faults()
    with faults.active():
        faults.fail("fsync", at=2)  # the file's fsync passes, the directory's fails
        with pytest.raises(IncarnationError):
            load_or_create(tmp_path)


def test_truncated_or_flipped_is_an_error(tmp_path: Path) -> None:
    made = load_or_create(tmp_path)
    path = tmp_path / FILE_NAME
    whole = path.read_bytes()
    for data in truncations(path):
        if data == whole:
            assert load_or_create(tmp_path) == made
        else:
            with pytest.raises(IncarnationError, match="is damaged"):
                load_or_create(tmp_path)
    for _ in flipped_in_line(path, 0):
        with pytest.raises(IncarnationError, match="is damaged"):
            load_or_create(tmp_path)
    path.write_bytes(whole)
    assert load_or_create(tmp_path) == made
