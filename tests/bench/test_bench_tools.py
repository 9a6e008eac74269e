"""bench/tools.py: a benchmark row whose program is missing is skipped with one message naming the rows and the fix
(``./run bench`` on a machine without kcat used to end in ``FileNotFoundError: kcat``)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from bench.tools import packaged, program


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_a_command_missing_from_path_skips_its_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert program("kcat", "kcat rows", "Debian: apt-get install kcat") is None
    assert capsys.readouterr().out == (
        "bench: kcat rows skipped: `kcat` is not on PATH (Debian: apt-get install kcat)\n")
    kcat = _executable(tmp_path / "kcat")
    assert program("kcat", "kcat rows", "Debian: apt-get install kcat") == str(kcat)
    assert capsys.readouterr().out == ""


def test_a_packaged_binary_is_found_or_its_rows_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    package = tmp_path / "h8_peer_pkg"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert packaged("h8_no_such_package", "bin/peer", "rows beside the peer", "pip install it") is None
    assert "rows beside the peer skipped: Python package h8_no_such_package is not installed (pip install it)" \
        in capsys.readouterr().out
    (package / "bin" / "peer").write_text("not executable")
    assert packaged("h8_peer_pkg", "bin/peer", "rows beside the peer", "pip install it") is None
    assert "is missing or not executable" in capsys.readouterr().out
    _executable(package / "bin" / "peer")
    assert packaged("h8_peer_pkg", "bin/peer", "rows beside the peer", "pip install it") == package / "bin" / "peer"
    assert capsys.readouterr().out == ""
