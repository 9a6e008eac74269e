"""A transaction over a replicated Kafka-native partition whose leader was killed (issue 25): three real ``walgate
serve --cluster`` nodes with ``replication.enable=true`` over a real etcd (stopped by PID).

Topic ``tx``'s one partition is assigned to three replicas, the transactional id's coordinator last. Its leader, the
first, is killed with kill -9; once the second leads it (the ISR's next in replica order: not the coordinator, which
must send the marker there), a confluent-kafka transactional producer bootstrapped on the survivors commits a transaction there, and a
read_committed consumer reads its records: the coordinator sent the commit marker to the partition's new leader
(the one its partition state names, not the dead first replica) and counted it once the in-sync replicas held it.
Before the fix the marker went to the dead node, the commit was answered (decided) and read_committed stopped
before the transaction until that node came back.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from etcd_cluster import EtcdCluster
from serve_support import eventually, leader_of, no_traceback
from test_serve_cluster_replicated_topics import bootstrap, three_nodes
from test_serve_cluster_transactions import _find_txn
from test_transactions_coordinator import read_committed  # compat-tests/, which serve_support puts on the path

from walgate.wire.errors import ErrorCode

TOPIC, TID = "tx", "tx-failover"


def test_a_transaction_commits_on_the_new_leader_of_a_partition_whose_leader_was_killed(etcd1: EtcdCluster,
                                                                                        tmp_path: Path) -> None:
    with ExitStack() as stack:
        nodes = three_nodes(stack, etcd1, tmp_path)
        # (the first FindCoordinator makes __consumer_offsets: COORDINATOR_NOT_AVAILABLE until its leader is elected)
        eventually("the transactional id's coordinator", lambda: _find_txn(nodes[0].kafka_port, TID)[0][3] == ErrorCode.none)
        [(_, coordinator, _, _)] = _find_txn(nodes[0].kafka_port, TID)
        first, second = (n for n in (1, 2, 3) if n != coordinator)
        admin = AdminClient({"bootstrap.servers": bootstrap(nodes)})
        configs = {"min.insync.replicas": "2", "flush.messages": "1"}
        admin.create_topics([NewTopic(TOPIC, 1, replica_assignment=[[first, second, coordinator]], config=configs)]
                            )[TOPIC].result(30)
        db = f"kafka_{TOPIC}"
        eventually(f"node {first} leads", lambda: (leader_of(nodes, db, 0) or (0, None))[1] is nodes[first - 1])
        first_epoch = leader_of(nodes, db, 0)[0]  # type: ignore[index]
        dead = nodes[first - 1]
        dead.proc.kill()
        dead.proc.wait(timeout=30)
        survivors = [s for s in nodes if s is not dead]
        eventually(f"node {second} leads (the ISR's next in replica order)",
                   lambda: (leader_of(survivors, db, 0, first_epoch) or (0, None))[1] is nodes[second - 1])

        producer = Producer({"bootstrap.servers": bootstrap(survivors), "transactional.id": TID,
                             "message.timeout.ms": 60_000})
        producer.init_transactions(60)
        producer.begin_transaction()
        for k in range(3):
            producer.produce(TOPIC, f"committed-{k}".encode(), partition=0)
        producer.commit_transaction(60)
        assert read_committed(bootstrap(survivors), TOPIC, 1, timeout=60) == [
            f"committed-{k}" for k in range(3)]
        for server in nodes:
            no_traceback(server)
