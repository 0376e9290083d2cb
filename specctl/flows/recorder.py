"""The one sink through which a flow writes the ledger: a run opened and closed, its step
boundaries, what it did on each host, and the copy of the run each release directory keeps.

The copy is written whole (release/whole.py: a temporary name, synced, then renamed) or not at all;
one that cannot be written (a full disk, said as such) is a note, never a failure of the run: the run
happened, and the ledger has it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from specctl.errors import HostError
from specctl.flows.session import Context, HostSession, error_text
from specctl.flows.steps import Events
from specctl.hosts.group import parallel
from specctl.ledger.records import Outcome
from specctl.release import release as rel
from specctl.release import whole


class Recorder:
    """One open run."""

    def __init__(self, ctx: Context, run_id: str, kind: str, outcome: Outcome, fields: dict[str, Any]) -> None:
        self.ctx = ctx
        self.run_id = run_id
        self.kind = kind
        self.outcome = outcome
        self._fields = fields

    def events(self, host: str) -> Events:
        """The step-boundary sink of one host: each boundary is a ledger row, and a line of progress."""

        def emit(step: str, event: str, detail: str | None) -> None:
            self.ctx.on_event(host, {"event": "step", "step": step, "state": event, "detail": detail})
            if event in ("failed", "undone", "undo-failed"):
                self.ctx.on_note(host, f"{step} {event}" + (f": {detail}" if detail else ""))
            self.ctx.ledger.record_event(self.run_id, host, step, event, detail)

        return emit

    def host(self, host: str, **record: Any) -> None:
        """What the run did on one host (release, facts, commands, measurements, verdict, passed)."""
        self.ctx.ledger.record_host(self.run_id, host, **record)

    def snapshot(self) -> dict[str, Any]:
        """The run as the ledger has it, or as this process knows it when the ledger cannot answer."""
        try:
            return self.ctx.ledger.get(self.run_id).to_dict()
        except Exception:  # noqa: BLE001 - the host copy must not depend on a healthy ledger
            return {
                "id": self.run_id,
                "kind": self.kind,
                "command": self.ctx.command,
                "status": self.outcome.status,
                "verdict": self.outcome.verdict,
                "note": "written from memory: the ledger could not be read",
                **{k: v for k, v in self._fields.items() if k in ("hosts", "reason", "parent")},
            }

    def keep(self, session: HostSession, release_id: str | None, *, let_go: bool = False) -> None:
        """The release directory's own copy of this run (and its newest verdict), so the history can
        be rebuilt from the hosts. With `let_go`, the session's hold on the lock ends in the same
        round trip."""
        copy = None
        if release_id:
            data = (json.dumps(self.snapshot(), indent=2, sort_keys=True, default=str) + "\n").encode()
            copy = (session.release(release_id).path(f"{rel.RUNS_DIR}/{self.run_id}.json"), data)
        if let_go and copy is not None:
            failed: list[HostError] = []
            session.let_go(copy, on_failure=failed.append)  # the ledger has the run: a copy not written is said
            if failed:
                self._not_kept(session, copy[0], failed[0], released=not session.holding)
        elif let_go:
            session.let_go()
        elif copy is not None:
            try:
                whole.put(session.transport, *copy)
            except HostError as exc:
                self._not_kept(session, copy[0], exc, released=False)

    def _not_kept(self, session: HostSession, path: str, exc: HostError, *, released: bool) -> None:
        """Say that the host's copy of the run was not written, and that the run itself stands;
        `released`: the lock's release went in the same round trip, whose fate is looked at."""
        lock = ""
        if released:
            try:
                held = session.transport.run(["test", "-e", f"{session.base}/lock"], check=False).rc == 0
            except HostError:
                held = True
            lock = (
                f"; the lock {session.base}/lock may still be there: `specctl unlock {session.profile}` "
                "removes it once this command has ended"
                if held
                else ""
            )
        session.note(
            f"run {self.run_id} happened and the ledger has it (`specctl show {self.run_id}`); only its copy "
            f"in the release directory was not kept ({path}, nothing half-written under that name): "
            f"{error_text(exc)}{lock}"
        )

    def keep_all(self, kept: Sequence[tuple[HostSession, str | None]]) -> None:
        """`keep` on every host at once, each session's hold ending in the same round trip (one
        after another, eight hosts waited sixteen round trips)."""
        if not kept:
            return
        parallel({s.name: (s, rid) for s, rid in kept}, lambda pair: self.keep(*pair, let_go=pair[0].holding))


def let_go_all(sessions: Sequence[HostSession]) -> None:
    """End the hold of every session that still holds its lock (a command that stopped early)."""
    holding = [s for s in sessions if s.holding]
    if holding:
        parallel({s.name: s for s in holding}, lambda s: s.let_go())


@contextmanager
def recording(ctx: Context, kind: str, *, hosts: Sequence[str], **fields: Any) -> Iterator[Recorder]:
    """Open a run for the block; it closes as the block ends (killed by a signal, failed by an
    exception, else with the status and verdict the block set on `outcome`)."""
    run_id = rel.new_run_id()
    all_fields = {"command": ctx.command, "hosts": list(hosts), "reason": ctx.reason, **fields}
    with ctx.ledger.recording(run_id, kind, **all_fields) as outcome:
        yield Recorder(ctx, run_id, kind, outcome, all_fields)
