"""Deploy, verify, baseline and rollback as recorded runs: every one is a ledger row (with a copy
in the release directory it touched), and a deploy ends in a verdict. A host whose verify fails
rolls back by itself to its newest verified release unless the caller says not to."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specctl.cancel import NEVER, Cancelled, CancelToken
from specctl.constants import STARTUP_BUDGET_S
from specctl.errors import InputError
from specctl.flows.baseline import run_baseline
from specctl.flows.deploy import deploy_fleet
from specctl.flows.rollback import choose_target, release_states, rollback_host
from specctl.flows.static import CheckReport, plan
from specctl.flows.verify import HostVerdict, baseline_key, keep_on_host, read_release, summarize, verify_release
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Transport
from specctl.ledger.ledger import Ledger
from specctl.plan.findings import Severity
from specctl.release import release as rel
from specctl.verdict.measure import Measurement
from specctl.verdict.workload import load_workload

BASELINE_MODES = ("auto", "ledger", "skip")  # run one when missing / only use a recorded one / no speedup gate


@dataclass
class Context:
    """What every recorded flow needs: where to record, how to reach hosts, what to say."""

    ledger: Ledger
    command: str
    reason: str | None = None
    ssh_config: str | None = None
    accept_new_host_key: bool = False
    secrets_env: dict[str, str] = field(default_factory=dict)
    budget_s: float = STARTUP_BUDGET_S
    cancel: CancelToken = NEVER
    on_progress: Callable[[str, str], None] = lambda host, stage: None

    _transports: dict[str, tuple[Transport, str]] = field(default_factory=dict)

    def transport(self, host: HostSpec) -> tuple[Transport, str]:
        """One connection per host for the whole command (each host is used by one thread at a time)."""
        if host.name not in self._transports:
            t = host.transport(ssh_config=self.ssh_config, accept_new_host_key=self.accept_new_host_key)
            self._transports[host.name] = (t, rel.host_root(t, host.root))
        return self._transports[host.name]


@dataclass
class HostReport:
    """One host's account of a recorded flow."""

    host: str
    ok: bool
    release: str | None
    detail: str
    verdict: dict[str, Any] | None = None
    rolled_back_to: str | None = None
    rollback_verdict: dict[str, Any] | None = None
    log_tail: tuple[str, ...] = ()
    rolled_back: bool = False  # taken back by the failure policy (too many hosts failed to start)

    @property
    def passed(self) -> bool:
        return self.ok and bool(self.verdict and self.verdict.get("passed"))


def _profile_fields(report: CheckReport) -> dict[str, Any]:
    p = report.inputs.profile
    return {"profile": p.model_dump(mode="json", by_alias=True), "profile_sha256": report.inputs.profile_sha256,
            "engine": p.engine.name, "engine_version": p.engine.version}


def _keep(ctx: Context, transport: Transport, root: str, profile: str, run_id: str, release_id: str | None,
          verdict: HostVerdict | None = None) -> None:
    if release_id:
        keep_on_host(rel.Release(transport, root, profile, release_id), ctx.ledger.get(run_id).to_dict(), verdict)


# --- baseline --------------------------------------------------------------------------------------
def baseline(ctx: Context, report: CheckReport, host: HostSpec) -> tuple[str, Measurement]:
    """Serve the profile's target without speculation on `host`, measure it, record it."""
    t, root = ctx.transport(host)
    workload = load_workload(report.inputs.profile.verify.workload, _profile_dir(report))
    run_id = rel.new_run_id()
    key = baseline_key(report.inputs.profile, workload.sha256)
    with ctx.ledger.recording(run_id, "baseline", command=ctx.command, hosts=[host.name], reason=ctx.reason,
                              baseline_key=key, inputs={"workload": workload.name, "workload_sha256": workload.sha256},
                              **_profile_fields(report)) as outcome:
        result = run_baseline(t, root, report, run_id=run_id, secrets_env=ctx.secrets_env, budget_s=ctx.budget_s, cancel=ctx.cancel,
                              on_progress=lambda stage: ctx.on_progress(host.name, stage))
        summary = summarize(result.measurement, None, sequential=False, planned_n=0)
        ctx.ledger.record_host(run_id, host.name, release=run_id, commands=[n.argv for n in plan(report, baseline=True).nodes],
                               measurements=result.measurement.to_dict(), verdict={"summary": summary}, passed=True)
        outcome.verdict = {"passed": True, "summary": summary}
    _keep(ctx, t, root, f"{report.inputs.profile.metadata.name}-baseline", run_id, run_id)
    return run_id, result.measurement


def _profile_dir(report: CheckReport) -> Path:
    return Path(report.inputs.profile_path).parent


def find_baseline(ctx: Context, key: str, host: str) -> tuple[str, Measurement] | None:
    found = ctx.ledger.latest_baseline(key, host)
    if found is None:
        return None
    record = next((h for h in found.host_records if h.measurements), None)
    return (found.id, Measurement.from_dict(record.measurements)) if record and record.measurements else None


def _baseline_for(ctx: Context, report: CheckReport | None, release: rel.Release, host: HostSpec, mode: str) -> tuple[str, Measurement] | None:
    docs = read_release(release)
    if mode == "skip" or docs.profile.verify.min_speedup is None:
        return None
    found = find_baseline(ctx, baseline_key(docs.profile, docs.workload.sha256), host.name)
    if found is None and mode == "auto" and report is not None:
        return baseline(ctx, report, host)
    return found


# --- verify ----------------------------------------------------------------------------------------
def _verify_on(ctx: Context, run_id: str, host: HostSpec, release: rel.Release, base: tuple[str, Measurement] | None,
               extra_findings: Sequence[Any] = (), commands: list[list[str]] | None = None) -> HostVerdict:
    verdict = verify_release(release, baseline=base, cancel=ctx.cancel, on_progress=lambda stage: ctx.on_progress(host.name, stage))
    verdict.findings = [*extra_findings, *verdict.findings]
    ctx.ledger.record_host(run_id, host.name, release=release.run_id, facts=verdict.facts, commands=commands,
                           measurements=verdict.measurement.to_dict() if verdict.measurement else None,
                           verdict=verdict.to_dict(), passed=verdict.passed)
    keep_on_host(release, {"id": run_id, "kind": "verify (in progress)"}, verdict)
    if verdict.passed:
        rel.switch(release, "known-good")
    return verdict


def verify(ctx: Context, report: CheckReport, hosts: Sequence[HostSpec], *, baseline_mode: str = "auto") -> list[HostReport]:
    """Verify what runs on each host against the profile: one recorded verify run."""
    p = report.inputs.profile
    name = p.metadata.name
    static_errors = [f for f in report.findings if f.severity is Severity.ERROR]
    run_id = rel.new_run_id()
    reports: dict[str, HostReport] = {}
    with ctx.ledger.recording(run_id, "verify", command=ctx.command, hosts=[h.name for h in hosts], reason=ctx.reason,
                              **_profile_fields(report)) as outcome:
        def one(host: HostSpec) -> HostVerdict:
            t, root = ctx.transport(host)
            current = rel.linked(t, root, name)
            if current is None:
                raise InputError(f"{host.name}: {name} has no current release", fix=f"deploy it first: specctl deploy PROFILE --hosts {host.name}")
            release = rel.Release(t, root, name, current)
            docs = read_release(release)
            verdict = _verify_on(ctx, run_id, host, release, _baseline_for(ctx, report, release, host, baseline_mode), static_errors,
                                 [n["argv"] for n in docs.plan["nodes"]])
            if docs.summary.get("sha256") != report.inputs.profile_sha256:
                verdict.drift.insert(0, {"field": "profile", "expected": f"v{p.metadata.version} ({report.inputs.profile_sha256[:12]})",
                                         "reported": f"v{docs.summary.get('version')} ({str(docs.summary.get('sha256'))[:12]})"})
            return verdict

        group = run_group(hosts, one)
        for h in hosts:
            if h.name in group.results:
                v = group.results[h.name]
                reports[h.name] = HostReport(h.name, True, v.release, "passed" if v.passed else "FAILED", v.to_dict())
            else:
                exc = group.errors[h.name]
                reports[h.name] = HostReport(h.name, False, None, getattr(exc, "message", str(exc)))
        outcome.status = "succeeded" if all(r.passed for r in reports.values()) else "failed"
        outcome.verdict = {"passed": outcome.status == "succeeded", "hosts": {h: r.verdict for h, r in reports.items()}}
    for h in hosts:
        if reports[h.name].release:
            t, root = ctx.transport(h)
            _keep(ctx, t, root, name, run_id, reports[h.name].release)
    return [reports[h.name] for h in hosts]


# --- rollback --------------------------------------------------------------------------------------
def rollback(ctx: Context, host: HostSpec, profile: str, *, to_run: str | None = None, to_version: int | None = None,
             parent: str | None = None, report: CheckReport | None = None) -> HostReport:
    """Go back to a stored release on one host: a recorded rollback run."""
    t, root = ctx.transport(host)
    current = rel.linked(t, root, profile)
    target = choose_target(release_states(t, root, profile), current, to_run=to_run, to_version=to_version)
    docs = read_release(rel.Release(t, root, profile, target.run_id))
    run_id = rel.new_run_id()
    with ctx.ledger.recording(run_id, "rollback", command=ctx.command, hosts=[host.name], reason=ctx.reason, parent=parent,
                              profile=docs.profile.model_dump(mode="json", by_alias=True), profile_sha256=docs.summary.get("sha256"),
                              engine=docs.profile.engine.name, engine_version=docs.profile.engine.version,
                              inputs={"from": current, "to": target.run_id}) as outcome:
        mode = "auto" if report is not None and report.inputs.profile_sha256 == docs.summary.get("sha256") else "ledger"
        base = _baseline_for(ctx, report, rel.Release(t, root, profile, target.run_id), host, mode)
        verdict = rollback_host(t, root, profile, target.run_id, baseline=base, secrets_env=ctx.secrets_env, budget_s=ctx.budget_s,
                                cancel=ctx.cancel, on_progress=lambda stage: ctx.on_progress(host.name, stage))
        ctx.ledger.record_host(run_id, host.name, release=target.run_id, facts=verdict.facts,
                               commands=[n["argv"] for n in docs.plan["nodes"]],
                               measurements=verdict.measurement.to_dict() if verdict.measurement else None,
                               verdict=verdict.to_dict(), passed=verdict.passed)
        outcome.status = "succeeded" if verdict.passed else "failed"
        outcome.verdict = {"passed": verdict.passed, "from": current, "to": target.run_id, "hosts": {host.name: verdict.to_dict()}}
    _keep(ctx, t, root, profile, run_id, target.run_id, verdict)
    return HostReport(host.name, True, target.run_id, f"rolled back from {current} to {target.run_id}" +
                      ("" if verdict.passed else " (its verify FAILED too)"), verdict.to_dict(), target.run_id, verdict.to_dict())


# --- deploy ----------------------------------------------------------------------------------------
def deploy(ctx: Context, report: CheckReport, hosts: Sequence[HostSpec], *, max_failures: int = 0, run_verify: bool = True,
           auto_rollback: bool = True, baseline_mode: str = "auto", skip_check: bool = False) -> list[HostReport]:
    """Deploy, then verify every host that came up; a host that fails verify rolls back by itself."""
    p = report.inputs.profile
    name = p.metadata.name
    run_id = rel.new_run_id()
    commands = [list(n.argv) for n in plan(report).nodes] if p.parallel.nnodes == 1 else None
    errors = [f.to_dict() for f in report.findings if f.severity is Severity.ERROR]
    reports: dict[str, HostReport] = {}
    with ctx.ledger.recording(run_id, "deploy", command=ctx.command, hosts=[h.name for h in hosts], reason=ctx.reason,
                              inputs={"skip_check": skip_check, "check_errors": errors, "max_failures": max_failures,
                                      "capture": plan(report).capture},
                              **_profile_fields(report)) as outcome:
        outcomes = deploy_fleet(report, hosts, command=ctx.command, max_failures=max_failures, ssh_config=ctx.ssh_config,
                                accept_new_host_key=ctx.accept_new_host_key, secrets_env=ctx.secrets_env, budget_s=ctx.budget_s,
                                on_progress=ctx.on_progress, run_id=run_id, cancel=ctx.cancel)
        ctx.cancel.check()
        for o in outcomes:
            reports[o.host] = HostReport(o.host, o.ok, o.run_id if o.ok else None, o.detail, log_tail=o.log_tail,
                                         rolled_back=o.rolled_back)
            ctx.ledger.record_host(run_id, o.host, release=o.run_id if o.ok else None, commands=commands,
                                   verdict=None if o.ok else {"passed": False, "error": o.detail}, passed=None if o.ok else False)
        ready = [h for h in hosts if reports[h.name].ok]
        multinode = p.parallel.nnodes > 1
        if multinode:  # one server: node rank 0 answers for all; rollback of a multi-node release is manual
            ready, auto_rollback = ready[:1] if ready and ready[0] is hosts[0] else [], False
        if run_verify and ready:
            def one(host: HostSpec) -> HostReport:
                t, root = ctx.transport(host)
                release = rel.Release(t, root, name, run_id)
                verdict = _verify_on(ctx, run_id, host, release, _baseline_for(ctx, report, release, host, baseline_mode),
                                     [], commands)
                result = HostReport(host.name, True, run_id, reports[host.name].detail, verdict.to_dict())
                if not verdict.passed and auto_rollback:
                    ctx.on_progress(host.name, "verify failed: rolling back")
                    try:
                        back = rollback(ctx, host, name, parent=run_id, report=report)
                    except InputError as exc:
                        result.detail += f"; verify FAILED and {exc.message}"
                        return result
                    result.rolled_back_to, result.rollback_verdict = back.rolled_back_to, back.rollback_verdict
                return result

            group = run_group(ready, one)
            for h in ready:
                if h.name in group.results:
                    reports[h.name] = group.results[h.name]
                else:
                    exc = group.errors[h.name]
                    reports[h.name].detail += f"; verify could not run: {getattr(exc, 'message', exc)}"
                    reports[h.name].verdict = {"passed": False, "error": getattr(exc, "message", str(exc))}
                    if isinstance(exc, Cancelled):
                        raise exc
        if multinode and run_verify:
            for h in hosts[1:]:
                reports[h.name].verdict = reports[hosts[0].name].verdict
        passed = all(r.ok for r in reports.values()) and (not run_verify or all(r.passed for r in reports.values()))
        outcome.status = "succeeded" if passed else "failed"
        outcome.verdict = {"passed": passed if run_verify else None, "verified": run_verify,
                           "hosts": {h: {"ok": r.ok, "detail": r.detail, "verdict": r.verdict, "rolled_back_to": r.rolled_back_to}
                                     for h, r in reports.items()}}
    for h in hosts:
        if reports[h.name].ok:
            t, root = ctx.transport(h)
            _keep(ctx, t, root, name, run_id, run_id)
    return [reports[h.name] for h in hosts]
