"""The baseline: the same target without speculation, measured on the same workload, so that
speedup has something honest to divide by. It borrows the host under the profile's lock: the
profile's servers stop, the baseline is brought up and measured, then every step is undone, which
stops the baseline and starts the profile's `current` again."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence

from specctl.errors import HostError, InputError
from specctl.flows.change import Change
from specctl.flows.prompts import release_prompts
from specctl.flows.recorder import recording
from specctl.flows.release_files import profile_workload, release_contents
from specctl.flows.report import profile_fields
from specctl.flows.session import Context, HostSession
from specctl.flows.static import CheckReport, plan
from specctl.flows.steps import Step, Walk
from specctl.hosts.inventory import HostSpec
from specctl.profile.profile import Profile
from specctl.release.documents import read_release
from specctl.release.platform import platform_type
from specctl.release.staging import host_env, profile_checkpoints
from specctl.verdict.client import EngineClient
from specctl.verdict.engine_errors import EngineHTTPError
from specctl.verdict.measure import warm_up
from specctl.verdict.points import Baseline, PointResult, baseline_from_dict, measure_points, measurements_dict

BASELINE_MODES = ("auto", "ledger", "skip")  # run one when missing / only use a recorded one / no speedup gate
BASELINE_SUFFIX = "-baseline"


def baseline_key(profile: Profile, workload_sha256: str) -> str:
    """What makes a baseline comparable: target and revision, TP, GPU type, engine and version, workload."""
    key: dict[str, object] = {
        "target": profile.target.model,
        "revision": profile.target.revision,
        "tp": profile.parallel.tp,
        "nnodes": profile.parallel.nnodes,
        "gpu": profile.hardware.gpu,
        "engine": profile.engine.name,
        "engine_version": profile.engine.version,
        "workload_sha256": workload_sha256,
        "max_new_tokens": profile.verify.max_new_tokens,
        "temperature": profile.verify.temperature,
    }
    v = profile.verify
    if v.points != (1,) or v.request_rate or v.stream:  # only then: a key from before operating points stays valid
        key |= {"points": list(v.points), "request_rate": v.request_rate, "stream": v.stream}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def baseline(ctx: Context, report: CheckReport, host: HostSpec) -> tuple[str, Baseline]:
    """Serve the profile's target without speculation on `host`, measure it, record it. A baseline
    server that stops answering during the measurement measured nothing: the host is given back, the
    run closed `unreachable` (as a verify that reached no server), and a HostError raised (exit 3)."""
    from specctl.flows.verify import not_reached  # verify imports this module

    profile = report.inputs.profile
    name, v = profile.metadata.name, profile.verify
    workload = profile_workload(report)
    session = ctx.session(host, name)
    the_plan = plan(report, baseline=True, node0_address=platform_type(host).node0_address)
    unreached: HostError | None = None
    with recording(
        ctx,
        "baseline",
        hosts=[host.name],
        baseline_key=baseline_key(profile, workload.sha256),
        inputs={"workload": workload.name, "workload_sha256": workload.sha256},
        **profile_fields(report),
    ) as rec:
        with session.locked(rec.run_id):
            release = session.release(rec.run_id, name + BASELINE_SUFFIX)
            change = Change.new(
                session,
                release,
                report,
                files=release_contents(
                    report,
                    the_plan,
                    dataclasses.replace(the_plan.nodes[0], env=host_env(the_plan.nodes[0].env, host.hf_home)),
                    platform=session.platform,
                    release=release,
                    hf_home=host.hf_home,
                ),
                clear=(name, name + BASELINE_SUFFIX),
                checkpoints=profile_checkpoints(profile, baseline=True),
                stage_env=host_env(profile.engine.env, host.hf_home),
            )
            walk = Walk(rec.events(host.name), before=ctx.cancel.check)
            measured: list[list[PointResult]] = []
            gone: list[EngineHTTPError] = []  # the measurement reached no server (after `ready` had)

            def measure_step() -> None:
                client = EngineClient(session.server_url(change.release, profile.engine.port), cancel=ctx.cancel)
                prompts = release_prompts(
                    change.release, read_release(change.release), report.inputs.engine, ids=v.stream
                )
                try:
                    warm_up(client, prompts, max_new_tokens=v.max_new_tokens, temperature=v.temperature)
                    measured.append(
                        measure_points(
                            client,
                            prompts,
                            v,
                            gated=False,
                            cancelled=lambda: ctx.cancel.cancelled,
                            progress=lambda text: session.progress(f"baseline {text}"),
                        )
                    )
                except EngineHTTPError as exc:
                    if not_reached(exc):
                        gone.append(exc)
                    raise
                ctx.cancel.check()

            try:
                walk.run([*change.steps(), Step("measure", measure_step)])
            except EngineHTTPError as exc:  # the walk gave the host back; a server not reached measured nothing
                if not gone:
                    raise
                unreached = _not_measured(host.name, change.release.run_id, exc, walk.undo_errors)
                rec.outcome.status = "unreachable"
                rec.outcome.verdict = {"passed": None, "error": unreached.message}
            else:
                walk.unwind()  # give the host back: the baseline stops, the profile's current starts again
                if walk.undo_errors:  # measured, but the host was not given back: say so, never report success
                    raise HostError(
                        f"{host.name}: the baseline was measured but the host was not given back: "
                        + "; ".join(walk.undo_errors),
                        host=host.name,
                        fix="run `specctl status`, then deploy or roll back",
                    )
        if unreached is None:
            points = measured[0]
            summary = points[0].summary
            rec.host(
                host.name,
                release=rec.run_id,
                commands=[list(n.argv) for n in the_plan.nodes],
                measurements=measurements_dict(points),
                verdict={"summary": summary, "points": [p.to_dict() for p in points]},
                passed=True,
            )
            rec.outcome.verdict = {"passed": True, "summary": summary}
    if unreached is not None:
        raise unreached
    return rec.run_id, {p.concurrency: p.measurement for p in points}


def _not_measured(host: str, run_id: str, exc: EngineHTTPError, undo_errors: Sequence[str]) -> HostError:
    """The error of a baseline whose server stopped answering before its measurement was whole."""
    given_back = "the host was not given back: " + "; ".join(undo_errors) if undo_errors else "the host was given back"
    return HostError(
        f"{host}: the baseline's server ({run_id}) stopped answering during the measurement: {exc.message}. "
        f"Nothing was measured or recorded as a baseline; {given_back}",
        host=host,
        fix="see its server log (`specctl logs`), then run `specctl baseline` again"
        + ("; first `specctl status`, then deploy or roll back" if undo_errors else ""),
    )


def find_baseline(ctx: Context, key: str, host: str) -> tuple[str, Baseline] | None:
    found = ctx.ledger.latest_baseline(key, host)
    if found is None:
        return None
    record = next((h for h in found.host_records if h.measurements), None)
    return (found.id, baseline_from_dict(record.measurements)) if record and record.measurements else None


def baseline_for(
    session: HostSession, run_id: str, report: CheckReport | None, mode: str
) -> tuple[str, Baseline] | None:
    """The baseline that release `run_id` is compared with: recorded, or (mode auto, with the
    profile's report at hand) measured now."""
    docs = session.docs(run_id)
    if mode == "skip" or not docs.profile.verify.min_speedup:
        return None
    found = find_baseline(session.ctx, baseline_key(docs.profile, docs.workload.sha256), session.name)
    if found is None and mode == "auto" and report is not None:
        return baseline(session.ctx, report, session.spec)
    return found


def checked_mode(mode: str) -> str:
    """A --baseline value, refused before any host is touched when it is not one of BASELINE_MODES."""
    if mode not in BASELINE_MODES:
        raise InputError(
            f"--baseline {mode!r} is not one of {', '.join(BASELINE_MODES)}", fix="use --baseline auto, ledger or skip"
        )
    return mode
