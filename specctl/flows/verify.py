"""Verify one running release: static checks against the host's facts, drift of
the live server against the release's plan, and the live measurement with its gates.

Verify always works from what the release directory holds (its resolved profile, plan and pinned
workload), so a rollback verifies the exact release it restarts, not today's working tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.engines import get_engine
from specctl.errors import HostError, InputError, ServerUnreachable
from specctl.facts import host as host_facts
from specctl.flows.baseline import baseline_for
from specctl.flows.prompts import release_prompts
from specctl.flows.recorder import Recorder, let_go_all, recording
from specctl.flows.report import HostReport, profile_fields
from specctl.flows.session import Context, HostSession, error_text
from specctl.flows.static import CheckReport
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.plan.findings import Finding, Severity
from specctl.plan.host_checks import check_host
from specctl.release.record import Verification, gate_intervals, now
from specctl.verdict import gates as gate
from specctl.verdict.client import EngineClient
from specctl.verdict.engine_errors import EngineAnswerError, EngineHTTPError
from specctl.verdict.measure import warm_up
from specctl.verdict.points import Baseline, PointResult, measure_points, measurements_dict

REQUEST_DEADLINE_S = 600.0  # one request of the workload, start to finish


def not_reached(exc: EngineHTTPError) -> bool:
    """Whether a request got no answer at all from the server (as opposed to an error status or a
    malformed answer, which the server gave: those are verdicts on it)."""
    return exc.status is None and not isinstance(exc, EngineAnswerError)


def _unreachable(session: HostSession, run_id: str, exc: EngineHTTPError, during: str) -> ServerUnreachable:
    """The error for a server that did not answer, saying whether its process (or job) is still seen
    running, and why it ended where the platform says; what could not be looked at is said as such."""
    try:
        running = any(s.release == run_id for s in session.platform.servers(session.base))
        ended = None if running else session.platform.ended(session.release(run_id))
        seen = (
            "its server is still running but does not answer"
            if running
            else "its server is not running" + (f" ({ended})" if ended else "")
        )
    except HostError as failed:
        seen = f"whether its server runs could not be seen ({failed.message})"
    return ServerUnreachable(
        f"{session.name}: verify reached no server of release {run_id} {during}: {exc.message}; {seen}. "
        "Nothing was measured: its record is unchanged",
        host=session.name,
        release=run_id,
        fix="see `specctl status` and `specctl logs`; start it again with `specctl rollback --to "
        f"{run_id}`, or deploy again",
    )


@dataclass
class HostVerdict:
    """Everything verify found on one host; `passed` only when nothing failed."""

    host: str
    release: str
    profile: str
    version: int
    findings: list[Finding] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    points: list[PointResult] = field(default_factory=list)
    route: str | None = None
    baseline_run: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def gates(self) -> list[gate.GateResult]:
        return [g for p in self.points for g in p.gates]

    @property
    def summary(self) -> dict[str, Any]:
        """The first operating point's summary (the headline), with how the requests were sent."""
        return {**(self.points[0].summary if self.points else {}), **({"route": self.route} if self.route else {})}

    @property
    def stopped_early(self) -> bool:
        return bool(self.points) and all(p.stopped_early for p in self.points)

    @property
    def passed(self) -> bool:
        return (
            not any(f.severity is Severity.ERROR for f in self.findings)
            and not self.drift
            and all(g.passed for g in self.gates)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "release": self.release,
            "profile": self.profile,
            "version": self.version,
            "passed": self.passed,
            "findings": [f.to_dict() for f in self.findings],
            "drift": self.drift,
            "gates": [g.to_dict() for g in self.gates],
            "summary": self.summary,
            "stopped_early": self.stopped_early,
            "points": [p.to_dict() for p in self.points],
            "baseline_run": self.baseline_run,
        }


def drift(expected: dict[str, str], reported: dict[str, str | None]) -> list[dict[str, Any]]:
    """Fields the live server reports differently from the plan (numbers compare by value)."""
    out = []
    for key, want in sorted(expected.items()):
        got = reported.get(key)
        if got != want and not _same_number(got, want):
            out.append({"field": key, "expected": want, "reported": got})
    return out


def _same_number(a: str | None, b: str | None) -> bool:
    try:
        return a is not None and b is not None and float(a) == float(b)
    except ValueError:
        return False


def verify_release(session: HostSession, run_id: str, *, baseline: tuple[str, Baseline] | None = None) -> HostVerdict:
    """Verify the running server of release `run_id` on the session's host."""
    t = session.transport
    docs = session.docs(run_id)
    profile = docs.profile
    engine = get_engine(profile.engine.name)
    cancel = session.ctx.cancel
    verdict = HostVerdict(
        t.name, run_id, profile.metadata.name, profile.metadata.version, baseline_run=baseline[0] if baseline else None
    )
    session.stage("verify")
    session.progress("host facts")
    allocated = session.platform.facts(session.release(run_id))  # a job's own machine, where the platform knows it
    facts = (
        host_facts.read(t.name, profile.engine.port, allocated)
        if allocated is not None
        else host_facts.gather(
            t,
            python=profile.engine.python,
            root=session.root,
            port=profile.engine.port,
            distribution=engine.distribution(),
        )
    )
    verdict.facts = facts.to_dict()
    verdict.findings = check_host(profile, verdict.facts, engine)
    client = EngineClient(
        session.server_url(session.release(run_id), profile.engine.port), timeout_s=REQUEST_DEADLINE_S, cancel=cancel
    )
    session.progress("drift")
    contract = engine.http_contract(profile.engine.version)
    try:
        info = client.server_info(path=contract.server_info_path)
    except EngineHTTPError as exc:
        if not_reached(exc):
            raise _unreachable(session, run_id, exc, "before measuring") from None
        verdict.drift = [{"field": "server", "expected": "answering", "reported": exc.message}]
        return verdict
    expected = engine.expected_server_args(
        docs.plan["nodes"][0]["argv"], session.release(run_id).dir, profile.engine.version
    )
    verdict.drift = drift(expected, engine.reported_server_args(info))
    v = profile.verify
    no_counters = (
        gate.NO_COUNTERS
        if contract.spec_counters
        else (
            f"sglang {profile.engine.version} reports no speculative counters (meta_info.spec_verify_ct first appears "
            "in 0.4.2), so verify cannot measure accept length on it"
        )
    )
    prompts = release_prompts(session.release(run_id), docs, engine, ids=v.stream)
    verdict.route = prompts.route + (" (streamed)" if v.stream else "")
    try:
        warm_up(client, prompts, max_new_tokens=v.max_new_tokens, temperature=v.temperature)
        verdict.points = measure_points(
            client,
            prompts,
            v,
            baseline=baseline[1] if baseline else None,
            eagle_topk=profile.speculative.eagle_topk,
            no_counters=no_counters,
            progress=session.progress,
            cancelled=lambda: cancel.cancelled,
        )
    except EngineHTTPError as exc:
        if not_reached(exc):  # it answered server_info, then stopped answering: half a measurement is none
            raise _unreachable(session, run_id, exc, "during the measurement") from None
        raise
    cancel.check()
    return verdict


def verify_and_record(
    rec: Recorder,
    session: HostSession,
    run_id: str,
    *,
    report: CheckReport | None,
    baseline_mode: str,
    extra_findings: Sequence[Finding] = (),
) -> HostVerdict:
    """The verify step of every flow: measure against the matching baseline, and record the verdict in
    the ledger and in the release's record (the one writer of a verification). The caller holds the lock."""
    verdict = verify_release(session, run_id, baseline=baseline_for(session, run_id, report, baseline_mode))
    verdict.findings = [*extra_findings, *verdict.findings]
    rec.host(
        session.name,
        release=run_id,
        facts=verdict.facts,
        commands=session.docs(run_id).commands(),
        measurements=measurements_dict(verdict.points) if verdict.points else None,
        verdict=verdict.to_dict(),
        passed=verdict.passed,
    )
    judged = verdict.to_dict()
    session.release(run_id).update_record(
        verification=Verification(
            "verified" if verdict.passed else "failed",
            rec.run_id,
            now(),
            gate_intervals(judged["gates"]),
            accept_length=judged["summary"].get("accept_length"),
        )
    )
    return verdict


def verify(
    ctx: Context, report: CheckReport, hosts: Sequence[HostSpec], *, baseline_mode: str = "auto"
) -> list[HostReport]:
    """Verify what runs on each host against the profile: one recorded verify run, each host locked
    for its whole length (a deploy cannot replace the server under the measurement)."""
    p = report.inputs.profile
    name = p.metadata.name
    static_errors = [f for f in report.findings if f.severity is Severity.ERROR]
    reports: dict[str, HostReport] = {}
    sessions = {h.name: ctx.session(h, name) for h in hosts}

    def one(rec: Recorder, host: HostSpec) -> HostVerdict:
        session = sessions[host.name]
        session.hold(rec.run_id)  # released with the run's copy (keep_all)
        current = session.current()
        if current is None:
            raise InputError(
                f"{host.name}: {name} has no current release",
                fix=f"deploy it first: specctl deploy PROFILE --hosts {host.name}",
            )
        verdict = verify_and_record(
            rec, session, current, report=report, baseline_mode=baseline_mode, extra_findings=static_errors
        )
        summary = session.docs(current).summary
        if summary.get("sha256") != report.inputs.profile_sha256:
            verdict.drift.insert(
                0,
                {
                    "field": "profile",
                    "expected": f"v{p.metadata.version} ({report.inputs.profile_sha256[:12]})",
                    "reported": f"v{summary.get('version')} ({str(summary.get('sha256'))[:12]})",
                },
            )
        return verdict

    try:
        with recording(ctx, "verify", hosts=[h.name for h in hosts], **profile_fields(report)) as rec:
            group = run_group(hosts, lambda h: one(rec, h))
            ctx.cancel.check()
            for h in hosts:
                if h.name in group.results:
                    v = group.results[h.name]
                    reports[h.name] = HostReport(
                        h.name, True, v.release, "passed" if v.passed else "FAILED", v.to_dict()
                    ).timed(group.seconds.get(h.name))
                else:
                    error = group.errors[h.name]
                    reports[h.name] = HostReport(
                        h.name, False, None, error_text(error), fix=getattr(error, "fix", None)
                    ).timed(group.seconds.get(h.name))
            rec.outcome.status = _status(reports, group.errors)
            rec.outcome.verdict = {
                "passed": None if rec.outcome.status == "unreachable" else rec.outcome.status == "succeeded",
                "hosts": {h: r.verdict for h, r in reports.items()},
            }
        rec.keep_all([(sessions[h.name], reports[h.name].release) for h in hosts])
    finally:
        let_go_all(list(sessions.values()))  # stopped before the keep: no lock stays behind
    return [reports[h.name] for h in hosts]


def _status(reports: dict[str, HostReport], errors: dict[str, BaseException]) -> str:
    """The run's status: `failed` when a host's verdict failed or another error stopped a host;
    `unreachable` when every host that judged nothing reached no server (and no verdict failed), so
    no verdict was given; `succeeded` when every host passed."""
    if all(r.passed for r in reports.values()):
        return "succeeded"
    judged_failed = any(r.ok and not r.passed for r in reports.values())
    if not judged_failed and errors and all(isinstance(e, ServerUnreachable) for e in errors.values()):
        return "unreachable"
    return "failed"
