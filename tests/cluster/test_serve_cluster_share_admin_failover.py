"""A replicated cluster's share-group administration answered from the share coordinator's own records (KIP-932's
admin RPCs; docs/cluster.md "Share groups"): three real nodes over a real etcd (stopped by PID), a topic of
replication factor 3 and two share groups that consumed part of it through its leader, one coordinated by another
node, one by the leader itself. After the leader is killed -9, the real Java Admin (kafka-clients 4.3,
compat-tests/java/ShareGroupOffsetsAdmin.java) through a surviving node lists both groups (``Empty``), describes
their share-partition (start offset and lag from the records, though no surviving node used it since it leads it),
alters its start offset (the new leader's share-partition starts there: a real ``KafkaShareConsumer`` receives
exactly the records from it), deletes one group's offsets and the other group; then neither is listed, and no
surviving node's log has a traceback.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from etcd_cluster import EtcdCluster
from serve_support import no_traceback
from test_serve_cluster_share_admin import _admin
from test_serve_cluster_share_failover import COUNT, consumed_then_killed
from test_serve_cluster_shares import TOPIC, _java, _records


def _expected(acknowledged: set[str]) -> tuple[int, int]:
    """(start offset, lag) of the share-partition whose records ``acknowledged`` were ACCEPTed, the others released:
    the first offset not acknowledged, and the records from it on not acknowledged."""
    done = {int(v[1:]) for v in acknowledged}
    start = min(set(range(COUNT)) - done)
    return start, COUNT - start - sum(1 for o in done if o > start)


def test_share_groups_are_described_altered_deleted_and_listed_after_their_partitions_leader_is_killed(
        etcd1: EtcdCluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        _, survivors, (apart, together), acknowledged, _ = consumed_then_killed(stack, etcd1, tmp_path)
        tp = f"{TOPIC}:0"
        port = survivors[0].kafka_port
        listed, offsets_apart, offsets_together = _admin(port, ["list"], ["offsets", apart], ["offsets", together])
        assert {(g["group"], g["state"]) for g in listed} >= {(apart, "Empty"), (together, "Empty")}, listed
        for group, found, acked in ((apart, offsets_apart, acknowledged[0]),
                                    (together, offsets_together, acknowledged[1])):
            start, lag = _expected(acked)
            assert found == [{"tp": tp, "start": start, "lag": lag}], (group, found, acked)

        altered, alter_together, now = _admin(port, ["alter", apart, f"{tp}=25"], ["alter", together, f"{tp}=27"],
                                              ["offsets", apart, tp])
        assert altered == [{"item": tp}] and alter_together == [{"item": tp}], (altered, alter_together)
        assert now == [{"tp": tp, "start": 25, "lag": COUNT - 25}], now
        worker = _java("ShareWorker.java", survivors[1].kafka_port, apart, "--idle", "4", "--timeout", "60")
        assert sorted(r["value"] for r in _records(worker, timeout=90)) == [f"v{i}" for i in range(25, COUNT)], \
            "the new leader's share-partition starts at the altered offset"

        deleted, gone, dropped, listed = _admin(port, ["delete-offsets", apart, TOPIC], ["offsets", apart],
                                                ["delete", together], ["list"])
        assert deleted == [{"item": TOPIC}] and gone == [] and dropped == [{"item": together}], (deleted, gone, dropped)
        assert not {g["group"] for g in listed} & {apart, together}, listed
        for s in survivors:
            no_traceback(s)
