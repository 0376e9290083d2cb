"""Rollback (DESIGN section 9): restart an exact stored release, verify it again, move `current`
(and `known-good` when it passes). The default target is the newest release on that host whose
verdict passed and which is not current; the host's own files say which those are."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specctl.cancel import NEVER, CancelToken
from specctl.constants import STARTUP_BUDGET_S
from specctl.engines import get_engine
from specctl.errors import InputError
from specctl.flows.verify import HostVerdict, read_release, verify_release
from specctl.hosts.transport import Transport
from specctl.release import release as rel
from specctl.release.readiness import wait_ready
from specctl.verdict.measure import Measurement


@dataclass(frozen=True)
class ReleaseState:
    """One release directory as the host describes it."""

    run_id: str
    version: int | None
    passed: bool | None  # None: never verified


# For every release: its id, its one-line summary and its verdict (tab-separated; empty when absent).
_STATES = r'''
for d in "$1"/releases/*/; do
  [ -d "$d" ] || continue
  id=${d%/}; id=${id##*/}
  printf '%s\t%s\t%s\n' "$id" "$(tr -d '\n\t' < "$d/release.json" 2>/dev/null)" "$(tr -d '\n\t' < "$d/verdict.json" 2>/dev/null)"
done
'''


def release_states(transport: Transport, root: str, profile: str) -> list[ReleaseState]:
    """Every release of the profile on the host, oldest first (run ids sort by time)."""
    done = transport.run(["sh", "-c", _STATES, "sh", f"{root}/{profile}"])
    states = []
    for line in done.stdout.splitlines():
        run_id, summary, verdict = (line.split("\t") + ["", ""])[:3]
        version = _json(summary).get("version")
        passed = _json(verdict).get("passed")
        states.append(ReleaseState(run_id, int(version) if isinstance(version, int) else None,
                                   passed if isinstance(passed, bool) else None))
    return sorted(states, key=lambda s: s.run_id)


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def choose_target(states: list[ReleaseState], current: str | None, *, to_run: str | None = None,
                  to_version: int | None = None) -> ReleaseState:
    """The release to go back to: the named run, the newest passing release of a version, or the
    newest passing release that is not current."""
    if to_run:
        match = [s for s in states if s.run_id == to_run or s.run_id.startswith(to_run)]
        if len(match) != 1:
            raise InputError(f"no single release {to_run!r} on the host" if not match else f"{to_run!r} matches {len(match)} releases",
                             fix="`specctl runs` lists run ids; a deploy's run id is its release's name")
        return match[0]
    candidates = [s for s in states if s.passed and s.run_id != current]
    if to_version is not None:
        candidates = [s for s in states if s.version == to_version and s.passed is not False]
        if not candidates:
            raise InputError(f"no release of version {to_version} that did not fail verify on the host",
                             fix="deploy that version again (`specctl deploy`), or name a run with --to RUN")
    if not candidates:
        raise InputError("no verified release to roll back to (none passed verify, other than the current one)",
                         fix="deploy a known-good profile version, or name a release with --to RUN")
    return candidates[-1]


def rollback_host(transport: Transport, root: str, profile: str, target: str, *, baseline: tuple[str, Measurement] | None = None,
                  secrets_env: dict[str, str] | None = None, budget_s: float = STARTUP_BUDGET_S, cancel: CancelToken = NEVER,
                  on_progress: Callable[[str], None] = lambda stage: None) -> HostVerdict:
    """Stop what runs, start release `target` from its own files, switch `current`, verify it, and
    point `known-good` at it when it passes."""
    release = rel.Release(transport, root, profile, target)
    docs = read_release(release)
    on_progress(f"restarting {target}")
    rel.stop_running(transport, root, profile)
    group = rel.start(release, env=secrets_env)
    wait_ready(release, docs.profile.engine.port, get_engine(docs.profile.engine.name).startup_stages(), budget_s=budget_s,
               on_progress=on_progress, process_group=group, cancel=cancel)
    rel.switch(release)
    verdict = verify_release(release, baseline=baseline, cancel=cancel, on_progress=on_progress)
    if verdict.passed:
        rel.switch(release, "known-good")
    return verdict
