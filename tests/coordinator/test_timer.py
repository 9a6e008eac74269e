"""The keyed timer that fires only when polled."""

from __future__ import annotations

from walgate.coordinator import KeyedTimer


def _run(timer: KeyedTimer[str], now: int) -> list[str]:
    return [operation(now) for operation in timer.expired(now)]


def test_fires_due_timers_in_deadline_order_and_once():
    timer: KeyedTimer[str] = KeyedTimer()
    timer.schedule("b", 20, lambda now: f"b@{now}")
    timer.schedule("a", 10, lambda now: f"a@{now}")
    timer.schedule("c", 30, lambda now: f"c@{now}")
    assert timer.next_deadline() == 10
    assert _run(timer, 9) == []
    assert _run(timer, 25) == ["a@25", "b@25"]
    assert timer.next_deadline() == 30
    assert _run(timer, 25) == []
    assert _run(timer, 30) == ["c@30"]
    assert timer.next_deadline() is None


def test_same_deadline_fires_in_scheduling_order():
    timer: KeyedTimer[str] = KeyedTimer()
    for key in ("x", "y", "z"):
        timer.schedule(key, 5, lambda now, key=key: key)
    assert _run(timer, 5) == ["x", "y", "z"]


def test_schedule_replaces_and_cancel_drops():
    timer: KeyedTimer[str] = KeyedTimer()
    timer.schedule("k", 10, lambda now: "first")
    timer.schedule("k", 50, lambda now: "second")
    timer.schedule("gone", 5, lambda now: "gone")
    timer.cancel("gone")
    timer.cancel("never-scheduled")
    assert timer.next_deadline() == 50
    assert _run(timer, 49) == []
    assert _run(timer, 50) == ["second"]


def test_an_operation_may_cancel_a_later_due_timer():
    timer: KeyedTimer[str] = KeyedTimer()
    timer.schedule("first", 1, lambda now: timer.cancel("second") or "first")
    timer.schedule("second", 2, lambda now: "second")
    assert _run(timer, 10) == ["first"]


def test_timers_scheduled_while_firing_wait_for_the_next_poll():
    timer: KeyedTimer[str] = KeyedTimer()

    def again(now: int) -> str:
        timer.schedule("loop", now, again)  # zero delay: must not spin
        return f"loop@{now}"

    timer.schedule("loop", 0, again)
    timer.schedule("late", 3, lambda now: "late")
    assert _run(timer, 3) == ["loop@3", "late"]
    assert timer.next_deadline() == 3
    assert _run(timer, 3) == ["loop@3"]


def test_stale_entries_are_compacted():
    timer: KeyedTimer[str] = KeyedTimer()
    for i in range(1_000):
        timer.schedule("heartbeat", 10_000 + i, lambda now: "hb")
    assert len(timer._heap) <= 2 * 1 + 64 + 1
    assert timer.next_deadline() == 10_999
    assert _run(timer, 20_000) == ["hb"]
