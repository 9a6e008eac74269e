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
from walgate.storage.replicated_coordinator_log import ReplicatedCoordinatorLog, not_led


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
