"""Result rows, medians and the printed table; a row may carry the target an issue set for it, and says whether
this run met it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rich.console import Console
from rich.table import Table

T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """What an issue asks of a row: its value, or with ``of_limit`` its value / limit, at least ``bound`` (at most,
    with ``at_most``: latencies, CPU per record)."""

    bound: float
    at_most: bool = False
    of_limit: bool = False

    def met(self, value: float, limit: float) -> bool:
        x = value / limit if self.of_limit else value
        return x <= self.bound if self.at_most else x >= self.bound

    def __str__(self) -> str:
        bound = f"{self.bound:.0%} of limit" if self.of_limit else _number(self.bound)
        return f"{'<=' if self.at_most else '>='} {bound}"


@dataclass(frozen=True)
class Row:
    scenario: str
    value: float
    unit: str
    limit_name: str = ""
    limit: float = 0.0  # the physical limit measured in the same run, same unit
    target: Target | None = None

    @property
    def ratio(self) -> str:
        return f"{self.value / self.limit:.1%}" if self.limit else ""

    @property
    def verdict(self) -> str:
        """"met" or "missed" against the row's target; empty without one."""
        if self.target is None:
            return ""
        return "met" if self.target.met(self.value, self.limit) else "missed"


def median_rate(repeat: int, fn: Callable[[], tuple[int, float]]) -> float:
    """Median over ``repeat`` runs of ``count / seconds`` where ``fn`` returns (count, seconds)."""
    rates = []
    for _ in range(repeat):
        count, seconds = fn()
        rates.append(count / seconds)
    return statistics.median(rates)


def median_run(runs: Sequence[T], rate: Callable[[T], float]) -> T:
    """The run with the median ``rate`` (the middle one of an odd count), kept whole so its other fields agree."""
    return sorted(runs, key=rate)[len(runs) // 2]


def _number(value: float) -> str:
    """Whole numbers from 100 up, two decimals below (seconds of a rebalance); infinity: a wait that timed out."""
    if math.isinf(value):
        return "timed out"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def print_table(rows: list[Row]) -> None:
    table = Table(title="walgate benchmarks (median of runs)")
    for col in ("scenario", "walgate", "unit", "physical limit", "limit", "walgate / limit", "target", ""):
        table.add_column(col, justify="left" if col in ("scenario", "physical limit", "") else "right")
    for r in rows:
        table.add_row(r.scenario, _number(r.value), r.unit, r.limit_name, _number(r.limit) if r.limit else "", r.ratio,
                      str(r.target or ""), r.verdict)
    Console(width=200).print(table)
