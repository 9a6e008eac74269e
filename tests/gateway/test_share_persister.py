"""The share coordinator's answers to a replicated cluster's share-partition leaders
(walgate/gateway/kafka/share_persister.py): a write is applied only once its round succeeded, a write of an older
leader epoch than the stored state's is refused (FENCED_LEADER_EPOCH) and changes nothing, a deletion removes the
state, and a read answers each key's stored value (None: none)."""

from __future__ import annotations

from walgate.gateway.kafka.share_persister import read_states, write_states
from walgate.storage.durability import Unsynced
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog
from walgate.wire.errors import ErrorCode

A, B = ("g", "t", 0), ("g", "t", 1)
V1 = {"s": 3, "e": 4, "r": [[3, 3, 0, 1]]}
V2 = {"s": 4, "e": 4, "r": []}


def settled(log: ReplicatedShareStateLog) -> None:
    """The round of what was queued succeeded (the in-sync replicas took it)."""
    sync = log.take_sync()
    assert sync is not None
    sync.done()


def test_writes_apply_at_their_round_and_an_older_leader_epoch_is_fenced() -> None:
    log = ReplicatedShareStateLog(0, lambda: 1_700_000_000_000, Unsynced(lambda _: None))
    assert write_states(log, [(A, V1, 3)]) == {}
    assert read_states(log, [A, B]) == {A: None, B: None}, "nothing is answered before the round succeeded"
    settled(log)
    assert read_states(log, [A, B]) == {A: {**V1, "l": 3}, B: None}
    assert write_states(log, [(A, V2, 2), (B, V1, 0)]) == {A: ErrorCode.fenced_leader_epoch}
    settled(log)
    assert read_states(log, [A, B]) == {A: {**V1, "l": 3}, B: {**V1, "l": 0}}
    assert write_states(log, [(A, V2, 4), (B, None, 0)]) == {}  # a later leader, and a deletion
    settled(log)
    assert read_states(log, [A, B]) == {A: {**V2, "l": 4}, B: None}
