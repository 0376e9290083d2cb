"""The deploy, as one screen of steps per host, all hosts in parallel under one run id:

    preflight -> stage -> materialise -> prove                                          (flows/change.py)
    -- a fleet waits here (`ProofGate`): past --max-failures failed hosts, nothing stops anywhere --
    stop previous -> start -> ready -> switch
    -- every host waits here; past --max-failures failed hosts, the others undo all of the above --
    verify -> keep, or put back exactly the release that ran when the deploy began (`Change.ran`)

Each host holds its profile lock from preflight to the end, verify included. Any exception in a
step runs the undos of the steps done (walking back to the previous release); the run's ledger
row records every step boundary. A failed verify puts back what ran, verified or not; with nothing
that ran, the failed release keeps serving and the result says so. A new server that verify
reaches no more is a failed start: what ran is put back, or the new server is stopped. Multi-node
TP runs node rank r on host r, all ranks meeting at node 0's address; it is ready when node 0
answers, verified through node 0, and not rolled back by itself. On a platform that places every
node rank (a scheduler's cluster) one start runs every rank and the ranks meet where the platform
says; on a rolling platform the new release runs beside the previous release's until it is
verified, and only then is the previous one stopped (a failed verify stops the new one).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specctl.cancel import Cancelled
from specctl.errors import HostError, InputError, ServerUnreachable
from specctl.flows.change import Change, Files, NodeGate, ProofGate, retire
from specctl.flows.recorder import Recorder, let_go_all, recording
from specctl.flows.release_files import release_contents
from specctl.flows.report import HostReport, profile_fields
from specctl.flows.rollback import rollback, rollback_nodes
from specctl.flows.session import Context, HostSession, error_text
from specctl.flows.static import CheckReport, plan
from specctl.flows.steps import Walk
from specctl.flows.verify import verify_and_record
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.plan.findings import Severity
from specctl.plan.plan import Plan
from specctl.release.platform import platform_type
from specctl.release.record import Verification, now
from specctl.release.staging import Staged, host_env, profile_checkpoints


@dataclass
class FleetPolicy:
    """The --max-failures decision, taken once every host has brought its release up (or failed to)."""

    hosts: int
    max_failures: int
    failed: list[str] = field(default_factory=list)
    _barrier: threading.Barrier = field(init=False)

    def __post_init__(self) -> None:
        self._barrier = threading.Barrier(self.hosts)
        self._guard = threading.Lock()

    def settle(self, host: str, failure: BaseException | None) -> bool:
        """Wait for every host; True when this (successful) host keeps its release."""
        if failure is not None:
            with self._guard:
                self.failed.append(host)
        self._barrier.wait()
        return len(self.failed) <= self.max_failures


@dataclass
class Deploy:
    """One deploy run: what every host's steps share."""

    ctx: Context
    report: CheckReport
    plan: Plan
    rec: Recorder
    policy: FleetPolicy
    run_verify: bool
    auto_rollback: bool
    baseline_mode: str
    gate: NodeGate | None  # multi-node only
    stage: bool = True  # False: the engine downloads Hub checkpoints itself when it starts (after the stop)
    proven: ProofGate | None = None  # a fleet: every host is proven before any stops
    previous: dict[str, str | None] = field(default_factory=dict)  # host -> what ran (`Change.ran`) when it began

    def host(self, rank: int, session: HostSession) -> HostReport:
        """One host's deploy, start to end, under its lock (held until the run's copy is kept)."""
        ctx = self.ctx
        walk = Walk(self.rec.events(session.name), before=ctx.cancel.check)
        change: Change | None = None
        failure: BaseException | None = None
        try:
            session.hold(self.rec.run_id)  # released with the run's copy (deploy's keep_all)
            change = self.change(rank, session)
            walk.run(change.steps())
        except BaseException as exc:  # noqa: BLE001 - undone by the walk; every host must reach settle()
            failure = exc
            if self.proven is not None:
                self.proven.arrive(session.name, error_text(exc))
            if self.gate is not None:
                self.gate.open(False)
        keep = self.policy.settle(session.name, failure)
        if failure is not None:
            return self.failed(session, change, failure)
        assert change is not None
        if not keep or ctx.cancel.cancelled:
            session.note(
                "rolling back: "
                + ("stopped by a signal" if ctx.cancel.cancelled else f"{len(self.policy.failed)} host(s) failed")
            )
            walk.unwind()
            ctx.cancel.check()
            return HostReport(
                session.name,
                False,
                self.rec.run_id,
                f"rolled back to {change.previous or 'nothing'}: "
                f"{len(self.policy.failed)} host(s) failed (max {self.policy.max_failures})"
                + "".join(f"; {error}" for error in walk.undo_errors),
                rolled_back=True,
            )
        self.previous[session.name] = change.ran
        ready = f"ready in {change.startup_s:.1f} s" if change.startup_s is not None else f"node rank {rank}"
        result = HostReport(session.name, True, self.rec.run_id, ready)
        try:  # `current` has moved: a time limit that cannot be read is a note, not a failed host
            result.time_limit = session.platform.time_limit(change.release)
        except HostError as exc:
            session.note(f"the time limit of {change.release.run_id}'s server could not be read: {exc.message}")
        if self.run_verify and rank == 0:
            self.verify(session, result, change)
        elif not self.run_verify:
            change.release.update_record(verification=Verification("skipped", self.rec.run_id, now()))
        if result.passed or not self.run_verify:
            self._retire(session, result)
        return result

    def _retire(self, session: HostSession, result: HostReport) -> None:
        """A rolling platform: the release is current (and verified): the servers before it stop."""
        try:
            retired = retire(session, self.rec.run_id)
        except HostError as exc:
            result.detail += f"; the previous server could not be stopped: {exc.message}"
            return
        if retired:
            result.detail += f"; stopped {', '.join(retired)}"

    def change(self, rank: int, session: HostSession) -> Change:
        p = self.report.inputs.profile
        node = self.plan.nodes[rank]
        gate = self.proven
        if session.spec.hf_home:  # this host's cache, from the inventory
            node = dataclasses.replace(node, env=host_env(node.env, session.spec.hf_home))
        release = session.release(self.rec.run_id)

        def files(staged: Mapping[str, Staged]) -> Files:
            return release_contents(
                self.report,
                self.plan,
                node,
                staged,
                platform=session.platform,
                release=release,
                hf_home=session.spec.hf_home,
            )

        return Change.new(
            session,
            release,
            self.report,
            files=files,
            ready_gate=self.gate,
            node_rank=rank,
            checkpoints=profile_checkpoints(p, baseline=False) if self.stage else (),
            stage_env=host_env(p.engine.env, session.spec.hf_home),
            proven_everywhere=(lambda: gate.wait(session.name)) if gate is not None else None,
        )

    def failed(self, session: HostSession, change: Change | None, failure: BaseException) -> HostReport:
        """A host whose steps failed (and were undone): its report and ledger record."""
        if isinstance(failure, Cancelled | KeyboardInterrupt):
            raise failure
        detail = error_text(failure) + "".join(f"; {note}" for note in getattr(failure, "__notes__", ()))
        if (
            change is not None
            and change.ran
            and change.ran in change.stopped
            and not getattr(failure, "__notes__", None)
        ):
            detail += f"; restored {change.ran}"
        elif change is not None and change.facts is not None and change.previous and not change.ran:
            detail += f"; nothing restored: {change.before()}"
        self.rec.host(session.name, release=None, verdict={"passed": False, "error": detail}, passed=False)
        return HostReport(
            session.name,
            False,
            None,
            detail,
            log_tail=tuple(getattr(failure, "log", ()) or ()),
            fix=getattr(failure, "fix", None),
        )

    def verify(self, session: HostSession, result: HostReport, change: Change) -> None:
        """Verify, then keep the release, or put back exactly the release that was running when the deploy
        began (`Change.ran`), verified or not, as Helm's --atomic does (a multi-node release is put back
        on every rank at once: `restore_nodes`). With none there is nothing to put back: the failed
        release keeps serving, and the result says so, naming what `current` held. A verify that reaches
        no server of the new release is a failed start, not a verdict (`_failed_start`)."""
        previous = change.ran
        try:
            verdict = verify_and_record(
                self.rec, session, self.rec.run_id, report=self.report, baseline_mode=self.baseline_mode
            )
            result.verdict = verdict.to_dict()
        except Cancelled:
            raise
        except ServerUnreachable as exc:
            if self.gate is None:  # multi-node: every rank is put back at once (restore_nodes)
                self._failed_start(session, result, change, exc)
                return
            result.detail += f"; verify could not run: {error_text(exc)}"
            result.verdict = {"passed": False, "error": error_text(exc)}
            self.rec.host(session.name, release=self.rec.run_id, verdict=result.verdict, passed=False)
        except Exception as exc:  # noqa: BLE001 - a release that cannot be verified is not kept
            result.detail += f"; verify could not run: {error_text(exc)}"
            result.verdict = {"passed": False, "error": error_text(exc)}
            self.rec.host(session.name, release=self.rec.run_id, verdict=result.verdict, passed=False)
        if result.passed or not self.auto_rollback or self.gate is not None:
            return
        if previous is None:
            result.detail += (
                "; verify FAILED and no release served before this deploy"
                + (f" ({change.before()})" if change.previous is not None else "")
                + ": it keeps serving"
            )
            return
        self._restore(session, result, previous, "verify FAILED")

    def _restore(self, session: HostSession, result: HostReport, previous: str, why: str) -> bool:
        """Put back the release that ran before (a rollback run, child of this one), or say why not:
        True when it was put back."""
        session.note(f"{why}: restoring {previous}, which served before")
        try:
            back = rollback(
                self.ctx, session.spec, session.profile, to_run=previous, parent=self.rec.run_id, report=self.report
            )
        except (InputError, HostError) as exc:  # a host lost for good is said in its row, not raised past the others
            result.detail += f"; {why} and {previous} could not be restored: {exc.message}"
            return False
        result.rolled_back_to, result.rollback_verdict = back.rolled_back_to, back.rollback_verdict
        return True

    def _failed_start(self, session: HostSession, result: HostReport, change: Change, exc: ServerUnreachable) -> None:
        """The new server answered readiness, then verify reached it no more: the start failed (exit 3),
        whatever --no-rollback says (a failed start is always undone, as one caught at `ready` is). Its
        record says failed-start with no verification (nothing was measured); what ran before is put
        back. When nothing is put back (nothing ran, or its restore was refused: an engine changed
        since, a secret unset, a release no longer whole) the new server is stopped all the same (a
        hung server must not outlive its failed start) and the result says what serves after."""
        result.ok = False
        result.detail += f"; a failed start: {error_text(exc)}"
        result.fix = exc.fix
        result.verdict = {"passed": False, "error": error_text(exc)}
        self.rec.host(session.name, release=self.rec.run_id, verdict=result.verdict, passed=False)
        previous = change.ran
        if previous is None or not self._restore(session, result, previous, "its server stopped answering"):
            try:
                session.platform.stop(change.release)
            except HostError as failed:
                result.detail += f"; it could not be stopped: {failed.message}"
            if previous is None:
                result.detail += f"; nothing restored: {change.before()}"
            else:
                result.detail += f"; {change.release.run_id} stopped: {self._serving(session)}"
        try:
            change.release.update_record(life="failed-start")
        except HostError as failed:
            result.detail += f"; could not record it as failed-start: {failed.message}"

    @staticmethod
    def _serving(session: HostSession) -> str:
        """What of the profile runs on the host now, as a person reads it (as `status` sees it)."""
        try:
            running = sorted(s.release for s in session.platform.servers(session.base))
        except HostError as exc:
            return f"what serves could not be seen ({exc.message})"
        return f"{', '.join(running)} running" if running else "nothing serves"

    def restore_nodes(self, hosts: Sequence[HostSpec], reports: dict[str, HostReport]) -> None:
        """Multi-node: node rank 0's verify failed (every rank is up): every rank's record says so, and
        the release that ran before comes back on every rank at once, or the result says why not."""
        head = reports[hosts[0].name]
        verification = self.ctx.session(hosts[0], self.plan_name).release(self.rec.run_id).record().verification
        for h in hosts[1:]:
            self.ctx.session(h, self.plan_name).release(self.rec.run_id).update_record(verification=verification)
        if head.passed or not self.auto_rollback:
            return
        before = {self.previous.get(h.name) for h in hosts}
        if before == {None}:
            head.detail += "; verify FAILED and no release served before this deploy: it keeps serving"
            return
        if len(before) != 1:
            head.detail += "; verify FAILED and the node ranks served different releases before: it keeps serving"
            return
        (previous,) = before
        assert previous is not None
        self.ctx.session(hosts[0], self.plan_name).note(f"verify failed: restoring {previous} on every node rank")
        try:
            back = rollback_nodes(
                self.ctx, hosts, self.plan_name, to_run=previous, parent=self.rec.run_id, report=self.report
            )
        except (InputError, HostError) as exc:
            head.detail += f"; verify FAILED and {previous} could not be restored: {exc.message}"
            return
        for h, r in zip(hosts, back, strict=True):
            reports[h.name].rolled_back_to = r.rolled_back_to
            reports[h.name].rollback_verdict = r.rollback_verdict
            if not r.ok:
                reports[h.name].detail += f"; restoring {previous}: {r.detail}"

    @property
    def plan_name(self) -> str:
        return self.report.inputs.profile.metadata.name


def deploy(
    ctx: Context,
    report: CheckReport,
    hosts: Sequence[HostSpec],
    *,
    max_failures: int = 0,
    run_verify: bool = True,
    auto_rollback: bool = True,
    baseline_mode: str = "auto",
    skip_check: bool = False,
    stage: bool = True,
) -> list[HostReport]:
    """Deploy to every host in parallel, verify, and roll back a host whose verify fails."""
    p = report.inputs.profile
    name, nnodes = p.metadata.name, p.parallel.nnodes
    kinds = [platform_type(h) for h in hosts]
    one_job = nnodes > 1 and len(hosts) == 1 and kinds[0].places_every_rank  # the platform places every rank
    if nnodes > 1 and len(hosts) != nnodes and not one_job:
        raise InputError(
            f"{name} spans {nnodes} nodes but {len(hosts)} host(s) were given",
            fix=f"pass exactly {nnodes} hosts, node rank 0 first, or one cluster whose scheduler places every rank",
        )
    placing = next((k for k in kinds if k.places_every_rank), None)
    if nnodes > 1 and placing is not None and not one_job:
        raise InputError(
            f"{name} spans {nnodes} nodes: on {placing.noun} one job runs them all",
            fix="deploy to the cluster alone (it places every node rank)",
        )
    sessions = [ctx.session(h, name) for h in hosts]
    node0 = kinds[0].node0_address if one_job else sessions[0].transport.address if nnodes > 1 else None
    the_plan = plan(report, node0_address=node0, staged=stage)
    nnodes = 1 if one_job else nnodes  # from here on: hosts that each run one node rank
    errors = [f.to_dict() for f in report.findings if f.severity is Severity.ERROR]
    try:
        with recording(
            ctx,
            "deploy",
            hosts=[h.name for h in hosts],
            **profile_fields(report),
            inputs={
                "skip_check": skip_check,
                "check_errors": errors,
                "max_failures": max_failures,
                "stage": stage,
                "capture": the_plan.capture,
            },
        ) as rec:
            flow = Deploy(
                ctx,
                report,
                the_plan,
                rec,
                FleetPolicy(len(hosts), 0 if nnodes > 1 else max_failures),
                run_verify,
                auto_rollback,
                baseline_mode,
                NodeGate() if nnodes > 1 else None,
                stage,
                ProofGate(len(hosts), 0 if nnodes > 1 else max_failures, ctx.cancel.check) if len(hosts) > 1 else None,
            )
            rank = {
                h.name: i if nnodes > 1 else 0 for i, h in enumerate(hosts)
            }  # every single-node host is node rank 0
            session_of = {h.name: s for h, s in zip(hosts, sessions, strict=True)}
            group = run_group(hosts, lambda h: flow.host(rank[h.name], session_of[h.name]), max_workers=len(hosts))
            for error in group.errors.values():
                raise error
            ctx.cancel.check()
            reports = {h: group.results[h].timed(group.seconds.get(h)) for h in group.results}
            if nnodes > 1:  # one server: node rank 0's verdict is every node's
                if run_verify and all(r.ok for r in reports.values()):
                    flow.restore_nodes(hosts, reports)
                for h in hosts[1:]:
                    reports[h.name].verdict = reports[hosts[0].name].verdict
            commands = [list(n.argv) for n in the_plan.nodes]
            for h in hosts:
                r = reports[h.name]
                if r.ok and r.verdict is None:
                    rec.host(h.name, release=r.release, commands=commands)
            passed = all(r.ok for r in reports.values()) and (not run_verify or all(r.passed for r in reports.values()))
            rec.outcome.status = "succeeded" if passed else "failed"
            rec.outcome.verdict = {
                "passed": passed if run_verify else None,
                "verified": run_verify,
                "hosts": {
                    h: {"ok": r.ok, "detail": r.detail, "verdict": r.verdict, "rolled_back_to": r.rolled_back_to}
                    for h, r in reports.items()
                },
            }
        rec.keep_all(
            [(session, rec.run_id if reports[h.name].ok else None) for h, session in zip(hosts, sessions, strict=True)]
        )
    finally:
        let_go_all(sessions)  # stopped before the keep: no lock stays behind
    return [reports[h.name] for h in hosts]
