"""`specctl stage`: a profile's Hub checkpoints made present on its hosts, and nothing else touched.

Deploy runs the same step on each host after its preflight and before anything is stopped; this
command does it ahead of a deploy window (and `--dry-run` only says what it would fetch). A run is
recorded like any other, so what was fetched where stays in the ledger. `--offline` (the context's)
asks no Hub: a complete snapshot in a host's cache is staged "content unverified"; `--verify` hashes
every staged file again against the Hub's checksums, the hash cache ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.flows.recorder import recording
from specctl.flows.report import profile_fields
from specctl.flows.session import Context, error_text
from specctl.flows.static import CheckReport
from specctl.hosts.group import parallel
from specctl.hosts.inventory import HostSpec
from specctl.release import staging


@dataclass
class StageReport:
    """One host's answer: what is staged, what would be fetched (dry run), or why not."""

    host: str
    ok: bool
    staged: list[staging.Staged] = field(default_factory=list)
    planned: list[staging.Planned] = field(default_factory=list)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ok": self.ok,
            "error": self.error,
            "staged": [s.to_dict() for s in self.staged],
            "planned": [p.__dict__ for p in self.planned],
        }


def stage_hosts(
    ctx: Context, report: CheckReport, hosts: Sequence[HostSpec], *, dry_run: bool = False, verify: bool = False
) -> list[StageReport]:
    """Stage on every host in parallel (downloads capped by the context's slots); a dry run asks
    each host what it has and what the rest would cost, and records nothing; `verify` re-hashes."""
    p = report.inputs.profile
    checkpoints = staging.profile_checkpoints(p, baseline=False)

    def one(host: HostSpec) -> StageReport:
        session = ctx.session(host, p.metadata.name)
        env = staging.staging_env(p.engine.env, ctx.secrets_env, host.hf_home, offline=ctx.offline)
        try:
            if dry_run:
                answer = staging.plan(
                    session.transport,
                    python=p.engine.python,
                    root=session.root,
                    checkpoints=checkpoints,
                    env=env,
                    offline=ctx.offline,
                )
                short = (
                    None
                    if answer.fits
                    else (
                        f"{answer.cache} has {staging.size_text(answer.free)} free; staging needs "
                        f"{staging.size_text(answer.need)} and leaves {staging.size_text(staging.RESERVE_BYTES)}"
                    )
                )
                return StageReport(host.name, answer.fits, answer.staged, answer.planned, error=short)

            def progress(done: staging.StageProgress) -> None:
                session.progress(done.text())
                ctx.on_event(host.name, {"event": "stage-progress", **done.to_dict()})

            return StageReport(
                host.name,
                True,
                staging.stage(
                    session.transport,
                    python=p.engine.python,
                    root=session.root,
                    checkpoints=checkpoints,
                    env=env,
                    on_progress=progress,
                    slot=lambda: ctx.stage_slots,
                    offline=ctx.offline,
                    verify=verify,
                ),
            )
        except Exception as exc:  # noqa: BLE001 - one host's failure is its row
            return StageReport(host.name, False, error=error_text(exc))

    if not checkpoints:
        return [StageReport(h.name, True) for h in hosts]
    by_name = {h.name: h for h in hosts}
    if dry_run:
        return list(parallel(by_name, one, max_workers=len(hosts)).values())
    with recording(
        ctx,
        "stage",
        hosts=[h.name for h in hosts],
        **profile_fields(report),
        inputs={"checkpoints": [c.__dict__ for c in checkpoints], "offline": ctx.offline, "verify": verify},
    ) as rec:
        reports = list(parallel(by_name, one, max_workers=len(hosts)).values())
        for r in reports:
            rec.host(
                r.host, release=None, verdict={"staged": [s.to_dict() for s in r.staged], "error": r.error}, passed=r.ok
            )
        rec.outcome.status = "succeeded" if all(r.ok for r in reports) else "failed"
    return reports
