"""A process that follows the catalog record stream as a node does (registration and ``RecordFollower``, never
standing for controller), for the partition tests. It prints one JSON object a line on stdout: ``registered``
(broker epoch, lease) at each registration (a new lease each time; a new epoch only in a new process), ``applied``
(seq, epoch) for each record applied, in the order applied.
(node_helper.py is the process that stands for controller and appends.)

    python follower_helper.py ENDPOINTS CLUSTER_ID NODE_ID DATA_DIR TTL
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

from walgate.cluster.etcd import EtcdSession, parse_endpoints
from walgate.cluster.incarnation import load_or_create
from walgate.cluster.model import Keys, NodeInfo
from walgate.cluster.records import RecordFollower
from walgate.cluster.registry import NodeRegistration


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def applied(seq: int, epoch: int, payload: bytes) -> None:
    say("applied", seq=seq, epoch=epoch)


def restored(seq: int, state: bytes) -> None:
    raise AssertionError(f"nothing here trims the stream, yet a snapshot up to record {seq} was restored")


async def main(endpoints: str, cluster_id: str, node_id: int, data_dir: Path, ttl: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    session = EtcdSession(parse_endpoints(endpoints), timeout=2.0)
    keys = Keys(cluster_id)
    registration = NodeRegistration(session, keys, NodeInfo(node_id, load_or_create(data_dir)), ttl=ttl)
    follower = RecordFollower(session, keys, applied, restored)
    tasks = [asyncio.create_task(registration.run()), asyncio.create_task(follower.run())]
    said_lease: int | None = None
    while not any(t.done() for t in tasks):
        await asyncio.sleep(0.1)
        if registration.epoch is not None and registration.lease_id != said_lease:
            said_lease = registration.lease_id
            say("registered", epoch=registration.epoch, lease=said_lease)
    for t in tasks:
        t.result()  # a task that ended raised: show it


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])))
