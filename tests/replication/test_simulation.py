"""The deterministic simulation of walgate's replication core: a seeded slice finds no violation, a long mode runs
many more (``WALGATE_SIM_SEEDS=10000``), and each rule broken on purpose is caught within the slice."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

import pytest
from replication_sim import SCENARIO_NAMES, run_seed

from walgate.replication import epochs, leader, partition
from walgate.replication.epochs import EpochEnd, LeaderEpochCache, TruncationStep
from walgate.replication.partition import NO_LEADER, IsrMember, PartitionState
from walgate.wire.errors import ErrorCode

CI_SEEDS = 200


def _failures(seeds: range, scenario: str | None = None, first: bool = False) -> list[str]:
    """The failing seeds' reports (only the first one when ``first``)."""
    failures: list[str] = []
    for seed in seeds:
        run = run_seed(seed, scenario)
        if run.check.violations:
            failures.append(f"seed {seed} ({run.scenario}): {'; '.join(run.check.violations[:3])} -- rerun: "
                            f"python tests/replication/replication_sim.py --seed {seed}"
                            + (f" --scenario {scenario}" if scenario else ""))
            if first:
                break
    return failures


def test_seeded_slice_has_no_violation() -> None:
    """200 seeds, every scenario ~22 times, each with 0-3 background faults: no violation."""
    seeds = int(os.environ.get("WALGATE_SIM_SEEDS", CI_SEEDS))
    failures = _failures(range(seeds))
    assert not failures, f"{len(failures)} of {seeds} seeds violate an invariant:\n" + "\n".join(failures[:10])


def test_a_seed_reproduces_its_run() -> None:
    """The same seed gives the same run, event for event."""
    first, second = run_seed(12), run_seed(12)
    assert first.trace == second.trace and first.check.acks == second.check.acks
    assert first.check.acks, "the run acknowledged no write: the producers or the leader are broken"


def test_every_scenario_acknowledges_writes_and_elects() -> None:
    """Each scenario exercises what it is for: writes are acknowledged, and leaders change hands or the ISR
    shrinks and expands."""
    for index, name in enumerate(SCENARIO_NAMES):
        acks, changes = 0, 0
        for seed in range(index, index + 5 * len(SCENARIO_NAMES), len(SCENARIO_NAMES)):
            run = run_seed(seed)
            acks += len(run.check.acks)
            changes += run.state.leader_epoch + run.isr_changes
        assert acks > 50 and changes >= 10, (name, acks, changes)


# -- mutations: each breaks one rule; the slice must find a violation ------------------------------------------


def _hw_from_fetched(fetched_end: int, durable_end: int) -> int:
    return fetched_end


def _any_incarnation(member_epoch: int, broker_epoch: int) -> bool:
    return True


def _elect_any_live(state: PartitionState, live: dict[int, int]) -> PartitionState:
    if state.leader != NO_LEADER and state.leader in state.isr_ids:
        return state
    alive = [r for r in state.replicas if r in live]
    if not alive:
        return state
    pick = alive[-1]
    members = set(state.isr) | {IsrMember(pick, live[pick])}
    return replace(state, leader=pick, isr=tuple(sorted(members)), elr=(), leader_epoch=state.leader_epoch + 1,
                   partition_epoch=state.partition_epoch + 1)


def _no_truncation(cache: LeaderEpochCache, log_end: int, answer: EpochEnd) -> TruncationStep:
    return TruncationStep(log_end, True)


_high_watermark, _ack_status = leader.high_watermark, leader.ack_status


def _hw_ignoring_min_isr(current: int, positions: list[int | None], isr_size: int, min_isr: int) -> int:
    return _high_watermark(current, positions, min_isr, min_isr)


def _ack_ignoring_min_isr(hw: int, offset: int, isr_size: int, min_isr: int) -> ErrorCode | None:
    return _ack_status(hw, offset, min_isr, min_isr)

_settle = partition.settle


def _adding_in_sync(state: PartitionState, live: dict[int, int], wiped: frozenset[int] = frozenset()) -> PartitionState:
    """The controller's rules with a move's adding replicas taken as in sync before they caught up."""
    joined = {IsrMember(r, live[r]) for r in state.adding if r in live}
    return _settle(replace(state, isr=tuple(sorted({*state.isr, *joined}))), live, wiped)


MUTATIONS: dict[str, tuple[list[tuple[object, str, Callable[..., object]]], str | None]] = {
    "hw from the fetched, not the durable, end": ([(leader, "hw_position", _hw_from_fetched)], "power_loss"),
    "ISR expansion without the KIP-903 broker epoch": (
        [(partition, "same_incarnation", _any_incarnation), (leader, "same_incarnation", _any_incarnation)],
        "empty_disk"),
    "election from outside the ISR": ([(partition, "elect", _elect_any_live)], None),
    "follower not truncating by epoch": ([(epochs, "follower_truncation", _no_truncation)], None),
    "acks=all answered with the ISR below min.insync.replicas": (
        [(leader, "high_watermark", _hw_ignoring_min_isr), (leader, "ack_status", _ack_ignoring_min_isr)], "lone_leader"),
    "a move's adding replicas taken as in sync before they caught up (KIP-455)": (
        [(partition, "settle", _adding_in_sync)], "replica_moves"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_broken_rule_is_caught(mutation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    patches, scenario = MUTATIONS[mutation]
    for module, name, broken in patches:
        monkeypatch.setattr(module, name, broken)
    failures = _failures(range(CI_SEEDS), scenario, first=True)
    assert failures, f"{mutation}: no violation in {CI_SEEDS} seeds"
    print(f"{mutation}: {failures[0]}")

