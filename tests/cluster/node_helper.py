"""A small process that runs the control-plane library as a node would: registration, election, and while it is the
controller an append every 0.1 s. It prints one JSON object a line on stdout for the test to follow:
``registered`` (broker epoch, lease: at each registration), ``controller`` (epoch), ``appended`` (seq, epoch), ``refused`` (epoch, error),
``stepped_down`` (epoch).

    python node_helper.py ENDPOINTS CLUSTER_ID NODE_ID DATA_DIR TTL
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path

from walgate.cluster.election import ControllerElection
from walgate.cluster.etcd import EtcdSession, parse_endpoints
from walgate.cluster.incarnation import load_or_create
from walgate.cluster.model import ControlPlaneUnavailable, Keys, NodeInfo, NotController
from walgate.cluster.records import RecordLog
from walgate.cluster.registry import NodeRegistration


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


async def main(endpoints: str, cluster_id: str, node_id: int, data_dir: Path, ttl: int) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    session = EtcdSession(parse_endpoints(endpoints), timeout=2.0)
    keys = Keys(cluster_id)
    registration = NodeRegistration(session, keys, NodeInfo(node_id, load_or_create(data_dir)), ttl=ttl)
    election = ControllerElection(session, keys, registration)
    log = RecordLog(session, keys, election)
    tasks = [asyncio.create_task(registration.run()), asyncio.create_task(election.run())]
    said_lease: int | None = None
    controller_epoch: int | None = None
    while not any(t.done() for t in tasks):
        await asyncio.sleep(0.1)
        if registration.epoch is not None and registration.lease_id != said_lease:
            said_lease = registration.lease_id
            say("registered", epoch=registration.epoch, lease=said_lease)
        epoch = election.epoch
        if epoch != controller_epoch:
            if controller_epoch is not None:
                say("stepped_down", epoch=controller_epoch)
            if epoch is not None:
                say("controller", epoch=epoch)
            controller_epoch = epoch
        if epoch is None:
            continue
        try:
            seq = await log.append([b"node %d" % node_id])
            say("appended", seq=seq, epoch=epoch)
        except NotController as e:
            say("refused", epoch=epoch, error=str(e))
        except ControlPlaneUnavailable as e:
            say("unavailable", error=str(e))
    for t in tasks:
        t.result()  # a task that ended raised: show it


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5])))
