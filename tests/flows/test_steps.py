"""The stage driver: undos run newest first on any exception, a failed undo never replaces the
error that caused the walk back, and a finished walk can be taken back on purpose."""

from __future__ import annotations

from typing import Any

import pytest

from specctl.cancel import Cancelled
from specctl.flows.steps import Step, Walk


def recorder() -> tuple[list[tuple[str, str, Any]], Any]:
    seen: list[tuple[str, str, Any]] = []
    return seen, lambda stage, event, detail: seen.append((stage, event, detail))


def test_a_failing_stage_undoes_the_stages_done_newest_first() -> None:
    log: list[str] = []
    seen, events = recorder()

    def fail() -> None:
        raise ValueError("boom")

    stages = [
        Step("a", lambda: (log.append("a"), lambda: log.append("undo a"))[1]),
        Step("b", lambda: None),  # nothing to undo
        Step("c", lambda: (log.append("c"), lambda: log.append("undo c"))[1]),
        Step("d", fail),
        Step("e", lambda: log.append("never") or None),
    ]
    with pytest.raises(ValueError, match="boom"):
        Walk(events).run(stages)
    assert log == ["a", "c", "undo c", "undo a"]
    assert [(s, e) for s, e, _ in seen] == [
        ("a", "began"),
        ("a", "ended"),
        ("b", "began"),
        ("b", "ended"),
        ("c", "began"),
        ("c", "ended"),
        ("d", "began"),
        ("d", "failed"),
        ("c", "undone"),
        ("a", "undone"),
    ]


def test_a_failed_undo_is_attached_to_the_cause_and_the_others_still_run() -> None:
    log: list[str] = []

    def broken_undo() -> None:
        raise OSError("host gone")

    def fail() -> None:
        raise RuntimeError("start-up failed")

    walk = Walk(recorder()[1])
    with pytest.raises(RuntimeError, match="start-up failed") as caught:
        walk.run([Step("a", lambda: lambda: log.append("undo a")), Step("b", lambda: broken_undo), Step("c", fail)])
    assert log == ["undo a"]
    assert caught.value.__notes__ == ["undoing b failed: host gone"]
    assert walk.undo_errors == ["undoing b failed: host gone"]


def test_cancel_is_checked_before_each_stage_and_undoes_too() -> None:
    log: list[str] = []
    cancelled = {"now": False}

    def check() -> None:
        if cancelled["now"]:
            raise Cancelled()

    def first() -> Any:
        cancelled["now"] = True
        return lambda: log.append("undo first")

    with pytest.raises(Cancelled):
        Walk(recorder()[1], before=check).run(
            [Step("first", first), Step("second", lambda: log.append("second") or None)]
        )
    assert log == ["undo first"]


def test_a_finished_walk_can_be_taken_back() -> None:
    log: list[str] = []
    walk = Walk(recorder()[1])
    walk.run([Step("a", lambda: lambda: log.append("undo a")), Step("b", lambda: lambda: log.append("undo b"))])
    walk.unwind()
    walk.unwind()  # nothing left: a second call does nothing
    assert log == ["undo b", "undo a"]


def test_a_recording_failure_after_a_stage_undoes_that_stage_too() -> None:
    log: list[str] = []

    def events(stage: str, event: str, detail: Any) -> None:
        if (stage, event) == ("switch", "ended"):
            raise OSError("database or disk is full")

    with pytest.raises(OSError, match="disk is full"):
        Walk(events).run(
            [
                Step("start", lambda: lambda: log.append("stop new")),
                Step("switch", lambda: lambda: log.append("switch back")),
            ]
        )
    assert log == ["switch back", "stop new"]
