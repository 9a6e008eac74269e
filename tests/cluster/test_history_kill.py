"""The history checker on a real history: confluent-kafka producers and a consumer against one ``walgate serve``
that is killed with SIGKILL twice under load and restarted on the same data dir and port (the workload:
history_load.py). The checker finds no violation across both crashes, and, as a check of the check, reports the
lost write when the reads of one acknowledged value are taken out.
"""

from __future__ import annotations

import signal
from pathlib import Path

from history import Poll, Send, check
from history_load import crash_loop

from livewalgate import WalgateServer

KILLS = 2


def kill_9(server: WalgateServer) -> None:
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(30)


def test_kill_9_under_load_the_checker_finds_no_violation(tmp_path: Path) -> None:
    history = crash_loop(tmp_path, kill_9, KILLS)
    # the waits of crash_loop make at least 600 acknowledged sends and 150 reads, spread over the two kills
    acked = {op.writes[0].value: op.writes[0].offset for op in history if isinstance(op, Send) and op.outcome == "ok"}
    assert check(history) == []
    # the same history without the reads of the first acknowledged value: the checker sees it lost
    gone = min(acked, key=lambda v: acked[v] or 0)
    pruned = [op for op in history if not (isinstance(op, Poll) and any(v == gone for pairs in op.reads.values()
                                                                         for _, v in pairs))]
    assert "lost-write" in {v.kind for v in check(pruned)}
