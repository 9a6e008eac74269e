"""The share coordinator's answers to a replicated cluster's share-partition leaders
(walgate/gateway/kafka/share_persister.py): a write is applied only once its round succeeded, a write or read of an
older leader epoch than the newest state's (queued ones included) is refused (FENCED_LEADER_EPOCH) and changes
nothing, a read of a newer one records that epoch with the state (the previous leader is fenced from then on), a
read of a state not durable yet writes it again (answered once durable), a deletion removes the state."""

from __future__ import annotations

from walgate.gateway.kafka.share_persister import StateRead, read_states, write_states
from walgate.storage.durability import Unsynced
from walgate.storage.replicated_coordinator_log import ReplicatedShareStateLog
from walgate.wire.errors import ErrorCode

A, B = ("g", "t", 0), ("g", "t", 1)
V1 = {"s": 3, "e": 4, "r": [[3, 3, 0, 1]]}
V2 = {"s": 4, "e": 4, "r": []}
FENCED = StateRead(None, ErrorCode.fenced_leader_epoch)


def settled(log: ReplicatedShareStateLog) -> None:
    """The round of what was queued succeeded (the in-sync replicas took it)."""
    sync = log.take_sync()
    assert sync is not None
    sync.done()


def test_writes_apply_at_their_round_and_an_older_leader_epoch_is_fenced() -> None:
    log = ReplicatedShareStateLog(0, lambda: 1_700_000_000_000, Unsynced(lambda _: None))
    assert write_states(log, [(A, V1, 3)]) == {}
    assert log.states() == {}, "nothing is applied before the round succeeded"
    settled(log)
    assert read_states(log, [(A, 3), (B, 0)]) == {A: StateRead({**V1, "l": 3}), B: StateRead(None)}
    assert log.take_sync() is None, "a read of the stored epoch writes nothing"
    assert write_states(log, [(A, V2, 2), (B, V1, 0)]) == {A: ErrorCode.fenced_leader_epoch}
    settled(log)
    assert read_states(log, [(A, 2), (B, 0)]) == {A: FENCED, B: StateRead({**V1, "l": 0})}
    assert write_states(log, [(A, V2, 4), (B, None, 0)]) == {}  # a later leader, and a deletion
    settled(log)
    assert read_states(log, [(A, 4), (B, 0)]) == {A: StateRead({**V2, "l": 4}), B: StateRead(None)}


def test_a_read_of_a_newer_leader_epoch_fences_the_previous_leader() -> None:
    log = ReplicatedShareStateLog(0, lambda: 1_700_000_000_000, Unsynced(lambda _: None))
    write_states(log, [(A, V1, 3)])
    settled(log)
    assert read_states(log, [(A, 5)]) == {A: StateRead({**V1, "l": 3})}  # the new leader gets the state
    settled(log)  # the epoch it read in is recorded with it
    assert write_states(log, [(A, V2, 3)]) == {A: ErrorCode.fenced_leader_epoch}, "the previous leader is fenced"
    assert log.take_sync() is None and read_states(log, [(A, 5)]) == {A: StateRead({**V1, "l": 5})}
    assert read_states(log, [(A, -1)]) == {A: StateRead({**V1, "l": 5})} and log.take_sync() is None, \
        "a node that does not lead the partition reads it and fences nobody"


def test_states_queued_and_not_durable_fence_and_are_read_only_once_durable() -> None:
    log = ReplicatedShareStateLog(0, lambda: 1_700_000_000_000, Unsynced(lambda _: None))
    write_states(log, [(A, V1, 3)])
    settled(log)
    assert read_states(log, [(A, 5)]) == {A: StateRead({**V1, "l": 3})}  # its epoch 5 queued, not durable yet
    assert write_states(log, [(A, V2, 4)]) == {A: ErrorCode.fenced_leader_epoch}, "fenced by the queued read"
    assert write_states(log, [(B, V2, 1)]) == {}
    assert read_states(log, [(B, 1)]) == {B: StateRead({**V2, "l": 1})}
    sync = log.take_sync()
    assert sync is not None
    sync.error = OSError(5, "not taken by the in-sync replicas")
    sync.done()  # the read's write refused with the rest: the lane's call of that read raised, nothing answered
    assert read_states(log, [(A, 5), (B, 1)]) == {A: StateRead({**V1, "l": 3}), B: StateRead(None)}
