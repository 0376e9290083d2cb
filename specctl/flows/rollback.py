"""Rollback: restart an exact stored release, move `current`, verify it again. By default the
rollback chooses the newest verified release on that host that is not serving; the host's release
records (release/record.py) say which those are."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from time import monotonic
from typing import Any

from specctl.errors import HostError, InputError, ServerUnreachable
from specctl.flows.change import Change, NodeGate, ProofGate, retire
from specctl.flows.recorder import recording
from specctl.flows.report import HostReport
from specctl.flows.session import Context, HostSession, error_text
from specctl.flows.static import CheckReport
from specctl.flows.steps import Walk
from specctl.flows.verify import verify_and_record
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Transport
from specctl.release import record
from specctl.release import release as rel
from specctl.release.record import ReleaseRecord


def release_records(transport: Transport, root: str, profile: str) -> list[ReleaseRecord]:
    """Every release of the profile on the host, oldest first, as the host's records say."""
    return record.read_all(transport, f"{root}/{profile}")[1]


def choose_release(
    records: list[ReleaseRecord],
    current: str | None,
    *,
    to_run: str | None = None,
    to_version: int | None = None,
    running: Collection[str] | None = None,
) -> ReleaseRecord:
    """The rollback's choice, the release to go back to: the named run (whatever its record says), the
    newest release of a version whose verify did not fail, or the newest verified release that is not
    serving. A tune candidate is chosen only by name.

    `running`: the releases whose servers were seen running. A release is skipped as serving only when
    its server is among them, so a `current` whose server is gone (a cancelled job, a crash) is a
    candidate; None when the caller did not look: `current` is then taken as serving."""
    serving = {current} if running is None else set(running)
    if to_run:
        match = [r for r in records if r.run_id == to_run or r.run_id.startswith(to_run)]
        if len(match) != 1:
            raise InputError(
                f"no single release {to_run!r} on the host"
                if not match
                else f"{to_run!r} matches {len(match)} releases",
                fix="`specctl runs` lists run ids; a deploy's run id is its release's name",
            )
        return match[0]
    candidates = [r for r in records if r.verified and r.run_id not in serving]
    if to_version is not None:
        candidates = [
            r
            for r in records
            if r.version == to_version
            and r.verification.state != "failed"
            and not r.verification.tune_candidate
            and r.life != "failed-start"
        ]
        if not candidates:
            raise InputError(
                f"no release of version {to_version} that did not fail verify on the host",
                fix="deploy that version again (`specctl deploy`), or name a run with --to RUN",
            )
    if not candidates:
        raise InputError(
            "no verified release to roll back to (none passed verify, other than those seen serving)",
            fix="deploy a profile version that passes verify, or name a release with --to RUN",
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
    files, switch `current` (the release it replaces is recorded rolled-back) and verify it. A
    recorded run; a release that is not whole is refused before anything stops. A verify that
    reaches no server of it judges nothing: the run is closed `unreachable`, the release's
    verification left as it was, and the error raised (exit 3) once the run's copy is kept."""
    session = ctx.session(host, profile)
    current = session.current()
    chosen = choose_release(
        release_records(session.transport, session.root, profile),
        current,
        to_run=to_run,
        to_version=to_version,
        running=_running(session),
    )
    docs = session.docs(chosen.run_id)
    held = False
    unreached: ServerUnreachable | None = None
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
            change = Change.stored(session, chosen.run_id, replaced_as="rolled-back")
            Walk(rec.events(host.name), before=ctx.cancel.check).run(change.steps())
            try:  # a scheduler's job ends at its time limit: the recap says it, as a deploy's does
                limit = session.platform.time_limit(change.release)
            except HostError as exc:
                limit = None
                session.note(f"the time limit of {chosen.run_id}'s server could not be read: {exc.message}")
            try:
                retire(session, chosen.run_id)  # a cluster's job that replaced it stops now that it is current again
            except HostError as exc:
                session.note(f"the servers of the releases after {chosen.run_id} could not be stopped: {exc.message}")
            try:
                verdict = verify_and_record(
                    rec, session, chosen.run_id, report=report, baseline_mode=_baseline_mode(report, docs.summary)
                )
            except ServerUnreachable as exc:  # nothing measured: not a verdict on the release
                unreached = exc
                rec.outcome.status = "unreachable"
                rec.outcome.verdict = {"passed": None, "from": current, "to": chosen.run_id, "error": error_text(exc)}
            else:
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
    if unreached is not None:
        raise unreached
    # from what ran, as preflight's survey saw it: a `current` whose server was dead is not what it replaced
    ran = change.ran is not None and change.ran == current
    replaced, seen = (f"from {current} ", "") if ran else ("", f" ({change.before()})")
    return HostReport(
        host.name,
        True,
        chosen.run_id,
        f"rolled back {replaced}to {chosen.run_id}{seen}" + ("" if verdict.passed else " (its verify FAILED too)"),
        verdict.to_dict(),
        chosen.run_id,
        verdict.to_dict(),
        time_limit=limit,
    )


def _running(session: HostSession) -> set[str]:
    """The releases of the profile whose servers are seen running on the host now."""
    return {s.release for s in session.platform.servers(session.base)}


def _baseline_mode(report: CheckReport | None, summary: dict[str, Any]) -> str:
    """Measure a missing baseline only for the profile the caller checked; else use the ledger's."""
    return "auto" if report is not None and report.inputs.profile_sha256 == summary.get("sha256") else "ledger"


def rollback_hosts(
    ctx: Context,
    hosts: Sequence[HostSpec],
    profile: str,
    *,
    to_run: str | None = None,
    to_version: int | None = None,
) -> list[HostReport]:
    """`specctl rollback`: each host on its own, or every node rank at once when the profile's
    releases span nodes (their ranks must start together: node rank r on host r)."""
    if len(hosts) > 1:
        head = ctx.session(hosts[0], profile)
        current = head.current()
        chosen = choose_release(
            release_records(head.transport, head.root, profile),
            current,
            to_run=to_run,
            to_version=to_version,
            running=_running(head),
        )
        if head.docs(chosen.run_id).profile.parallel.nnodes > 1:
            return rollback_nodes(ctx, hosts, profile, to_run=chosen.run_id)
    reports = []
    for host in hosts:
        began = monotonic()
        reports.append(rollback(ctx, host, profile, to_run=to_run, to_version=to_version).timed(monotonic() - began))
    return reports


def rollback_nodes(
    ctx: Context,
    hosts: Sequence[HostSpec],
    profile: str,
    *,
    to_run: str,
    parent: str | None = None,
    report: CheckReport | None = None,
) -> list[HostReport]:
    """Bring a multi-node release (`to_run`, a deploy's run id: the same on every node rank) back on
    every rank at once, node rank r on host r, and verify it through node rank 0. Every host's
    release must be whole, and proven on its rank (`ProofGate`), before anything stops on any
    rank; a rank that fails to come back takes every other rank back to what ran before (as a
    deploy does). A recorded run; every rank's record gets rank 0's verification."""
    sessions = [ctx.session(h, profile) for h in hosts]
    head = sessions[0]
    current = head.current()
    for s in sessions:
        missing = rel.missing_files(s.release(to_run))
        if missing:
            raise InputError(
                f"{s.name}: release {to_run} is not whole: it lacks {', '.join(missing)}",
                fix="nothing was stopped; choose another release (specctl runs) or deploy the profile again",
            )
    docs = head.docs(to_run)
    gate, barrier, guard = NodeGate(), threading.Barrier(len(hosts)), threading.Lock()
    proven = ProofGate(len(hosts), 0, ctx.cancel.check)  # no rank stops before every rank is proven
    failed: list[str] = []
    reports: dict[str, HostReport] = {}
    with recording(
        ctx,
        "rollback",
        hosts=[h.name for h in hosts],
        parent=parent,
        profile=docs.profile.model_dump(mode="json", by_alias=True),
        profile_sha256=docs.summary.get("sha256"),
        engine=docs.profile.engine.name,
        engine_version=docs.profile.engine.version,
        inputs={"from": current, "to": to_run},
    ) as rec:

        def one(rank: int, session: HostSession) -> None:
            walk = Walk(rec.events(session.name), before=ctx.cancel.check)
            failure: BaseException | None = None
            try:
                session.hold(rec.run_id)
                change = Change.stored(
                    session,
                    to_run,
                    replaced_as="rolled-back",
                    ready_gate=gate,
                    node_rank=rank,
                    proven_everywhere=lambda: proven.wait(session.name),
                )
                walk.run(change.steps())
            except BaseException as exc:  # noqa: BLE001 - undone by the walk; every rank must reach the barrier
                failure = exc
                proven.arrive(session.name, error_text(exc))
                gate.open(False)
                with guard:
                    failed.append(session.name)
            barrier.wait()
            if failure is not None:
                reports[session.name] = HostReport(session.name, False, None, error_text(failure))
            elif failed:
                walk.unwind()
                reports[session.name] = HostReport(
                    session.name, False, None, f"undone: node rank(s) on {', '.join(failed)} did not come back"
                )
            else:
                reports[session.name] = HostReport(session.name, True, to_run, f"node rank {rank} back on {to_run}")

        order = {h.name: i for i, h in enumerate(hosts)}
        group = run_group(hosts, lambda h: one(order[h.name], sessions[order[h.name]]), max_workers=len(hosts))
        for error in group.errors.values():
            raise error
        ctx.cancel.check()
        verdict = None
        unreached: ServerUnreachable | None = None
        if not failed:
            try:
                verdict = verify_and_record(
                    rec, head, to_run, report=report, baseline_mode=_baseline_mode(report, docs.summary)
                )
            except ServerUnreachable as exc:  # nothing measured: no rank's record changes
                unreached = exc
            else:
                for s in sessions[1:]:
                    s.release(to_run).update_record(verification=head.release(to_run).record().verification)
        passed = verdict is not None and verdict.passed
        rec.outcome.status = "unreachable" if unreached else "succeeded" if passed else "failed"
        rec.outcome.verdict = {
            "passed": None if unreached else passed,
            "from": current,
            "to": to_run,
            "hosts": {h.name: verdict.to_dict() if verdict else None for h in hosts},
            **({"error": error_text(unreached)} if unreached else {}),
        }
    rec.keep_all([(s, to_run) for s in sessions])
    if unreached is not None:
        raise unreached
    out = []
    for h in hosts:
        r = reports[h.name].timed(group.seconds.get(h.name))
        if r.ok:
            r.detail = f"rolled back from {current} to {to_run}" + ("" if passed else " (its verify FAILED too)")
            r.verdict = r.rollback_verdict = verdict.to_dict() if verdict else None
            r.rolled_back_to = to_run
        out.append(r)
    return out
