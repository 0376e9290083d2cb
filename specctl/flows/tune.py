"""`specctl tune`: search the speculative settings of a profile on a live host.

Each candidate of the profile's `tune:` grid (plan/candidates.py) is a release of the profile with
only `speculative` replaced, brought up with the steps every deploy uses

    preflight -> stage -> materialise -> prove -> stop previous -> start -> ready -> switch     (flows/change.py)

and measured at the objective's operating point under successive elimination
(verdict/elimination.py); a candidate still in the running is then measured at the profile's other
operating points too, for the table (they do not decide the search). One server start per
candidate, and the host's own release started once more at the end (unless nothing ran there).
The winner is written as the next free profile version (no file beside the profile and no run in
the ledger has it), beside the profile; the `tune` run in the
ledger holds every candidate's requests. With `apply`, the winner is then deployed and verified
like any deploy.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specctl.cancel import Cancelled
from specctl.errors import HostError, InputError
from specctl.flows.change import Change, restore
from specctl.flows.prompts import release_prompts
from specctl.flows.recorder import Recorder, recording
from specctl.flows.release_files import release_contents
from specctl.flows.report import HostReport, profile_fields
from specctl.flows.session import Context, HostSession, error_text
from specctl.flows.static import CheckReport, plan, rechecked
from specctl.flows.steps import Events, Walk
from specctl.hosts.inventory import HostSpec
from specctl.ledger.ledger import Ledger
from specctl.plan.candidates import Candidate, Dropped, candidate_profile, grid, heat_map
from specctl.profile.document import content_sha256
from specctl.profile.profile import Profile, Tune
from specctl.release import release as rel
from specctl.release.platform import platform_type
from specctl.release.record import Verification, now
from specctl.release.staging import host_env, profile_checkpoints
from specctl.verdict import gates as gate
from specctl.verdict import stats
from specctl.verdict.client import EngineClient
from specctl.verdict.elimination import Elimination, Standing
from specctl.verdict.generation import Generation
from specctl.verdict.measure import Measurement, measure, warm_up
from specctl.verdict.summary import summarize

# what tune can maximise: the gate functions that give its interval from a measurement
OBJECTIVES: dict[str, Callable[..., stats.Interval | None]] = {
    "output_tokens_per_s": gate.throughput,
    "decode_tokens_per_s": gate.decode_throughput,
}


@dataclass
class CandidateResult:
    """One candidate: its release on the host, its requests and where it stood in the search."""

    candidate: Candidate
    standing: Standing
    release: str | None = None
    measurement: Measurement | None = None
    summary: dict[str, Any] | None = None
    argv: tuple[str, ...] = ()
    points: dict[str, Any] = field(default_factory=dict)  # the profile's other operating points: concurrency -> summary

    def row(self, winner: bool) -> dict[str, Any]:
        interval = self.standing.interval
        return {
            **self.candidate.to_dict(),
            "release": self.release,
            "estimate": interval.estimate if interval else None,
            "interval": interval.to_dict() if interval else None,
            "requests": self.standing.requests,
            "eliminated": self.standing.eliminated,
            "failed": self.standing.failed,
            "winner": winner,
            "points": self.points,
        }


@dataclass
class TuneResult:
    """The whole search as data: what `--json` prints and the ledger's tune run holds."""

    run_id: str
    host: str
    profile: str
    version: int
    metric: str
    concurrency: int
    planned_n: int
    batch: int
    level: float
    candidates: list[CandidateResult] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    winner: CandidateResult | None = None
    profile_file: str | None = None
    restored: str | None = None  # the release the host was given back to (None: nothing ran before)
    applied: HostReport | None = None

    @property
    def requests(self) -> int:
        return sum(c.standing.requests for c in self.candidates)

    def rows(self) -> list[dict[str, Any]]:
        return [c.row(c is self.winner) for c in self.candidates]

    def to_dict(self) -> dict[str, Any]:
        rows = self.rows()
        return {
            "run": self.run_id,
            "host": self.host,
            "profile": self.profile,
            "version": self.version,
            "objective": {"metric": self.metric, "concurrency": self.concurrency},
            "planned_requests": self.planned_n,
            "batch": self.batch,
            "level": self.level,
            "level_note": f"every interval at {self.level:.4g} (Bonferroni over {len(self.candidates)} candidates)",
            "requests": self.requests,
            "exhaustive_requests": self.planned_n * len(self.candidates),
            "other_point_requests": sum(
                int(point.get("requests", 0))
                for c in self.candidates
                for key, point in c.points.items()
                if key.isdigit()
            ),
            "candidates": rows,
            "dropped": [d.to_dict() for d in self.dropped],
            "winner": self.winner.row(True) if self.winner else None,
            "profile_file": self.profile_file,
            "restored": self.restored,
            "heat_map": heat_map(rows),
            "applied": dataclasses.asdict(self.applied) if self.applied else None,
        }


def version_path(profile_path: Path, name: str, version: int) -> Path:
    """`<name>-v<version>.yaml` beside the profile: where tune writes that version."""
    return profile_path.parent / f"{name}-v{version}.yaml"


def next_version(profile_path: Path, profile: Profile, recorded: Collection[int]) -> int:
    """The first version after the profile's that is free: no `<name>-v<N>.yaml` beside the profile
    and no run of this profile name in the ledger (`recorded`), so a version names one content."""
    version = profile.metadata.version + 1
    while version in recorded or version_path(profile_path, profile.metadata.name, version).exists():
        version += 1
    return version


def recorded_versions(ledger: Ledger, name: str) -> set[int]:
    """The versions the ledger's runs of profile `name` were made with."""
    return {r.profile_version for r in ledger.runs(profile=name) if r.profile_version is not None}


def next_profile_text(
    original: Path, next_path: Path, profile: Profile, winner: CandidateResult, result: TuneResult, version: int
) -> str:
    """The next version: `extends` the tuned file, with the winner's speculative settings."""
    interval = winner.standing.interval
    measured = (
        f"{result.metric} {interval.estimate:.4g} [{interval.low:.4g}, {interval.high:.4g}] at concurrency "
        f"{result.concurrency}"
        if interval
        else "unmeasured"
    )
    doc = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "extends": os.path.relpath(original.absolute(), next_path.absolute().parent),
        "metadata": {
            "name": profile.metadata.name,
            "version": version,
            "description": f"tuned by specctl tune run {result.run_id}: {winner.candidate.key}",
        },
        "speculative": winner.candidate.settings(),
    }
    return (
        f"# written by `specctl tune` run {result.run_id} on {result.host}: the best of {len(result.candidates)} "
        f"candidate(s), {measured}\n# (`specctl show {result.run_id}` has every candidate's requests)\n"
        + yaml.safe_dump(doc, sort_keys=False)
    )


def candidate_report(report: CheckReport, candidate: Candidate, run_id: str) -> CheckReport:
    """The profile's check report with the candidate's settings in place of its own."""
    profile = candidate_profile(report.inputs.profile, candidate, run_id)
    inputs = dataclasses.replace(report.inputs, profile=profile, profile_sha256=content_sha256(profile))
    return rechecked(report, inputs, [])


@dataclass
class Search:
    """One tune run on one host: what every candidate's steps and measurement share."""

    ctx: Context
    report: CheckReport
    session: HostSession
    rec: Recorder
    elimination: Elimination
    metric: str
    concurrency: int

    def candidate(self, index: int, candidate: Candidate) -> CandidateResult:
        """Bring the candidate up in place of what runs, and measure it; a candidate that does not
        start or answer is recorded as failed and the search goes on."""
        session, p = self.session, self.report.inputs.profile
        release = session.release(rel.new_run_id())
        creport = candidate_report(self.report, candidate, self.rec.run_id)
        the_plan = plan(creport)
        node = dataclasses.replace(the_plan.nodes[0], env=host_env(the_plan.nodes[0].env, session.spec.hf_home))
        change = Change.new(
            session,
            release,
            self.report,
            files=lambda staged: release_contents(creport, the_plan, node, staged),
            checkpoints=profile_checkpoints(p, baseline=False),
            stage_env=host_env(p.engine.env, session.spec.hf_home),
        )
        session.stage(f"candidate {index + 1}/{self.elimination.candidates}: {candidate.key}")
        try:
            Walk(self._events(candidate), before=self.ctx.cancel.check).run(change.steps())
            _mark_candidate(release, self.rec.run_id)
            m = self._measure(release)
        except (Cancelled, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - one candidate that cannot run does not end the search
            return CandidateResult(
                candidate,
                self.elimination.fail(candidate.key, error_text(exc)),
                release.run_id if change.handle is not None else None,
                argv=tuple(node.argv),
            )
        level, planned = self.elimination.level, self.elimination.planned_n
        interval = OBJECTIVES[self.metric](m, sequential=True, planned_n=planned, level=level)
        # fewer requests than planned: measure stopped at a look that dropped it (in-flight requests still came back)
        standing = self.elimination.settle(
            candidate.key, interval, len(m.generations), dropped=len(m.generations) < planned
        )
        summary = summarize(
            m, None, sequential=True, planned_n=planned, eagle_topk=candidate.speculative.eagle_topk, level=level
        )
        try:
            points = {} if standing.eliminated else self._other_points(release, candidate)
        except (Cancelled, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the objective decided the candidate; the other points only inform
            points = {"error": error_text(exc)}
        return CandidateResult(
            candidate,
            standing,
            release.run_id,
            m,
            {"concurrency": self.concurrency, **summary},
            tuple(node.argv),
            points,
        )

    def _other_points(self, release: rel.Release, candidate: Candidate) -> dict[str, Any]:
        """The profile's other operating points, for a candidate still in the running: each measured
        with verify's request count and shown beside the objective; they do not decide the search."""
        p, session = self.report.inputs.profile, self.session
        v = p.verify
        others = [c for c in v.points if c != self.concurrency]
        if not others:
            return {}
        client = EngineClient(session.server_url(release, p.engine.port), cancel=self.ctx.cancel)
        prompts = release_prompts(release, session.docs(release.run_id), self.report.inputs.engine, ids=v.stream)
        measured: dict[str, Any] = {}
        for c in others:

            def progress(i: int, g: Generation, c: int = c) -> None:
                session.progress(f"concurrency {c}: request {i + 1}/{v.requests}")

            m = measure(
                client,
                prompts,
                requests=v.requests,
                max_new_tokens=v.max_new_tokens,
                temperature=v.temperature,
                concurrency=c,
                request_rate=v.request_rate,
                stream=v.stream,
                on_request=progress,
                cancelled=lambda: self.ctx.cancel.cancelled,
            )
            measured[str(c)] = {
                "requests": len(m.generations),
                **summarize(
                    m, None, sequential=False, planned_n=v.requests, eagle_topk=candidate.speculative.eagle_topk
                ),
            }
        return measured

    def _events(self, candidate: Candidate) -> Events:
        """Step boundaries in the ledger, each named with its candidate."""
        emit = self.rec.events(self.session.name)
        return lambda step, event, detail: emit(f"{step} [{candidate.key}]", event, detail)

    def _measure(self, release: rel.Release) -> Measurement:
        """The objective's point, in batches, until the candidate is dropped or reaches the planned count."""
        v, session, search = self.report.inputs.profile.verify, self.session, self.elimination
        client = EngineClient(
            session.server_url(release, self.report.inputs.profile.engine.port), cancel=self.ctx.cancel
        )
        prompts = release_prompts(release, session.docs(release.run_id), self.report.inputs.engine, ids=v.stream)
        warm_up(client, prompts, max_new_tokens=v.max_new_tokens, temperature=v.temperature)
        objective = OBJECTIVES[self.metric]

        def dropped(m: Measurement) -> bool:
            n = len(m.generations)
            return search.looks_at(n) and search.drops(
                objective(m, sequential=True, planned_n=search.planned_n, level=search.level)
            )

        return measure(
            client,
            prompts,
            requests=search.planned_n,
            max_new_tokens=v.max_new_tokens,
            temperature=v.temperature,
            concurrency=self.concurrency,
            request_rate=v.request_rate,
            stream=v.stream,
            enough=dropped,
            on_request=lambda i, g: session.progress(f"request {i + 1}/{search.planned_n}"),
            cancelled=lambda: self.ctx.cancel.cancelled,
        )


def _mark_candidate(release: rel.Release, run_id: str) -> None:
    """The candidate's record: never verified, a tune candidate, so rollback's default and
    PROFILE@VERSION never pick it; `rollback --to` it by name still does."""
    release.update_record(verification=Verification("none", run_id, now(), (), tune_candidate=True))


def give_back(ctx: Context, session: HostSession, original: str | None, events: Events) -> None:
    """Leave the host on the release it had before the tune: started again through the same steps
    (its own files), or, when nothing of the profile was current, nothing running and no `current`.
    A signal asks to be quick: the release is started, not waited for."""
    platform = session.platform
    if original is None:
        platform.stop_running(session.root, session.profile)
        rel.unlink(session.transport, session.base)
        return
    if session.current() == original and [s.release for s in platform.servers(session.base)] == [original]:
        return  # no candidate ran (or the last one's undo already started it again)
    if ctx.cancel.cancelled:
        platform.stop_running(session.root, session.profile)
        rel.switch(session.release(original))
        restore(session, original)
        return
    change = Change.stored(session, original)
    session.note(f"giving the host back to {original}")
    Walk(lambda step, event, detail: events(f"{step} [give back]", event, detail)).run(change.steps())


def tune(
    ctx: Context,
    report: CheckReport,
    host: HostSpec,
    *,
    apply: bool = False,
    output: Path | None = None,
    baseline_mode: str = "auto",
    exhaustive: bool = False,
) -> TuneResult:
    """Measure the profile's candidates on `host` under successive elimination, give the host back,
    write the winner as the next profile version, record a `tune` run; `apply` deploys the winner.
    `exhaustive` measures every candidate to the planned count (what elimination is compared with)."""
    p = report.inputs.profile
    name = p.metadata.name
    if p.drafter is None:
        raise InputError(
            f"{name} has no drafter: there are no speculative settings to tune", fix="add `drafter:` to the profile"
        )
    if p.parallel.nnodes > 1:
        raise InputError(
            f"{name} spans {p.parallel.nnodes} nodes; tune measures on one host", fix="tune a single-node profile"
        )
    kind = platform_type(host)
    if not kind.tunable:
        raise InputError(
            f"{host.name} is {kind.noun}; tune measures on a host it reaches itself",
            fix="tune on a host of the same GPU type (an interactive allocation is one), then deploy the winner",
        )
    settings = p.tune or Tune()
    concurrency = settings.objective.concurrency or max(p.verify.points)
    planned = settings.requests or max(p.verify.requests, stats.MIN_SAMPLES)
    candidates, dropped = grid(p, report.inputs.engine, report.inputs.architecture or "")
    if not candidates:
        raise InputError(
            f"no candidate of {name}'s tune grid would run as written ({len(dropped)} dropped: {dropped[0].reason})"
            if dropped
            else "the tune grid is empty",
            fix="change the `tune:` lists",
        )
    profile_path = Path(report.inputs.profile_path)
    version = next_version(profile_path, p, recorded_versions(ctx.ledger, name))
    next_path = output or version_path(profile_path, name, version)
    if next_path.exists():
        raise InputError(f"{next_path} exists; tune never overwrites a profile", fix="move it, or pass --out FILE")
    elimination = Elimination(len(candidates), planned, settings.batch, exhaustive=exhaustive)
    session = ctx.session(host, name)
    grid_inputs = {
        "tune": settings.model_dump(mode="json"),
        "objective": {"metric": settings.objective.metric, "concurrency": concurrency},
        "candidates": [c.to_dict() for c in candidates],
        "dropped": [d.to_dict() for d in dropped],
        "planned_requests": planned,
        "level": elimination.level,
    }
    with recording(ctx, "tune", hosts=[host.name], inputs=grid_inputs, **profile_fields(report)) as rec:
        result = TuneResult(
            rec.run_id,
            host.name,
            name,
            p.metadata.version,
            settings.objective.metric,
            concurrency,
            planned,
            settings.batch,
            elimination.level,
            dropped=dropped,
        )
        search = Search(ctx, report, session, rec, elimination, settings.objective.metric, concurrency)
        with session.locked(rec.run_id):
            original = session.current()
            try:
                for i, candidate in enumerate(candidates):
                    result.candidates.append(search.candidate(i, candidate))
            finally:
                try:
                    give_back(ctx, session, original, rec.events(host.name))
                except HostError as exc:  # say what the host was left on, and how to put it back
                    left = session.current()
                    raise HostError(
                        f"{host.name}: the host could not be given back to {original or 'nothing'}: {exc.message}; "
                        f"`current` is {left or 'nothing'}" + (" (a tune candidate)" if left != original else ""),
                        host=host.name,
                        fix=f"fix the cause, then `specctl rollback {name} --to {original}`"
                        if original
                        else f"`specctl stop {name}`",
                    ) from exc
            result.restored = original
        result.winner = next((c for c in result.candidates if c.standing is elimination.best), None)
        if result.winner is not None:
            next_path.parent.mkdir(parents=True, exist_ok=True)
            with open(next_path, "x", encoding="utf-8") as handle:  # never overwrites, even one made meanwhile
                handle.write(next_profile_text(profile_path, next_path, p, result.winner, result, version))
            result.profile_file = str(next_path)
        data = result.to_dict()
        rec.host(
            host.name,
            release=result.winner.release if result.winner else None,
            commands=[list(c.argv) for c in result.candidates if c.argv],
            measurements={
                "candidates": [
                    {
                        "key": c.candidate.key,
                        "release": c.release,
                        "concurrency": concurrency,
                        **(c.measurement.to_dict() if c.measurement else {"requests": []}),
                    }
                    for c in result.candidates
                ]
            },
            verdict={
                **data,
                "passed": result.winner is not None,
                "summary": result.winner.summary if result.winner and result.winner.summary else {},
            },
            passed=result.winner is not None,
        )
        rec.outcome.status = "succeeded" if result.winner is not None else "failed"
        rec.outcome.verdict = {
            "passed": result.winner is not None,
            "winner": data["winner"],
            "profile_file": result.profile_file,
            "requests": result.requests,
            "exhaustive_requests": data["exhaustive_requests"],
        }
    for c in result.candidates:  # each candidate's release keeps its copy of the run
        if c.release:
            rec.keep(session, c.release)
    if result.winner is None:
        raise HostError(
            f"{host.name}: no candidate could be measured: {result.candidates[0].standing.failed}",
            host=host.name,
            fix="see `specctl show " + rec.run_id + "`; the host was given back to " + (original or "nothing"),
        )
    if apply and result.profile_file:
        from specctl.flows import static
        from specctl.flows.deploy import deploy

        [result.applied] = deploy(ctx, static.check(result.profile_file), [host], baseline_mode=baseline_mode)
    return result
