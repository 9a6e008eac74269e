"""Lost unsynced writes (power_cut.py): the tool itself, on walgate's own file operations in a real process; then
one ``walgate serve`` power-cut three times under idempotent and transactional load (history_load.py's workload)
loses no acknowledged write; and, to show the tool bites, a topic whose WAL acknowledges before it fsyncs
(Kafka's default flush policy) loses acknowledged writes at one cut, which the checker reports."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from history import Assign, Poll, check
from history_load import CONSUMER, crash_loop
from power_cut import environment, power_cut

from livewalgate import WalgateServer, walgate_env

CUTS = 3

# Four files: synced whole; synced, then appended and overwritten; never synced; synced, cut short, appended and
# synced through a second descriptor (as the WAL's sync thread does), then appended.
WRITER = """
import os, sys
from pathlib import Path
from walgate.storage import fileio
syncs = fileio.SyncLatency()
root = Path(sys.argv[1])
def opened(name, flags=0):
    return os.open(root / name, os.O_RDWR | os.O_CREAT | flags, 0o644)
a = opened("synced")
fileio.write_all(a, b"durable")
fileio.fsync(a, syncs=syncs)
b = opened("tail")
fileio.write_all(b, b"0123456789")
fileio.fdatasync(b, syncs=syncs)
fileio.write_all(b, b"-lost")
fileio.pwrite_all(b, b"XX", 2)
c = opened("never")
fileio.write_all(c, b"all of it lost")
d = opened("resynced", os.O_APPEND)
fileio.write_all(d, b"first version")
fileio.fsync(d, syncs=syncs)
fileio.truncate(d, 5)
fileio.write_all(d, b" second")
e = os.open(root / "resynced", os.O_RDONLY)
fileio.fdatasync(e, syncs=syncs)
os.close(e)
fileio.write_all(d, b" third")
print("written", flush=True)
sys.stdin.read()
"""

SYNCED = {"synced": b"durable", "tail": b"0123456789", "never": b"", "resynced": b"first second"}
WRITTEN = {"synced": b"durable", "tail": b"01XX456789-lost", "never": b"all of it lost",
           "resynced": b"first second third"}


def files_after(tmp_path: Path, cut: bool) -> dict[str, bytes]:
    root = tmp_path / ("cut" if cut else "killed")
    root.mkdir()
    env = environment(walgate_env()) if cut else walgate_env()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"written\n", proc.stderr
        if cut:
            power_cut(proc)
        else:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert ("power-cut recorder installed" in err) == cut, err
        assert ("power cut: 3 files taken back to their last sync, 25 unsynced bytes lost" in err) == cut, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    return {p.name: p.read_bytes() for p in root.iterdir()}


def test_a_power_cut_keeps_exactly_what_was_synced(tmp_path: Path) -> None:
    assert files_after(tmp_path, cut=True) == SYNCED


def test_a_kill_without_the_cut_keeps_every_write(tmp_path: Path) -> None:
    """The contrast: SIGKILL alone loses nothing the process wrote (the page cache outlives it)."""
    assert files_after(tmp_path, cut=False) == WRITTEN


def test_power_cut_fails_when_the_process_has_no_recorder(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with pytest.raises(AssertionError, match="not by the cut's SIGKILL"):
            power_cut(proc)  # SIGUSR1's default action ends it, but not as the cut does
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def cut(server: WalgateServer) -> None:
    power_cut(server.proc)
    assert "unsynced bytes lost" in server.log(), server.log()[-3000:]


def test_power_cuts_under_load_lose_no_acknowledged_write(tmp_path: Path) -> None:
    """``flush.messages=1``: the topic's WAL is fsynced before every answer, as every coordinator file is."""
    history = crash_loop(tmp_path, cut, CUTS, topic_config={"flush.messages": "1"},
                         env=environment(walgate_env()))
    assert check(history) == []


def test_an_answer_before_the_fsync_loses_acknowledged_writes_at_a_power_cut(tmp_path: Path) -> None:
    """Kafka's default flush policy (``flush.messages`` unset: answered from the page cache, fsynced every
    ``flush.ms``, here longer than the test) acknowledges writes a power cut then loses; SIGKILL alone would not
    (test_history_kill.py). No transactional producer: a transaction's markers are fsynced whatever the flush
    policy, with every write before them. The idempotent producers' sequences no longer match the shorter log: the
    final reads are not waited behind their next acknowledgements.

    The client process's consumer had read the lost values before the cut, so over the whole history the loss shows
    as offsets that came to hold a second value; the final reader, which starts after the cut, finds them lost."""
    history = crash_loop(tmp_path, cut, 1, topic_config={"flush.ms": "180000"}, env=environment(walgate_env()),
                         settle=False, transactions=False)
    assert "inconsistent-offsets" in {v.kind for v in check(history)}
    after_the_cut = [op for op in history if not (isinstance(op, Poll | Assign) and op.process == CONSUMER)]
    assert "lost-write" in {v.kind for v in check(after_the_cut)}
