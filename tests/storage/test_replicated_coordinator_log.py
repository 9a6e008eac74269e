"""A replicated cluster's coordinator partition log (walgate.storage.replicated_coordinator_log): its writes are
batches a group-commit round hands the gateway, applied only once that round succeeded, refused whole when it
failed; a partition's replay rebuilds what was applied; a log of a partition not led here refuses every write."""

from __future__ import annotations

import errno

import pytest

from walgate.storage.coordinator_log import Committed
from walgate.storage.coordinator_records import replay_records
from walgate.storage.durability import Unsynced
from walgate.storage.errors import StorageUnavailable
from walgate.storage.replicated_coordinator_log import (
    PersistedShareStateLog,
    ReplicatedCoordinatorLog,
    ReplicatedShareStateLog,
    ReplicatedTransactionLog,
    ShareStateSync,
    not_led,
)


def _log() -> tuple[ReplicatedCoordinatorLog, Unsynced]:
    unsynced = Unsynced(lambda _: None)
    return ReplicatedCoordinatorLog(3, lambda: 1_700_000_000_000, unsynced), unsynced


def test_a_round_is_one_batch_whose_replay_is_what_the_log_applies_once_it_succeeded() -> None:
    log, unsynced = _log()
    log.commit("g", [("t", 0, Committed(5, 2, "m", 11)), ("t", 1, Committed(7, 2, None, 11))])
    log.write_groups([("g", {"type": "classic", "generation": 4})])
    assert log.get("g", "t", 0) is None and log.groups() == {}, "nothing is seen before its round succeeded"
    assert [target for _, target in unsynced.take()] == [2]
    first = log.take_sync()
    assert first is not None and log.take_sync() is None  # one round at a time
    first.done()
    assert log.get("g", "t", 0) == Committed(5, 2, "m", 11) and log.get("g", "t", 1) == Committed(7, 2, None, 11)
    assert log.groups() == {"g": {"type": "classic", "generation": 4}}
    assert log.delete("g", "t", 1) == 1
    second = log.take_sync()
    assert second is not None
    second.done()
    assert log.get("g", "t", 1) is None
    replayed = replay_records([first.body, second.body]).offsets  # what a new leader loads from the partition
    assert dict(replayed.items()) == dict(log.items()) and replayed.groups() == log.groups()
    again = ReplicatedCoordinatorLog.loaded(3, replayed, lambda: 0)
    assert dict(again.items()) == dict(log.items()) and again.groups() == log.groups()


def test_a_round_the_in_sync_replicas_did_not_take_refuses_every_write_it_covered() -> None:
    log, _ = _log()
    log.commit("g", [("t", 0, Committed(5, 2, None, 11))])
    sync = log.take_sync()
    assert sync is not None
    log.commit("g", [("t", 0, Committed(6, 2, None, 12))])  # queued while the round is out
    sync.error = OSError(errno.EAGAIN, "not taken by the in-sync replicas: NOT_LEADER_OR_FOLLOWER")
    sync.done()
    assert log.get("g", "t", 0) is None and log.refusals == 1 and log.take_sync() is None


def test_a_round_is_never_run_as_a_file_write() -> None:
    """Without the gateway's writer a round fails (its log has no file): nothing applied."""
    log, _ = _log()
    log.write_groups([("g", {"v": 1})])
    sync = log.take_sync()
    assert sync is not None
    sync.run()
    assert isinstance(sync.error, OSError)
    sync.done()
    assert log.groups() == {}


def test_a_partition_not_led_here_reads_empty_and_refuses_writes() -> None:
    log = not_led(1)
    assert log.groups() == {} and list(log.items()) == []
    with pytest.raises(StorageUnavailable):
        log.commit("g", [("t", 0, Committed(1, 0, None, 1))])
    with pytest.raises(StorageUnavailable):
        log.write_groups([("g", {"v": 1})])
    assert log.delete(topic="t") == 0  # nothing of it here: nothing written


def test_transaction_states_and_held_offsets_are_records_of_their_own_kind_replayed_apart() -> None:
    """A transactional id's state (``["t", id]``) and offsets held for its transaction (``["h", id]``) in one
    partition: the same id in both, each applied once its round succeeded and replayed into its own log."""
    unsynced = Unsynced(lambda _: None)
    states = ReplicatedTransactionLog(3, "t", lambda: 1_700_000_000_000, unsynced)
    held = ReplicatedTransactionLog(3, "h", lambda: 1_700_000_000_000, unsynced)
    states.append([("app", {"pid": 1, "state": "Ongoing"})])
    held.append([("app", {"pid": 1, "proxy": True})])
    assert states.records == {} and held.records == {}, "nothing is seen before its round succeeded"
    rounds = [log.take_sync() for log in (states, held)]
    for sync in rounds:
        assert sync is not None
        sync.done()
    assert states.records == {"app": {"pid": 1, "state": "Ongoing"}} and held.records == {"app": {"pid": 1, "proxy": True}}
    held.append([("app", None)])
    last = held.take_sync()
    assert last is not None
    last.done()
    replayed = replay_records([sync.body for sync in (*rounds, last) if sync is not None])
    assert dict(replayed.transactions.records) == states.records and dict(replayed.held.records) == {}
    again = ReplicatedTransactionLog.loaded(3, "t", replayed.transactions.records, lambda: 0)
    assert again.records == states.records


def test_a_refused_transaction_round_names_every_id_it_refused() -> None:
    """The ids of the writes a failed round covered and of those queued since go to ``refused`` (the coordinator
    takes back what it applied ahead of them); nothing is applied."""
    told: list[set[str]] = []
    log = ReplicatedTransactionLog(0, "t", lambda: 1, Unsynced(lambda _: None), refused=told.append)
    log.append([("a", {"pid": 1})])
    sync = log.take_sync()
    assert sync is not None
    log.append([("b", {"pid": 2}), ("c", None)])
    sync.error = OSError(errno.EAGAIN, "not taken by the in-sync replicas: NOT_LEADER_OR_FOLLOWER")
    sync.done()
    assert told == [{"a", "b", "c"}] and log.records == {} and log.take_sync() is None
    with pytest.raises(StorageUnavailable):
        ReplicatedTransactionLog(0, "h", lambda: 1).append([("a", {"pid": 1})])  # no gateway round: refused


SHARE = {"s": 10, "e": 12, "r": [[10, 10, 2, 1], [11, 11, 0, 1]]}


def test_share_states_are_one_batch_a_round_whose_replay_is_what_the_log_applies() -> None:
    unsynced = Unsynced(lambda _: None)
    log = ReplicatedShareStateLog(2, lambda: 1_700_000_000_000, unsynced)
    log.write([(("g", "t", 0), SHARE), (("g", "t", 1), SHARE)])
    assert log.states() == {}, "nothing is seen before its round succeeded"
    first = log.take_sync()
    assert first is not None
    first.done()
    log.write([(("g", "t", 1), None)])
    second = log.take_sync()
    assert second is not None
    log.write([(("g", "t", 0), {**SHARE, "s": 11}), (("h", "t", 0), SHARE)])  # refused with the round it follows
    second.error = OSError(errno.EAGAIN, "not taken by the in-sync replicas: NOT_LEADER_OR_FOLLOWER")
    second.done()
    assert log.states() == {("g", "t", 0): SHARE, ("g", "t", 1): SHARE} and log.refusals == 1
    replayed = replay_records([first.body]).shares  # what a new leader loads from the partition
    assert dict(replayed.states()) == dict(log.states())
    assert dict(ReplicatedShareStateLog.loaded(2, replayed.states(), lambda: 0).states()) == dict(log.states())
    with pytest.raises(OSError, match="group commit only"):
        log._append_locked(b"x")


def test_a_persisted_share_log_hands_its_writer_the_records_of_a_round_and_keeps_none() -> None:
    unsynced = Unsynced(lambda _: None)
    log = PersistedShareStateLog(unsynced)
    assert log.write([(("g", "t", 0), SHARE)]) == 1
    assert log.write([(("g", "t", 0), None), (("g", "t", 1), SHARE)]) == 2
    sync = log.take_sync()
    assert isinstance(sync, ShareStateSync) and sync.body == b"" and sync.covers == 2
    assert sync.records == [(("g", "t", 0), SHARE), (("g", "t", 0), None), (("g", "t", 1), SHARE)]
    log.write([(("g", "t", 2), SHARE)])
    sync.done()
    assert log.durable_to == 2 and log.states() == {}  # durable, and kept by the coordinator partitions only
    refused = log.take_sync()
    assert isinstance(refused, ShareStateSync) and refused.records == [(("g", "t", 2), SHARE)]
    refused.error = OSError(errno.EAGAIN, "group 'g': COORDINATOR_NOT_AVAILABLE")
    refused.done()
    assert log.durable_to == 2 and log.refusals == 1 and log.take_sync() is None
