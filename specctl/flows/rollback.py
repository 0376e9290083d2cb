"""Rollback: restart an exact stored release, verify it again, move `current`
(and `known-good` when it passes). By default the rollback chooses the newest release on that host whose
verdict passed and which is not current; the host's own files say which those are."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specctl.constants import STARTUP_BUDGET_S
from specctl.engines import get_engine
from specctl.errors import HostError, InputError
from specctl.flows.change import Change, retire
from specctl.flows.recorder import recording
from specctl.flows.report import HostReport
from specctl.flows.session import Context
from specctl.flows.static import CheckReport
from specctl.flows.steps import Walk
from specctl.flows.verify import verify_and_record
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Transport
from specctl.release import release as rel


@dataclass(frozen=True)
class ReleaseState:
    """One release directory as the host describes it."""

    run_id: str
    version: int | None
    passed: bool | None  # None: never verified


# For every release: its id, its one-line summary and its verdict (tab-separated; empty when absent).
_STATES = r"""
for d in "$1"/releases/*/; do
  [ -d "$d" ] || continue
  case $d in *.part.*/) continue;; esac
  id=${d%/}; id=${id##*/}
  printf '%s\t%s\t%s\n' "$id" "$(tr -d '\n\t' < "$d/release.json" 2>/dev/null)" \
    "$(tr -d '\n\t' < "$d/verdict.json" 2>/dev/null)"
done
"""


def release_states(transport: Transport, root: str, profile: str) -> list[ReleaseState]:
    """Every release of the profile on the host, oldest first (run ids sort by time)."""
    done = transport.run(["sh", "-c", _STATES, "sh", f"{root}/{profile}"])
    states = []
    for line in done.stdout.splitlines():
        run_id, summary, verdict = (line.split("\t") + ["", ""])[:3]
        version = _json(summary).get("version")
        passed = _json(verdict).get("passed")
        states.append(
            ReleaseState(
                run_id, int(version) if isinstance(version, int) else None, passed if isinstance(passed, bool) else None
            )
        )
    return sorted(states, key=lambda s: s.run_id)


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def choose_release(
    states: list[ReleaseState], current: str | None, *, to_run: str | None = None, to_version: int | None = None
) -> ReleaseState:
    """The rollback's choice, the release to go back to: the named run, the newest passing release of a version, or the
    newest passing release that is not current."""
    if to_run:
        match = [s for s in states if s.run_id == to_run or s.run_id.startswith(to_run)]
        if len(match) != 1:
            raise InputError(
                f"no single release {to_run!r} on the host"
                if not match
                else f"{to_run!r} matches {len(match)} releases",
                fix="`specctl runs` lists run ids; a deploy's run id is its release's name",
            )
        return match[0]
    candidates = [s for s in states if s.passed and s.run_id != current]
    if to_version is not None:
        candidates = [s for s in states if s.version == to_version and s.passed is not False]
        if not candidates:
            raise InputError(
                f"no release of version {to_version} that did not fail verify on the host",
                fix="deploy that version again (`specctl deploy`), or name a run with --to RUN",
            )
    if not candidates:
        raise InputError(
            "no verified release to roll back to (none passed verify, other than the current one)",
            fix="deploy a known-good profile version, or name a release with --to RUN",
        )
    return candidates[-1]


def rollback(
    ctx: Context,
    host: HostSpec,
    profile: str,
    *,
    to_run: str | None = None,
    to_version: int | None = None,
    parent: str | None = None,
    report: CheckReport | None = None,
) -> HostReport:
    """Go back to a stored release on one host: stop what runs, start the release from its own
    files, switch `current`, verify it, and point `known-good` at it when it passes. A recorded run;
    a release that is not whole is refused before anything stops."""
    session = ctx.session(host, profile)
    current = session.current()
    chosen = choose_release(
        release_states(session.transport, session.root, profile), current, to_run=to_run, to_version=to_version
    )
    docs = session.docs(chosen.run_id)
    release = session.release(chosen.run_id)
    held = False
    try:
        with recording(
            ctx,
            "rollback",
            hosts=[host.name],
            parent=parent,
            profile=docs.profile.model_dump(mode="json", by_alias=True),
            profile_sha256=docs.summary.get("sha256"),
            engine=docs.profile.engine.name,
            engine_version=docs.profile.engine.version,
            inputs={"from": current, "to": chosen.run_id},
        ) as rec:
            session.hold(rec.run_id)
            held = True
            engine = get_engine(docs.profile.engine.name)
            change = Change(
                session,
                release,
                port=docs.port,
                python=docs.profile.engine.python,
                distribution=engine.distribution(),
                startup_phases=engine.startup_phases(),
                budget_s=rel.startup_budget(release, STARTUP_BUDGET_S),
            )
            Walk(rec.events(host.name), before=ctx.cancel.check).run(change.steps())
            try:
                retire(session, chosen.run_id)  # a cluster's job that replaced it stops now that it is current again
            except HostError as exc:
                session.progress(
                    f"the servers of the releases after {chosen.run_id} could not be stopped: {exc.message}"
                )
            mode = (
                "auto"
                if report is not None and report.inputs.profile_sha256 == docs.summary.get("sha256")
                else "ledger"
            )
            verdict = verify_and_record(rec, session, chosen.run_id, report=report, baseline_mode=mode)
            rec.outcome.status = "succeeded" if verdict.passed else "failed"
            rec.outcome.verdict = {
                "passed": verdict.passed,
                "from": current,
                "to": chosen.run_id,
                "hosts": {host.name: verdict.to_dict()},
            }
        held = False
        rec.keep(session, chosen.run_id, let_go=True)  # the run's copy, and the lock released, in one round trip
    finally:
        if held:
            session.let_go()
    return HostReport(
        host.name,
        True,
        chosen.run_id,
        f"rolled back from {current} to {chosen.run_id}" + ("" if verdict.passed else " (its verify FAILED too)"),
        verdict.to_dict(),
        chosen.run_id,
        verdict.to_dict(),
    )
