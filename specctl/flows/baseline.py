"""The baseline: the same target without speculation, measured on the same workload, so that
speedup has something honest to divide by. It borrows the host under the profile's lock: the
profile's servers stop, the baseline is brought up and measured, then every stage is undone, which
stops the baseline and starts the profile's `current` again."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from specctl.errors import HostError, InputError
from specctl.flows.change import Change
from specctl.flows.prompts import release_prompts
from specctl.flows.recorder import recording
from specctl.flows.release_files import profile_workload, release_contents
from specctl.flows.report import profile_fields
from specctl.flows.session import Context, HostSession
from specctl.flows.stages import Stage, Walk
from specctl.flows.static import CheckReport, plan
from specctl.hosts.inventory import HostSpec
from specctl.profile.profile import Profile
from specctl.release.documents import read_release
from specctl.release.staging import host_env, profile_checkpoints
from specctl.verdict.client import EngineClient
from specctl.verdict.measure import Measurement, measure, warm_up
from specctl.verdict.summary import summarize

BASELINE_MODES = ("auto", "ledger", "skip")  # run one when missing / only use a recorded one / no speedup gate
BASELINE_SUFFIX = "-baseline"


def baseline_key(profile: Profile, workload_sha256: str) -> str:
    """What makes a baseline comparable: target and revision, TP, GPU type, engine and version, workload."""
    key = {"target": profile.target.model, "revision": profile.target.revision, "tp": profile.parallel.tp,
           "nnodes": profile.parallel.nnodes, "gpu": profile.hardware.gpu, "engine": profile.engine.name,
           "engine_version": profile.engine.version, "workload_sha256": workload_sha256,
           "max_new_tokens": profile.verify.max_new_tokens, "temperature": profile.verify.temperature}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def baseline(ctx: Context, report: CheckReport, host: HostSpec) -> tuple[str, Measurement]:
    """Serve the profile's target without speculation on `host`, measure it, record it."""
    profile = report.inputs.profile
    name, v = profile.metadata.name, profile.verify
    workload = profile_workload(report)
    session = ctx.session(host, name)
    the_plan = plan(report, baseline=True)
    with recording(ctx, "baseline", hosts=[host.name], baseline_key=baseline_key(profile, workload.sha256),
                   inputs={"workload": workload.name, "workload_sha256": workload.sha256}, **profile_fields(report)) as rec:
        with session.locked(rec.run_id):
            change = Change(session, session.release(rec.run_id, name + BASELINE_SUFFIX), port=profile.engine.port,
                            python=profile.engine.python, distribution=report.inputs.engine.distribution(),
                            startup_stages=report.inputs.engine.startup_stages(), budget_s=ctx.budget_s,
                            files=release_contents(report, the_plan, dataclasses.replace(
                                the_plan.nodes[0], env=host_env(the_plan.nodes[0].env, host.hf_home))),
                            clear=(name, name + BASELINE_SUFFIX), checkpoints=profile_checkpoints(profile, baseline=True),
                            stage_env=host_env(profile.engine.env, host.hf_home))
            walk = Walk(rec.events(host.name), before=ctx.cancel.check)
            measured: list[Measurement] = []

            def measure_stage() -> None:
                client = EngineClient(f"http://{session.transport.address}:{profile.engine.port}", cancel=ctx.cancel)
                prompts = release_prompts(change.release, read_release(change.release), report.inputs.engine)
                warm_up(client, prompts, max_new_tokens=v.max_new_tokens, temperature=v.temperature)
                measured.append(measure(client, prompts, requests=v.requests, max_new_tokens=v.max_new_tokens,
                                        temperature=v.temperature, cancelled=lambda: ctx.cancel.cancelled,
                                        on_request=lambda i, g: session.progress(f"baseline request {i + 1}/{v.requests}")))
                ctx.cancel.check()

            walk.run([*change.stages(), Stage("measure", measure_stage)])
            walk.unwind()  # give the host back: the baseline stops, the profile's current starts again
            if walk.undo_errors:  # measured, but the host was not given back: say so, never report success
                raise HostError(f"{host.name}: the baseline was measured but the host was not given back: "
                                + "; ".join(walk.undo_errors), host=host.name, fix="run `specctl status`, then deploy or roll back")
        result = measured[0]
        summary = summarize(result, None, sequential=False, planned_n=0)
        rec.host(host.name, release=rec.run_id, commands=[list(n.argv) for n in the_plan.nodes],
                 measurements=result.to_dict(), verdict={"summary": summary}, passed=True)
        rec.outcome.verdict = {"passed": True, "summary": summary}
    return rec.run_id, result


def find_baseline(ctx: Context, key: str, host: str) -> tuple[str, Measurement] | None:
    found = ctx.ledger.latest_baseline(key, host)
    if found is None:
        return None
    record = next((h for h in found.host_records if h.measurements), None)
    return (found.id, Measurement.from_dict(record.measurements)) if record and record.measurements else None


def baseline_for(session: HostSession, run_id: str, report: CheckReport | None, mode: str) -> tuple[str, Measurement] | None:
    """The baseline that release `run_id` is compared with: recorded, or (mode auto, with the
    profile's report at hand) measured now."""
    docs = session.docs(run_id)
    if mode == "skip" or docs.profile.verify.min_speedup is None:
        return None
    found = find_baseline(session.ctx, baseline_key(docs.profile, docs.workload.sha256), session.name)
    if found is None and mode == "auto" and report is not None:
        return baseline(session.ctx, report, session.spec)
    return found


def checked_mode(mode: str) -> str:
    """A --baseline value, refused before any host is touched when it is not one of BASELINE_MODES."""
    if mode not in BASELINE_MODES:
        raise InputError(f"--baseline {mode!r} is not one of {', '.join(BASELINE_MODES)}", fix="use --baseline auto, ledger or skip")
    return mode
