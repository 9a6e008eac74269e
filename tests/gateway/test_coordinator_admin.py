"""coordinator_admin.py's requests to a group's coordinator cannot abort the process that makes them; librdkafka's
own admin timeout can (confluentinc/librdkafka#4605): a DescribeConsumerGroups whose ``request_timeout`` lapses
before the coordinator's connection is up, the coordinator reached afterwards, calls abort(). Each in a child Python
process against one real walgate node (stopped by PID); the child's abort would otherwise kill this test process.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from livewalgate import WalgateServer

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys, time
from concurrent import futures
from confluent_kafka.admin import AdminClient
from coordinator_admin import described_groups

bootstrap, how = sys.argv[1], sys.argv[2]
groups = [f"g{n}" for n in range(30)]
for _ in range(20):
    if how == "librdkafka":  # its timeout lapses while the coordinator's connection is made; then it is up
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures.wait(admin.describe_consumer_groups(groups, request_timeout=0.005).values(), timeout=30)
        time.sleep(1)
        del admin
    else:  # as short a wait, its own
        described_groups(bootstrap, groups, 0.005)
print("no abort")
"""


def _child(server: WalgateServer, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, f"127.0.0.1:{server.kafka_port}", how], cwd=ROOT,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


def test_a_short_wait_of_coordinator_admin_does_not_abort(walgate_server: WalgateServer) -> None:
    run = _child(walgate_server, "coordinator_admin")
    assert (run.returncode, run.stdout.strip()) == (0, "no abort"), run.stderr[-2000:]


def test_librdkafkas_own_timeout_lapsing_before_the_coordinator_is_reached_aborts(
        walgate_server: WalgateServer) -> None:
    """Why coordinator_admin exists; when a confluent-kafka upgrade makes this fail, its workaround can go."""
    run = _child(walgate_server, "librdkafka")
    assert run.returncode == -signal.SIGABRT, (run.returncode, run.stdout, run.stderr[-2000:])
    assert "rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0' failed" in run.stderr
