"""`watch`: the serving release's acceptance, judged window by window from the engine's own metrics,
and what to do when it degrades.

Every few seconds each host is looked at twice: which release serves (its `current` and its server's
process, so a restart or a switch shows) and the engine's `/metrics`. Every `interval` the looks of
the last `window` are turned into a window (verdict/window.py) and judged against the release's
verified interval and gates (verdict/drift.py), recorded in the ledger, written to a node-exporter
textfile when asked, and acted on when degraded:

- `alert` (default): recorded, and the exit status says so;
- `plain`: the host serves the same target without speculation (the profile's baseline twin, a
  release like any other: `specctl rollback` undoes it), the move when speculation costs more than
  it saves, as under a traffic shift;
- `rollback`: as `specctl rollback` (the newest verified release other than the serving one), but
  only when that release differs in drafter, layer ids, speculative settings or engine: an older
  release of the same drafter cannot fix a traffic shift.

At most one automatic action per release and host, then none on that host for `cooldown`. A
release without metrics, or a window with too little traffic, is `unknown`, unless `probe` sends a
small probe from the profile's workload and judges on its requests' own counters (marked `probe`).
A window the engine's counters cannot vouch for (a value NaN, ±Inf or negative, a series twice, a
counter going back: verdict/window.py) is `unknown` with why, and never acted on. A host whose
`current` runs no server (killed, a job gone) is `down`, exit 3; one whose `/metrics` answers
something that is not the Prometheus text format (garbage, HTML, binary) is `unreadable` (its
content type and size are said, never its bytes): neither is judged, nor acted on.
The watch holds no lock while it looks; an action takes the host's lock as any verb does.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specctl.engines import get_engine
from specctl.errors import HostError, InputError, ServerUnreachable
from specctl.flows.change import Change
from specctl.flows.prompts import release_prompts
from specctl.flows.recorder import Recorder, recording
from specctl.flows.release_files import release_contents
from specctl.flows.report import profile_fields
from specctl.flows.rollback import choose_release, release_records, rollback
from specctl.flows.session import Context, HostSession, error_text
from specctl.flows.static import CheckReport, plan
from specctl.flows.steps import Walk
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.ledger.records import WatchWindow
from specctl.profile.profile import Profile
from specctl.release.record import Verification, now
from specctl.release.staging import host_env
from specctl.verdict import prometheus
from specctl.verdict.client import EngineClient, MetricsPage
from specctl.verdict.drift import MIN_REQUESTS, Expectation, WindowVerdict, judge
from specctl.verdict.engine_errors import EngineHTTPError
from specctl.verdict.measure import measure
from specctl.verdict.window import Scrape, Window, from_scrapes

ACTIONS = ("alert", "plain", "rollback")
PROBE_REQUESTS = 8  # a probe's requests: enough for an interval (stats.MIN_SAMPLES), few enough to be light
PLAIN_SUFFIX = "plain"  # in the description of a release `watch` started without speculation
STATES = ("ok", "degraded", "unknown", "unreadable", "down", "unreachable")  # a host's state in one window


@dataclass(frozen=True)
class WatchOptions:
    interval_s: float = 300.0
    window_s: float = 1800.0
    once: bool = False
    probe: bool = False
    on_degraded: str = "alert"
    cooldown_s: float = 3600.0
    textfile: Path | None = None
    look_every_s: float | None = None  # between two looks at the engine (default: a thirtieth of the window)

    @property
    def step_s(self) -> float:
        return self.look_every_s or min(15.0, max(1.0, self.window_s / 30))


@dataclass
class HostWindow:
    """One host's outcome for one window."""

    host: str
    release: str | None
    window: Window | None = None
    verdict: WindowVerdict | None = None
    action: str | None = None  # what was done: "alert", "plain: <release>", "rollback: <release>", "refused: why"
    error: str | None = None  # the host could not be reached
    down: str | None = None  # why the release is down: `current` names it, no server of it runs
    unreadable: str | None = None  # why its metrics page could not be read (never its bytes)

    @property
    def state(self) -> str:
        if self.error:
            return "unreachable"
        if self.down:
            return "down"
        if self.unreadable:
            return "unreadable"
        return self.verdict.state if self.verdict else "unknown"

    @property
    def reason(self) -> str | None:
        return self.error or self.down or self.unreadable or (self.verdict.reason if self.verdict else None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "release": self.release,
            "state": self.state,
            "reason": self.reason,
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "window": self.window.to_dict() if self.window else None,
            "action": self.action,
            "error": self.error,
        }


@dataclass
class HostWatch:
    """One host under watch: its session, and its recent looks at the engine."""

    ctx: Context
    session: HostSession
    looks: deque[Scrape] = field(default_factory=deque)
    no_metrics: str | None = None  # why the serving release answers no metrics page
    down: str | None = None  # at the last look: `current` names a release no server of which runs
    unreadable: str | None = None  # at the last look: its metrics page is not the text format

    def look(self) -> None:
        """Which server serves, and what its metrics say (a release without metrics: no look)."""
        s = self.session
        seen = s.platform.look(s.base)
        current = seen.current
        self.no_metrics = self.down = self.unreadable = None
        if current is None:
            return
        handle = next((x.handle for x in seen.servers if x.release == current), None)
        if handle is None:
            self.down = f"{current} is current on {s.name}, but no server of it runs (stopped, killed or its job ended)"
            return
        docs = s.docs(current)
        try:
            page = EngineClient(s.server_url(s.release(current), docs.port), timeout_s=10).metrics(timeout_s=10)
        except EngineHTTPError as exc:
            self.no_metrics = (
                "the release serves no metrics (launched without --enable-metrics)"
                if exc.status == 404
                else f"its metrics could not be read: {exc.message}"
            )
            return
        try:
            samples = prometheus.parse(page.body.decode("utf-8"))
        except (UnicodeDecodeError, prometheus.MetricsError):
            self.unreadable = unreadable(page)
            return
        self.looks.append(Scrape(time.time(), tuple(samples), f"{current} (process {handle})"))

    def window(self, since: float) -> tuple[str | None, Window | None]:
        """The serving release and its window from the looks since `since` (older looks are dropped)."""
        while self.looks and self.looks[0].at < since:
            self.looks.popleft()
        current = self.session.current()
        if current is None or self.no_metrics:
            return current, None
        source = get_engine(self.session.docs(current).profile.engine.name).watch_source(
            self.session.docs(current).profile.engine.version
        )
        if source is None:
            return current, None
        return current, from_scrapes(list(self.looks), source)


def unreadable(page: MetricsPage) -> str:
    """What a metrics page that is not the text format is, said by its declared type and size only:
    its bytes are whatever the server (or a proxy in front of it) sent, and are never quoted."""
    return (
        f"its /metrics page is not the Prometheus text format ({page.content_type}, {len(page.body)} bytes); "
        "check that the port is the engine's own"
    )


def expectation(session: HostSession, run_id: str, tolerance: float) -> Expectation:
    """What the release is held to: its own profile's gate, and the interval its record says it verified at."""
    record = session.release(run_id).record(current=True)
    v = record.verification
    low = (v.accept_length or {}).get("low") if v.state == "verified" and not v.tune_candidate else None
    gate = session.docs(run_id).profile.verify.min_accept_length
    if isinstance(gate, dict):  # per operating point; serving traffic has no one concurrency: the most lenient
        gate = min(gate.values())
    return Expectation(gate, low, tolerance)


def probe_window(session: HostSession, run_id: str) -> Window:
    """A small probe from the release's own workload, one request at a time: each request's
    completion tokens and verify steps (from its meta_info) are one observation."""
    release, docs = session.release(run_id), session.docs(run_id)
    engine = get_engine(docs.profile.engine.name)
    client = EngineClient(session.server_url(release, docs.port), cancel=session.ctx.cancel)
    start = time.time()
    measured = measure(
        client,
        release_prompts(release, docs, engine),
        requests=PROBE_REQUESTS,
        max_new_tokens=docs.profile.verify.max_new_tokens,
        temperature=docs.profile.verify.temperature,
    )
    pairs = tuple(
        (float(g.completion_tokens), float(g.spec_verify_ct)) for g in measured.generations if g.spec_verify_ct
    )
    return Window(
        start, time.time(), "probe", pairs, len(measured.generations), note="a probe specctl sent, not user traffic"
    )


def rollback_differences(serving: Profile, candidate: Profile) -> list[str]:
    """What differs between two releases in what decides acceptance: drafter, its layer ids,
    speculative settings, engine. Empty: going back cannot fix a drop (the traffic moved)."""

    def parts(p: Profile) -> dict[str, object]:
        return {
            "drafter": p.drafter.model_dump(mode="json") if p.drafter else None,
            "speculative": p.speculative.model_dump(mode="json"),
            "engine": (p.engine.name, p.engine.version, p.engine.args),
            "target": (p.target.model, p.target.revision),
        }

    was, other = parts(serving), parts(candidate)
    return [name for name in was if was[name] != other[name]]


def may_act(history: Sequence[WatchWindow], host: str, release: str, at: float, cooldown_s: float) -> str | None:
    """Why no automatic action may be taken now (None: it may): one per release, then a cool-down per host."""
    acted = [w for w in history if w.host == host and w.action and w.action.split(":")[0] in ("plain", "rollback")]
    if any(w.release == release for w in acted):
        return f"an automatic action was already taken on {release}"
    if acted:
        last = datetime.fromisoformat(acted[-1].ended_at.replace("Z", "+00:00")).timestamp()
        if at - last < cooldown_s:
            return f"cooling down after the action at {acted[-1].ended_at} ({cooldown_s:.0f} s)"
    return None


def serve_plain(ctx: Context, report: CheckReport, session: HostSession, serving: str, rec: Recorder) -> str:
    """Start the serving release's target without speculation as the profile's new current release
    (its baseline twin), under the lock; the speculative release stays on disk for a rollback."""
    p = report.inputs.profile
    if session.docs(serving).summary.get("sha256") != report.inputs.profile_sha256:
        raise InputError(
            f"{session.name}: the serving release {serving} was not made from this profile file",
            fix="pass the profile the serving release was deployed from, or use --on-degraded alert",
        )
    if p.parallel.nnodes > 1:
        raise InputError("plain decoding for a multi-node release is not automated", fix="use --on-degraded alert")
    the_plan = plan(report, baseline=True)
    release = session.release(f"{rec.run_id}-{session.name}-{PLAIN_SUFFIX}")
    node = dataclasses.replace(the_plan.nodes[0], env=host_env(the_plan.nodes[0].env, session.spec.hf_home))
    with session.locked(rec.run_id):
        change = Change.new(
            session,
            release,
            report,
            files=release_contents(
                report, the_plan, node, platform=session.platform, release=release, hf_home=session.spec.hf_home
            ),
        )
        Walk(rec.events(session.name), before=ctx.cancel.check).run(change.steps())
        release.update_record(verification=Verification("skipped", rec.run_id, now()))
    return release.run_id


def act(
    ctx: Context, report: CheckReport, opts: WatchOptions, hw: HostWatch, result: HostWindow, rec: Recorder
) -> None:
    """The chosen response to a degraded window, recorded on the result."""
    if opts.on_degraded == "alert" or result.release is None:
        result.action = "alert"
        return
    s = hw.session
    why_not = may_act(ctx.ledger.windows(profile=s.profile), s.name, result.release, time.time(), opts.cooldown_s)
    if why_not:
        result.action = f"refused: {why_not}"
        return
    try:
        if opts.on_degraded == "plain":
            result.action = f"plain: {serve_plain(ctx, report, s, result.release, rec)}"
            return
        candidate = choose_release(release_records(s.transport, s.root, s.profile), result.release)
        differs = rollback_differences(s.docs(result.release).profile, s.docs(candidate.run_id).profile)
        if not differs:
            result.action = (
                f"refused: {candidate.run_id}, the newest verified release, has the same drafter, layer ids, "
                "speculative settings and engine: going back cannot fix a traffic shift"
            )
            return
        try:
            back = rollback(ctx, s.spec, s.profile, to_run=candidate.run_id, parent=rec.run_id)
        except ServerUnreachable as exc:  # it was restarted; only its verify found no server to ask
            result.action = f"rollback: {candidate.run_id} (its verify reached no server: {exc.message})"
            return
        result.action = f"rollback: {back.rolled_back_to}" + ("" if back.passed else " (its verify FAILED)")
    except (InputError, HostError) as exc:
        result.action = f"refused: {exc.message}"


def textfile(directory: Path, profile: str, results: Sequence[HostWindow]) -> Path:
    """specctl's gauges in the node-exporter textfile format, written by prometheus_client's own
    registry and `write_to_textfile`: replaced whole (a collector never reads half a file)."""
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

    registry = CollectorRegistry(auto_describe=True)
    keys = ("profile", "host", "release")

    def gauge(name: str, text: str, *extra: str) -> Gauge:
        return Gauge(name, text, [*keys, *extra], registry=registry)

    estimate = gauge("specctl_watch_accept_length", "Accept length of the serving release over the last window.")
    low = gauge("specctl_watch_accept_length_low", "Lower bound of that window's interval.")
    high = gauge("specctl_watch_accept_length_high", "Upper bound of that window's interval.")
    floor = gauge("specctl_watch_floor", "The accept length below which a window is degraded.")
    state = gauge("specctl_watch_state", f"1 for the window's state ({', '.join(STATES)}).", "state")
    ended = gauge("specctl_watch_window_end_seconds", "When the window ended (Unix time).")
    for r in results:
        labels = (profile, r.host, r.release or "")
        interval = r.verdict.interval if r.verdict else None
        if interval:  # an interval's figures are finite (a window with a NaN or ±Inf is discarded)
            estimate.labels(*labels).set(interval.estimate)
            low.labels(*labels).set(interval.low)
            high.labels(*labels).set(interval.high)
        if r.verdict and r.verdict.floor is not None:
            floor.labels(*labels).set(r.verdict.floor)
        for name in STATES:
            state.labels(*labels, name).set(float(r.state == name))
        if r.window:
            ended.labels(*labels).set(r.window.end)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"specctl_watch_{profile}.prom"
    write_to_textfile(str(path), registry)  # to `path.PID.THREAD` beside it, then renamed over it
    path.chmod(0o644)
    return path


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def judge_host(
    ctx: Context, report: CheckReport, opts: WatchOptions, hw: HostWatch, since: float, rec: Recorder
) -> HostWindow:
    """One host's window: formed, judged as the next look at its release, recorded, acted on."""
    s = hw.session
    current, window = hw.window(since)
    result = HostWindow(s.name, current)
    if current is None:
        result.error = f"{s.profile} has no current release on {s.name}"
        return result
    if hw.down or hw.unreadable:  # nothing to judge: never a verdict, never an action
        result.down, result.unreadable = hw.down, hw.unreadable
        ctx.ledger.record_window(
            WatchWindow(
                rec.run_id,
                s.name,
                current,
                s.profile,
                _iso(since),
                _iso(time.time()),
                result.state,
                0,
                detail={"reason": result.reason},
            )
        )
        return result
    if s.docs(current).summary.get("baseline"):  # without speculation (watch's own plain fallback)
        window = Window(
            since, time.time(), "none", discarded="the release serves without speculation: nothing to watch"
        )
    elif opts.probe and (window is None or window.discarded or window.requests < MIN_REQUESTS):
        s.progress("probing: too little traffic or no metrics in the window")
        window = probe_window(s, current)
    if window is None:
        window = Window(since, time.time(), "none", discarded=hw.no_metrics or "the engine serves no metrics")
        if not opts.probe:
            window = dataclasses.replace(window, discarded=f"{window.discarded}; --probe measures it with a probe")
    expect = expectation(s, current, report.inputs.profile.watch.tolerance)
    look = ctx.ledger.looks(current, s.name) + 1
    result.window, result.verdict = window, judge(window, expect, look)
    if result.verdict.state == "degraded":
        act(ctx, report, opts, hw, result, rec)
    interval = result.verdict.interval
    ctx.ledger.record_window(
        WatchWindow(
            rec.run_id,
            s.name,
            current,
            s.profile,
            _iso(window.start),
            _iso(window.end),
            result.verdict.state,
            result.verdict.look,
            interval.estimate if interval else None,
            interval.low if interval else None,
            interval.high if interval else None,
            result.verdict.floor,
            window.method,
            window.requests,
            result.action,
            {
                "window": window.to_dict(),
                "verdict": result.verdict.to_dict(),
                "expected": {"gate": expect.gate, "verified_low": expect.verified_low, "tolerance": expect.tolerance},
            },
        )
    )
    return result


def _judge_named(
    ctx: Context,
    report: CheckReport,
    opts: WatchOptions,
    watchers: dict[str, HostWatch],
    since: float,
    rec: Recorder,
    host: HostSpec,
) -> HostWindow:
    return judge_host(ctx, report, opts, watchers[host.name], since, rec)


def exit_status(results: Sequence[HostWindow]) -> int:
    """--once: 4 when it acted, 3 when a host could not be reached or its release is down, 1 when
    degraded, else 0 (ok, unknown, unreadable: nothing decided)."""
    if any(r.action and r.action.split(":")[0] in ("plain", "rollback") for r in results):
        return 4
    if any(r.error or r.down for r in results):
        return 3
    return 1 if any(r.state == "degraded" for r in results) else 0


def watch(
    ctx: Context,
    report: CheckReport,
    hosts: Sequence[HostSpec],
    opts: WatchOptions,
    *,
    on_window: Callable[[list[HostWindow]], None] = lambda results: None,
) -> int:
    """Watch every host until stopped (or one window, with `once`); the exit status of the last window."""
    if opts.on_degraded not in ACTIONS:
        raise InputError(f"--on-degraded {opts.on_degraded!r}", fix=f"use one of: {', '.join(ACTIONS)}")
    name = report.inputs.profile.metadata.name
    watchers = {h.name: HostWatch(ctx, ctx.session(h, name)) for h in hosts}
    errors: dict[str, str] = {}
    status = 0
    with recording(
        ctx,
        "watch",
        hosts=[h.name for h in hosts],
        **profile_fields(report),
        inputs={
            "interval_s": opts.interval_s,
            "window_s": opts.window_s,
            "once": opts.once,
            "probe": opts.probe,
            "on_degraded": opts.on_degraded,
        },
    ) as rec:
        start = time.time()
        due = start + opts.window_s
        for hw in watchers.values():
            hw.session.note(
                f"looking every {opts.step_s:g} s; "
                + ("one window" if opts.once else f"a verdict every {opts.interval_s:g} s over the last")
                + f" {opts.window_s:g} s, the first at {_iso(due)}"
            )
        while True:
            looked = run_group(hosts, lambda h: watchers[h.name].look())
            errors = {h: error_text(e) for h, e in looked.errors.items()}
            ctx.cancel.check()
            if time.time() >= due:
                since = time.time() - opts.window_s - opts.step_s / 2
                judged = run_group(
                    [h for h in hosts if h.name not in errors],
                    functools.partial(_judge_named, ctx, report, opts, watchers, since, rec),
                )
                results = [
                    judged.results.get(h.name)
                    or HostWindow(h.name, None, error=errors.get(h.name) or error_text(judged.errors[h.name]))
                    for h in hosts
                ]
                status = exit_status(results)
                if opts.textfile is not None:
                    textfile(opts.textfile, name, results)
                on_window(results)
                rec.outcome.verdict = {"windows": [r.to_dict() for r in results]}
                rec.outcome.status = "succeeded" if status in (0, 4) else "failed"
                if opts.once:
                    break
                due += opts.interval_s
            ctx.cancel.sleep(max(0.0, min(opts.step_s, due - time.time())))
    return status
