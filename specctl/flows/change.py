"""Bringing a release up on a host in place of what runs there: the steps that deploy, rollback
and baseline share, each with its undo.

    preflight -> stage -> materialise -> prove -> stop previous -> start -> ready -> switch

A fleet (a deploy to several hosts, a multi-node rollback) waits at one barrier at the end of
`prove` (`ProofGate`): nothing stops on any host until every host is proven, or has failed.

Nothing running is stopped before everything that can be done beside it is done (connection,
facts judged against the profile: the interpreter, the engine, the GPUs; a port held by a stranger;
a whole release on disk; the release proven on its host as it will start, flows/prove.py).
Whatever fails later, the undos put the previous release back: `current` names a release whose
server runs, or nothing of the profile runs. A server whose deploy lost its host for good stops
itself (see `release.start`).

On a scheduler's cluster (a rolling platform) nothing is stopped first: the new release's job runs
beside the old one, `current` moves when it is ready, and the old job is cancelled only when the
caller `retire`s it (a deploy: after verify passes); a release whose job still runs is not started
twice (a rollback to it just switches back).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.constants import STARTUP_BUDGET_S
from specctl.engines import get_engine
from specctl.engines.base import Engine
from specctl.errors import HostError
from specctl.facts import host as host_facts
from specctl.flows import prove as proving
from specctl.flows.session import HostSession
from specctl.flows.static import CheckReport
from specctl.flows.steps import Step, Undo
from specctl.plan.findings import Severity
from specctl.plan.host_checks import check_host
from specctl.profile.profile import Profile
from specctl.release import release as rel
from specctl.release import staging
from specctl.release.documents import read_release
from specctl.release.readiness import wait_ready
from specctl.release.record import Life

Files = dict[str, tuple[bytes, int] | str]
CONFIRM_MARGIN_S = 30.0  # past its start-up budget, how long a started release may wait to be made current


@dataclass
class Change:
    """One host's move from what runs to `release`: what the steps learn and hand on."""

    session: HostSession
    release: rel.Release
    port: int
    python: str
    distribution: str
    startup_phases: Sequence[tuple[str, str]]
    budget_s: float
    # to write (deploy, baseline), or made from what staging found on the host; None: the release exists
    files: Files | Callable[[Mapping[str, staging.Staged]], Files] | None = None
    checkpoints: tuple[staging.Checkpoint, ...] = ()  # Hub repos to stage before anything is stopped
    stage_env: dict[str, str] = field(default_factory=dict)
    staged: dict[str, staging.Staged] = field(default_factory=dict)
    proven_everywhere: Callable[[], None] | None = None  # a fleet: wait until every host is proven (`ProofGate`)
    clear: tuple[str, ...] = ()  # profiles whose servers stop first (default: the session's)
    ready_gate: NodeGate | None = None  # multi-node: rank 0 opens it, the other ranks wait on it
    node_rank: int = 0
    previous: str | None = None
    facts: host_facts.HostFacts | None = None
    stopped: list[str] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)  # run id -> handle of the profile's servers, at preflight
    handle: int | None = None  # the started server's process group, or job id
    startup_s: float | None = None
    replaced_as: Life = "superseded"  # what the release `current` named before becomes (a rollback's: rolled-back)
    switched: bool = False
    profile: Profile | None = None  # the release's profile: what preflight and prove judge the host against
    engine: Engine | None = None
    address: str = ""  # engine.host: where the port must bind
    secrets: tuple[str, ...] = ()  # names the operator's environment must set (the profile's `secrets:`)
    proof: proving.Proof | None = None

    @property
    def ran(self) -> str | None:
        """What the undo may put back: `current`'s release when the survey saw its server running.
        None when `current` names nothing, or names a release whose server was not running (a crashed
        server, a cancelled job): nothing ran to restore, and starting it would claim otherwise."""
        return self.previous if self.previous is not None and self.previous in self.running else None

    def before(self) -> str:
        """What ran when the change began, as a person reads it (after preflight's survey)."""
        others = sorted(r for r in self.running if r != self.previous)
        also = f"; {', '.join(others)} ran, which no `current` named" if others else ""
        if self.ran is not None:
            return f"{self.ran} ran{also}"
        if self.previous is not None:
            return f"current named {self.previous}, whose server was not running{also}"
        return f"nothing was current{also}"

    @classmethod
    def stored(cls, session: HostSession, run_id: str, **options: Any) -> Change:
        """Bringing back a release already on the host, from its own files and documents (rollback,
        tune giving the host back); `options` are the other fields (a rollback's `replaced_as`).
        The secrets are those its own profile names, taken from the operator's environment (the
        command line's profile may name others, or none): `prove` refuses one that is not set."""
        release = session.release(run_id)
        docs = session.docs(run_id)
        engine = get_engine(docs.profile.engine.name)
        session.ctx.take_secrets(docs.profile.secrets)
        return cls(
            session,
            release,
            port=docs.port,
            python=docs.profile.engine.python,
            distribution=engine.distribution(),
            startup_phases=engine.startup_phases(),
            budget_s=rel.startup_budget(release, STARTUP_BUDGET_S),
            profile=docs.profile,
            engine=engine,
            address=docs.profile.engine.host,
            secrets=tuple(docs.profile.secrets),
            **options,
        )

    @classmethod
    def new(cls, session: HostSession, release: rel.Release, report: CheckReport, **options: Any) -> Change:
        """Bringing up a new release of the checked profile (its files among `options`)."""
        p, engine = report.inputs.profile, report.inputs.engine
        return cls(
            session,
            release,
            port=p.engine.port,
            python=p.engine.python,
            distribution=engine.distribution(),
            startup_phases=engine.startup_phases(),
            budget_s=options.pop("budget_s", session.ctx.budget_s),
            profile=p,
            engine=engine,
            address=p.engine.host,
            secrets=tuple(p.secrets),
            **options,
        )

    def steps(self) -> list[Step]:
        return [
            Step("preflight", lambda: preflight(self)),
            *([Step("stage", lambda: stage(self))] if self.checkpoints else []),
            *([Step("materialise", lambda: materialise(self))] if self.files is not None else []),
            Step("prove", lambda: prove(self)),
            Step("stop-previous", lambda: stop_previous(self)),
            Step("start", lambda: start(self)),
            Step("ready", lambda: ready(self)),
            Step("switch", lambda: switch(self)),
        ]


class NodeGate:
    """Multi-node: the ranks other than 0 are ready when rank 0 answers a generation, or failed with it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.ok = False

    def open(self, ok: bool) -> None:
        if not self._event.is_set():
            self.ok = ok
            self._event.set()

    def wait(self, timeout_s: float) -> bool:
        return self._event.wait(timeout_s) and self.ok


class ProofGate:
    """A fleet's one barrier before anything stops: every host (or node rank) waits at the end of its
    `prove` until every other one is proven, or has failed. Past `max_failures` failed hosts, every
    waiting host fails here too, so nothing is stopped anywhere: a host that cannot start (or is
    still staging a checkpoint) never costs the others an outage. Every host arrives once: proven
    (`wait`), or with why it failed (`arrive`, from its flow's handler of any failure)."""

    def __init__(self, hosts: int, max_failures: int, cancel: Callable[[], None]) -> None:
        self.hosts, self.max_failures, self.cancel = hosts, max_failures, cancel
        self.arrived: dict[str, str | None] = {}  # host -> why it failed, or None: proven
        self._changed = threading.Condition()

    def arrive(self, host: str, failure: str | None = None) -> None:
        with self._changed:
            self.arrived.setdefault(host, failure)
            self._changed.notify_all()

    def wait(self, host: str) -> None:
        """Arrive proven and wait for every host; raise when more failed than `max_failures` allows."""
        self.arrive(host)
        with self._changed:
            while len(self.arrived) < self.hosts:
                self._changed.wait(0.5)
                self.cancel()
            failed = {h: why for h, why in self.arrived.items() if why is not None}
        if len(failed) > self.max_failures:
            first = sorted(failed)[0]
            raise HostError(
                f"{host}: nothing was stopped: {len(failed)} host(s) failed before anything stopped "
                f"(max {self.max_failures}; {first}: {failed[first]})",
                host=host,
                fix="fix that host (see its row), then run the command again",
            )


def preflight(c: Change) -> None:
    """Everything that can be learnt without touching what runs."""
    s = c.session
    t = s.transport
    look, facts = (
        s.platform.survey_command(s.base),
        host_facts.command(python=c.python, root=s.root, port=c.port, distribution=c.distribution, address=c.address),
    )
    looked, found = t.run_all([look, facts], timeout_s=90, retry=True)  # both are safe to run twice
    seen = rel.read_survey(t.checked(look, looked))
    c.facts = host_facts.read(t.name, c.port, found)
    c.previous = seen.current
    c.running = {server.release: server.handle for server in seen.servers}
    if c.files is None:
        missing = rel.missing_files(c.release)
        if missing:
            raise HostError(
                f"{s.name}: release {c.release.run_id} is not whole: it lacks {', '.join(missing)}",
                host=s.name,
                fix="nothing was stopped; choose another release (specctl runs) or deploy the profile again",
            )
        _same_engine(c)
    if s.platform.on_host:
        _judge_facts(c)
        if c.facts.port_free is False and not (c.facts.port_taken and _ours_hold_the_port(c)):
            said, fix = host_facts.port_refusal(c.port, c.address, c.facts.port_error)
            by = f" by something other than {s.profile}'s servers" if c.facts.port_taken else ""
            raise HostError(f"{s.name}: {said}{by}", host=s.name, fix=f"nothing was stopped; {fix}")


def _judge_facts(c: Change) -> None:
    """The interpreter, the engine and the GPUs the facts read, against the release's profile
    (plan/host_checks.py): an error here stops the change before any long stage."""
    if c.profile is None or c.engine is None or c.facts is None:
        return
    errors = [f for f in check_host(c.profile, c.facts.to_dict(), c.engine) if f.severity is Severity.ERROR]
    if errors:
        s = c.session
        raise HostError(
            f"{s.name}: " + "; ".join(f"{f.code}: {f.message.removeprefix(s.name + ': ')}" for f in errors),
            host=s.name,
            fix="nothing was stopped; " + errors[0].fix,
        )


def _ours_hold_the_port(c: Change) -> bool:
    """Whether a running server of the profile serves on the port (then it is freed by the stop); one
    whose release no longer says its port (its files gone) may be the one."""
    s = c.session
    return any(rel.port(s.release(run_id)) in (c.port, None) for run_id in c.running)


def _same_engine(c: Change) -> None:
    """A release already on the host starts only on the engine it was made with: the version its
    own facts recorded must be what the host has now."""
    s = c.session
    assert c.facts is not None
    raw = s.transport.read(c.release.path("host-facts.json"))
    try:
        recorded = json.loads(raw).get("engine_version") if raw else None
    except ValueError:
        recorded = None
    now = c.facts.engine_version
    if recorded is not None and recorded != now:
        raise HostError(
            f"{s.name}: release {c.release.run_id} was made with {c.distribution} {recorded}; "
            f"the host now has {now or 'none'}",
            host=s.name,
            fix=f"nothing was stopped; install {c.distribution}=={recorded} in {c.python}, "
            "or deploy the profile again on this engine",
        )


def prove(c: Change) -> None:
    """The release proven as it will start, before anything stops (flows/prove.py): the engine and
    its parser, the launch's paths, the root's room, the GPUs, the secrets. A failure names its checks."""
    s = c.session
    if c.engine is None or c.profile is None:  # nothing to prove it against but the secrets and the platform
        start = [proving.Problem("start", said, "see the refusal") for said in s.platform.prove_start(c.release)]
        found = proving.unset_secrets(c.secrets, s.ctx.secrets_env) + start
    else:
        c.proof, found = proving.prove_host(
            s.transport,
            engine=c.engine,
            profile=c.profile,
            plan=_release_plan(c) if s.platform.on_host else {},
            release_dir=c.release.dir,
            root=s.root,
            secrets_env=s.ctx.secrets_env,
            on_host=s.platform.on_host,
            prove_start=lambda: s.platform.prove_start(c.release),
            port_held=_ours_hold_the_port(c),  # a server of the profile: the stop frees it
        )
    if c.proof is not None:
        strangers = proving.strangers_on_gpus(c.proof, set(c.running.values()))
        if strangers:
            s.note(f"warning: the GPUs run {', '.join(strangers)}, none of them a server of {s.profile}")
        s.ctx.on_event(s.name, {"event": "proved", **c.proof.to_dict()})
    if found:
        raise HostError(
            f"{s.name}: release {c.release.run_id} not proven: " + "; ".join(f"{p.check}: {p.message}" for p in found),
            host=s.name,
            fix="nothing was stopped; " + found[0].fix,
        )
    if c.proven_everywhere is not None:
        s.progress("proven: waiting for the other hosts to be proven before anything stops")
        c.proven_everywhere()


def _release_plan(c: Change) -> dict[str, Any]:
    """The release's plan as written in it (read once per command for the session's profile; a
    baseline's release is another profile's)."""
    s = c.session
    if c.release.profile == s.profile:
        return s.docs(c.release.run_id).plan
    return read_release(c.release).plan


def stage(c: Change) -> None:
    """Make the Hub checkpoints present in the host's cache (resumable; the running server is untouched)."""
    s = c.session
    s.progress("staging: checking the host's cache")

    def progress(p: staging.StageProgress) -> None:
        s.progress(p.text())
        s.ctx.on_event(s.name, {"event": "stage-progress", **p.to_dict()})

    done = staging.stage(
        s.transport,
        python=c.python,
        root=s.root,
        checkpoints=c.checkpoints,
        env=staging.staging_env(c.stage_env, s.ctx.secrets_env, offline=s.ctx.offline),
        on_progress=progress,
        slot=lambda: s.ctx.stage_slots,
        offline=s.ctx.offline,
    )
    c.staged = {x.repo: x for x in done}
    fetched = sum(x.fetched for x in done)
    unverified = [x for x in done if not x.verified]
    refetched = [x for x in done if x.refetched]  # at their size in the cache, other bytes: fetched again
    s.note(
        f"staged {len(done)} checkpoint(s)"
        + (f", fetched {staging.size_text(fetched)}" if fetched else "" if refetched else ", nothing to fetch")
        + "".join(f"; {x.repo}: {x.refetch_text()}" for x in refetched)
        + "".join(f"; {x.repo}: content unverified ({x.unverified})" for x in unverified)
    )
    s.ctx.on_event(s.name, {"event": "staged", "checkpoints": [x.to_dict() for x in done]})


def materialise(c: Change) -> None:
    """Write the release directory whole (a failed write leaves no part of it)."""
    assert c.facts is not None and c.files is not None
    files = c.files(c.staged) if callable(c.files) else c.files
    rel.materialize(c.release, {**files, "host-facts.json": (host_facts.to_json(c.facts).encode(), 0o644)})


def stop_previous(c: Change) -> Undo | None:
    """Stop every server of the profile; the undo starts `current` again only if its server was
    running (`Change.ran`: a `current` whose server was dead is not started as a "restore"). A
    rolling platform stops only strays: neither `current`'s server nor the release's own."""
    s = c.session
    if s.platform.rolling:
        if c.release.profile != s.profile:  # a baseline beside a deploy that is still verifying: nothing is a stray
            return None
        keep = {c.previous, c.release.run_id} & set(c.running)
        strays = [run_id for run_id in c.running if run_id not in keep]
        if strays:
            s.note(f"stopping {len(strays)} server(s) no release is current for")
            for run_id in strays:
                s.platform.stop(s.release(run_id))
        return None
    for profile in c.clear or (s.profile,):
        stopped = s.platform.stop_running(s.root, profile)
        if profile == s.profile:
            c.stopped = stopped
    previous = c.ran
    if previous is None or previous not in c.stopped:
        if c.previous is not None and c.previous != previous:
            s.note(f"{c.before()}: a failure from here restores nothing")
        return None
    return lambda: restore(s, previous)


def restore(s: HostSession, run_id: str) -> None:
    """Start a release that `current` names again and wait for it within its own budget (a signal
    asks to be quick: then it is started, not waited for)."""
    release = s.release(run_id)
    s.note(f"restoring {run_id}")
    budget = rel.startup_budget(release, STARTUP_BUDGET_S)
    docs = s.docs(run_id)
    s.ctx.take_secrets(docs.profile.secrets)  # its own profile's, which may name others than the new release's
    handle = s.platform.start(release, confirm_within_s=budget + CONFIRM_MARGIN_S, env=s.ctx.secrets_env)
    if s.ctx.cancel.cancelled:
        return
    wait_ready(
        s.platform,
        release,
        docs.port,
        get_engine(docs.profile.engine.name).startup_phases(),
        handle=handle,
        budget_s=budget,
        on_progress=s.progress,
        on_note=s.note,
    )


def start(c: Change) -> Undo | None:
    """Start the new server (detached, its own process group, or a job); the undo stops it. On a
    rolling platform a release whose server still runs is taken as it is."""
    s = c.session
    if s.platform.rolling and c.release.run_id in c.running:
        s.progress(f"{c.release.run_id} is still running")
        c.handle = c.running[c.release.run_id]
        return None
    if s.platform.on_host and c.facts is not None and c.facts.port_free is False:  # ours held it: it must be free now
        again = host_facts.gather(
            s.transport, python=c.python, root=s.root, port=c.port, distribution=c.distribution, address=c.address
        )
        if again.port_free is False:
            said, fix = host_facts.port_refusal(c.port, c.address, again.port_error)
            by = f" by something other than {s.profile}" if again.port_taken else ""
            raise HostError(f"{s.name}: {said}{by}", host=s.name, fix=fix)
    if not s.platform.on_host:
        s.progress("submitting the job")
    c.release.update_record(life="pending")  # before the start: a write lost with the host leaves nothing started
    c.handle = s.platform.start(c.release, confirm_within_s=c.budget_s + CONFIRM_MARGIN_S, env=s.ctx.secrets_env)
    return lambda: _stop(c)


def _stop(c: Change) -> None:
    """Stop the release that was started, and record how its start ended: undone after it served, or failed."""
    c.session.progress(f"stopping {c.release.run_id}")
    c.session.platform.stop(c.release)
    _record_life(c.session, c.release, "rolled-back" if c.switched else "failed-start")


def _record_life(s: HostSession, release: rel.Release, life: Life) -> None:
    """An undo's note in the release's record: the undo itself (a stop, a switch back) happened, so a
    record that cannot be written is said, never reported as the undo failing."""
    try:
        release.update_record(life=life)
    except HostError as exc:
        s.note(f"could not record {release.run_id} as {life}: {exc.message}")


def ready(c: Change) -> None:
    """Wait for a real generation (or, on a multi-node rank other than 0, for rank 0's)."""
    s = c.session
    assert c.handle is not None
    gate = c.ready_gate
    if gate is not None and c.node_rank > 0:  # like sglang's other ranks, it serves no HTTP
        s.progress("waiting for node rank 0")
        if not gate.wait(c.budget_s + CONFIRM_MARGIN_S):
            raise HostError(f"{s.name}: node rank 0 did not become ready", host=s.name, fix="see node rank 0's error")
        return
    try:
        c.startup_s = wait_ready(
            s.platform,
            c.release,
            c.port,
            c.startup_phases,
            handle=c.handle,
            budget_s=c.budget_s,
            on_progress=s.progress,
            on_note=s.note,
            cancel=s.ctx.cancel,
        )
    except BaseException:
        if gate is not None:
            gate.open(False)
        raise
    if gate is not None:
        gate.open(True)


def switch(c: Change) -> Undo | None:
    """Point `current` at the release and record it serving (the one before: superseded, or rolled
    back); the undo points it back (or removes it, when nothing was there). Records that cannot be
    written after the switch put `current` back before the failure is raised: `current` never names
    a release the walk back is about to stop."""
    s = c.session
    release = c.release
    before = c.previous if release.profile == s.profile else rel.linked(s.transport, s.root, release.profile)
    rel.switch(release, startup_s=c.startup_s)
    c.switched = True

    def undo() -> None:
        if before is None:
            rel.unlink(s.transport, release.base)
        else:
            rel.switch(s.release(before, release.profile))
            _record_life(s, s.release(before, release.profile), "serving")
        _record_life(s, release, "rolled-back")

    try:
        release.update_record(life="serving")
        if before is not None and before != release.run_id:
            s.release(before, release.profile).update_record(life=c.replaced_as)
    except BaseException as exc:
        try:
            undo()
        except Exception as failed:  # noqa: BLE001 - the first failure is the one raised; this one is its note
            exc.add_note(f"`current` could not be put back: {failed}")
        raise
    return undo


def retire(s: HostSession, keep: str) -> list[str]:
    """A rolling platform, once `keep` is current and good: cancel the profile's other servers."""
    if not s.platform.rolling:
        return []
    s.progress("stopping the servers of the releases before")
    return s.platform.stop_running(s.root, s.profile, keep=keep)
