"""Network partitions on one machine: hosts in network namespaces on one bridge, links cut with iptables DROP rules.

:func:`network` makes, for one test, a namespace per named host (``wgt<pid>-<name>``, address ``198.18.X.<i>``)
and a hub namespace holding a bridge that joins them by veth pairs; the test process itself reaches every host
through one more veth (``wgt<pid>`` in its own namespace, ``198.18.X.254``), and is never cut off: it observes.
A process runs inside a host with :meth:`Network.command` (``ip netns exec``: it is the process itself, so it is
stopped by its PID as any other). :meth:`Network.drop` stops the packets from one host reaching another (an
asymmetric partition; DROP, not REJECT: the sender hears nothing, as on a real network), :meth:`Network.cut` both
directions, :meth:`Network.heal` every rule. The rules live in the hosts' own namespaces, so deleting a namespace
deletes its rules and its veth (and the veth's peer): teardown removes every namespace the test made, whether the
test passed, failed or was interrupted, and namespaces left by a test process that was killed outright
(``wgt<pid>-*`` of a PID that is gone) are removed by the next :func:`network`, with the processes left in them.

It needs root, ``ip`` (iproute2) and ``iptables``: without them :func:`network` fails the test with what is
missing (CI runs as root); these tests are never skipped. The kernel has no netem: delayed links are delay_proxy.py's.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

__all__ = ["Network", "network", "namespaces_of", "OBSERVER"]

_PREFIX = "wgt"
_STALE = re.compile(rf"^{_PREFIX}(\d+)-")
OBSERVER = "observer"  # the test process's own address on the bridge: never cut


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _require() -> None:
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        pytest.fail("the partition tests make network namespaces and iptables rules: they run as root with"
                    f" iproute2 and iptables installed (uid {os.geteuid()}, missing: {missing or 'none'});"
                    " `apt-get install iproute2 iptables`, then run them as root (CI does)")


def namespaces_of(pid: int) -> list[str]:
    """The namespaces a test process ``pid`` made (``wgt<pid>-*``) that exist now."""
    names = [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]
    return [n for n in names if n.startswith(f"{_PREFIX}{pid}-")]


def _remove_stale() -> None:
    """Delete the namespaces of test processes that no longer run (killed before their teardown), after killing
    the processes those tests left inside them (etcd members, helpers: started by that test, stopped by PID)."""
    for line in _run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        match = _STALE.match(name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            for pid in _run("ip", "netns", "pids", name).split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _run("ip", "netns", "delete", name)


class Network:
    """Hosts in their own namespaces on one bridge; the partitions between them are iptables DROP rules.

    Invariant: every namespace this object made is in ``self.made`` from the moment it exists (the observer's link:
    ``self.linked``), and :meth:`close` deletes each of them (with them go their rules, their veths and the veths'
    peers)."""

    def __init__(self, hosts: Sequence[str]) -> None:
        if len(set(hosts)) != len(hosts) or OBSERVER in hosts or not 0 < len(hosts) < 250:
            raise ValueError(f"hosts must be 1 to 249 distinct names other than {OBSERVER!r}: {hosts}")
        pid = os.getpid()
        self.tag = f"{_PREFIX}{pid}"
        subnet = 0xC6120000 + ((pid % 512) << 8)  # 198.18.0.0/15 (RFC 2544: never routed), one /24 per process
        self._subnet = f"{subnet >> 24}.{(subnet >> 16) & 255}.{(subnet >> 8) & 255}"
        self.hosts = list(hosts)
        self.hub = f"{self.tag}-hub"
        self.made: list[str] = []
        self.linked = False
        self._rules: set[tuple[str, str]] = set()

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def address(self, host: str) -> str:
        """The host's IPv4 address (the observer's for :data:`OBSERVER`)."""
        last = 254 if host == OBSERVER else self.hosts.index(host) + 1
        return f"{self._subnet}.{last}"

    def command(self, host: str, *args: str) -> list[str]:
        """``args`` run inside ``host``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(host), *args]

    def start(self) -> None:
        _require()
        _remove_stale()
        self._add_namespace(self.hub)
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            ns = self.namespace(host)
            self._add_namespace(ns)
            _run("ip", "-n", self.hub, "link", "add", f"h{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", self.hub, "link", "set", f"h{i}", "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
        # the observer's link, deleted first at close (the kernel frees a deleted namespace's links later, in the
        # background: its peer's end would linger here a moment)
        _run("ip", "link", "add", self.tag, "type", "veth", "peer", "name", "obs", "netns", self.hub)
        self.linked = True
        _run("ip", "-n", self.hub, "link", "set", "obs", "master", "br0", "up")
        _run("ip", "addr", "add", f"{self.address(OBSERVER)}/24", "dev", self.tag)
        _run("ip", "link", "set", self.tag, "up")

    def _add_namespace(self, ns: str) -> None:
        _run("ip", "netns", "add", ns)
        self.made.append(ns)
        _run("ip", "-n", ns, "link", "set", "lo", "up")

    def _iptables(self, host: str, action: str, src: str) -> None:
        _run(*self.command(host, "iptables", "-w", action, "INPUT", "-s", self.address(src), "-j", "DROP"))

    def drop(self, src: str, dst: str) -> None:
        """From now on packets from ``src`` never reach ``dst`` (what ``dst`` sends still reaches ``src``)."""
        if (src, dst) not in self._rules:
            self._iptables(dst, "-A", src)
            self._rules.add((src, dst))

    def cut(self, a: str, b: str) -> None:
        """Partition ``a`` from ``b`` both ways."""
        self.drop(a, b)
        self.drop(b, a)

    def isolate(self, hosts: Sequence[str], others: Sequence[str]) -> None:
        """Partition every host of ``hosts`` from every host of ``others``, both ways."""
        for a in hosts:
            for b in others:
                self.cut(a, b)

    def heal(self) -> None:
        """Remove every partition."""
        for src, dst in sorted(self._rules):
            self._iptables(dst, "-D", src)
        self._rules.clear()

    def close(self) -> None:
        """Delete every namespace made (processes still inside keep theirs until they exit: stop them first)."""
        errors = []
        if self.linked:
            try:
                _run("ip", "link", "delete", self.tag)
                self.linked = False
            except RuntimeError as e:
                errors.append(str(e))
        for ns in reversed(self.made):
            try:
                _run("ip", "netns", "delete", ns)
            except RuntimeError as e:
                errors.append(str(e))
        self.made.clear()
        if errors:
            raise RuntimeError("; ".join(errors))


@contextmanager
def network(hosts: Sequence[str]) -> Iterator[Network]:
    """A :class:`Network` of ``hosts`` for the block; deleted however the block ends."""
    net = Network(hosts)
    try:
        net.start()
        yield net
    finally:
        net.close()
