"""Repository-wide pytest fixtures (the helpers behind them live in livewalgate.py) and hooks."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest

from livewalgate import WalgateServer, running_walgate


@pytest.fixture
def walgate_server(tmp_path: Path) -> Iterator[WalgateServer]:
    """A running ``walgate serve`` with a fresh data directory under ``tmp_path``."""
    with running_walgate(tmp_path / "walgate") as server:
        yield server


_TASKS_OUT = pytest.StashKey[TextIO]()


def pytest_configure(config: pytest.Config) -> None:
    """With ``-o faulthandler_timeout=S``: a copy of the terminal's stderr (as faulthandler's, taken before output
    is captured) for :func:`pytest_runtest_call`'s task stacks."""
    if float(config.getini("faulthandler_timeout") or 0) > 0:
        config.stash[_TASKS_OUT] = os.fdopen(os.dup(sys.stderr.fileno()), "w")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _TASKS_OUT in config.stash:
        config.stash[_TASKS_OUT].close()


def _print_tasks(test: str, out: TextIO) -> None:
    """On the event loop: print the stack of each of its tasks."""
    tasks = asyncio.all_tasks()
    print(f"\n{test}: still running; the stacks of its event loop's {len(tasks)} tasks:", file=out)
    for task in tasks:
        task.print_stack(file=out)
    out.flush()


def _ask_loops_for_tasks(test: str, out: TextIO) -> None:
    """From the timer's thread: each running event loop prints its tasks when it next runs a callback (a loop
    blocked in a call does not: faulthandler's thread stacks show where)."""
    for loop in [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()]:
        with contextlib.suppress(RuntimeError):  # (closed meanwhile: the test ended)
            loop.call_soon_threadsafe(_print_tasks, test, out)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """With ``-o faulthandler_timeout=S``: a test still running after S seconds also prints its asyncio tasks'
    stacks (faulthandler prints only the threads', where an awaiting task does not show)."""
    timer = None
    if _TASKS_OUT in item.config.stash:
        timer = threading.Timer(float(item.config.getini("faulthandler_timeout")), _ask_loops_for_tasks,
                                (item.nodeid, item.config.stash[_TASKS_OUT]))
        timer.daemon = True
        timer.start()
    try:
        return (yield)
    finally:
        if timer is not None:
            timer.cancel()
