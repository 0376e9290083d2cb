"""The driver every host-changing flow uses: an ordered list of named steps, each returning its own
undo; on any exception the undos of the steps already done run in reverse, and the original
error stays the error (a failed undo is recorded and attached to it, never put in its place).

Step boundaries go to one sink (`Events`), which the flows point at the ledger's run recorder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specctl.flows.session import error_text

Undo = Callable[[], None]
Events = Callable[[str, str, str | None], None]  # (step, event, detail): began, ended, failed, undone, undo-failed


@dataclass(frozen=True)
class Step:
    """One named step of a flow; `run` does it and returns how to take it back (or None)."""

    name: str
    run: Callable[[], Undo | None]


@dataclass
class Walk:
    """One host's way through its steps, and back."""

    events: Events
    before: Callable[[], None] = lambda: None  # called before each step: a cancelled run stops here
    done: list[tuple[str, Undo]] = field(default_factory=list)
    undo_errors: list[str] = field(default_factory=list)

    def run(self, steps: Sequence[Step]) -> None:
        """Run the steps in order; when one raises, unwind everything done so far and re-raise."""
        for step in steps:
            try:
                self.before()
                self.events(step.name, "began", None)
                undo = step.run()
                if undo is not None:
                    self.done.append((step.name, undo))
                self.events(step.name, "ended", None)
            except BaseException as exc:
                self._record(step.name, "failed", error_text(exc))
                self.unwind(exc)
                raise

    def unwind(self, cause: BaseException | None = None) -> None:
        """Take back every step done, newest first; keep going past a failed undo."""
        while self.done:
            name, undo = self.done.pop()
            try:
                undo()
            except Exception as exc:  # noqa: BLE001 - the next undo must still run; the cause stays the error
                text = f"undoing {name} failed: {error_text(exc)}"
                self.undo_errors.append(text)
                self._record(name, "undo-failed", error_text(exc))
                if cause is not None:
                    cause.add_note(text)
            else:
                self._record(name, "undone", None)

    def _record(self, step: str, event: str, detail: str | None) -> None:
        try:
            self.events(step, event, detail)
        except Exception as exc:  # noqa: BLE001 - recording must not stop an undo; the ledger error is kept
            self.undo_errors.append(f"recording {step} {event} failed: {error_text(exc)}")
