"""The partition tool itself (netns.py): hosts reach each other and the observer; a cut stops TCP both ways, a drop
one way, a heal restores it; every namespace goes at teardown, also when the block fails; without root the tests
fail saying so."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netns import OBSERVER, Network, namespaces_of, network

PORT = 8765  # inside the hosts' own namespaces: no other process listens there
CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()"


def connects(net: Network, src: str, dst: str) -> bool:
    """Whether a TCP connection from ``src`` to ``dst``'s listener is made within 1 s."""
    if src == OBSERVER:
        try:
            socket.create_connection((net.address(dst), PORT), timeout=1).close()
            return True
        except OSError:
            return False
    done = subprocess.run(net.command(src, sys.executable, "-c", CONNECT, net.address(dst), str(PORT)),
                          capture_output=True, timeout=30, check=False)
    return done.returncode == 0


def test_cut_drop_and_heal(tmp_path: Path) -> None:
    with network(["a", "b"]) as net:
        servers = [subprocess.Popen(net.command(h, sys.executable, "-m", "http.server", "--bind", net.address(h),
                                                str(PORT)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    cwd=tmp_path) for h in ("a", "b")]
        try:
            for _ in range(300):  # bounded: the listeners start
                if connects(net, OBSERVER, "a") and connects(net, OBSERVER, "b"):
                    break
                time.sleep(0.1)
            assert connects(net, "a", "b") and connects(net, "b", "a")
            net.cut("a", "b")
            assert not connects(net, "a", "b") and not connects(net, "b", "a")
            assert connects(net, OBSERVER, "a") and connects(net, OBSERVER, "b"), "the observer is never cut"
            net.heal()
            assert connects(net, "a", "b") and connects(net, "b", "a")
            net.drop("a", "b")  # a's packets never reach b: a cannot connect; b's SYN reaches a, a's answer is lost
            assert not connects(net, "a", "b") and not connects(net, "b", "a")
            net.heal()
            assert connects(net, "a", "b")
        finally:
            for s in servers:
                s.kill()
                s.wait(30)
    assert namespaces_of(os.getpid()) == []


def test_a_failing_block_leaves_no_namespace_nor_link() -> None:
    with pytest.raises(RuntimeError, match="the test failed"), network(["a", "b"]) as net:
        net.cut("a", "b")
        raise RuntimeError("the test failed")
    assert namespaces_of(os.getpid()) == []
    assert subprocess.run(["ip", "link", "show", net.tag], capture_output=True, check=False).returncode != 0


def test_without_root_the_partition_tests_fail_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.fail.Exception, match="run as root"), network(["a"]):
        pass
    assert namespaces_of(os.getpid()) == []
