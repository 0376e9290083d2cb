"""`status`, `stop`, `hosts --check` and `deploy --dry-run`: what of a profile runs on each host,
found by every release's pid file and by the environment every server inherits (so a server whose
release or pid file is gone is still found), and stopping all of it under the profile's lock."""

from __future__ import annotations

import calendar
import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.engines.base import Engine
from specctl.errors import HostError
from specctl.facts import host as host_facts
from specctl.facts.host import HostFacts
from specctl.flows.session import error_text
from specctl.flows.static import CheckReport, plan
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Transport
from specctl.plan.plan import Plan
from specctl.profile.profile import Profile, is_local_path
from specctl.release import lock, staging
from specctl.release import release as rel
from specctl.release.platform import Platform, platform_of, server_url
from specctl.verdict.client import EngineClient


@dataclass(frozen=True)
class Reach:
    """How to reach hosts (the SSH options of the command)."""

    ssh_config: str | None = None
    accept_new_host_key: bool = False

    def open(self, host: HostSpec) -> tuple[Transport, str]:
        t = host.transport(ssh_config=self.ssh_config, accept_new_host_key=self.accept_new_host_key)
        return t, rel.host_root(t, host.root, host.name)


@dataclass
class HostStatus:
    """One host as `status` sees it."""

    host: str
    current: str | None = None
    running: bool = False  # current's server runs
    healthy: bool = False  # and answers a generation
    servers: list[dict[str, Any]] = field(default_factory=list)  # every server of the profile, current or not
    strangers: list[str] = field(default_factory=list)  # pid files naming processes specctl did not start here
    # how the current release stands, from its record: verified (with its interval), FAILED verify,
    # a tune candidate, or UNVERIFIED (deployed with --no-verify, or its verify never finished)
    verification: str | None = None
    serving_since: str | None = None  # when its record last changed its life (None: a release from before records)
    record: dict[str, Any] | None = None  # the current release's record (release/record.py), for --json
    ended: str | None = None  # why the current release's server no longer runs, when its platform says (a job's end)
    locked_by: str | None = None
    error: str | None = None

    @property
    def summary(self) -> str:
        if self.error:
            return f"unreachable: {self.error}"
        others = [s for s in self.servers if not s["current"]]
        text = (
            "healthy"
            if self.healthy
            else "running, not answering"
            if self.running
            else "not running" + (f": {self.ended}" if self.ended else "")
            if self.current
            else "nothing deployed"
        )
        job = next((s.get("job_state") for s in self.servers if s["current"]), None)
        if job:
            text += f" (job {job})"
        if self.current and self.verification:
            since = f" (serving since {self.serving_since})" if self.serving_since and self.running else ""
            text += f"; {self.current} {self.verification}{since}"
        mine = [s for s in self.servers if s["current"]]
        if len(mine) > 1:  # one release, two servers (a submission whose reply was lost landed twice)
            text += f"; {len(mine)} SERVERS of {self.current}: " + ", ".join(_handle(s) for s in mine)
        if others:
            twice = {s["release"] for s in others if sum(o["release"] == s["release"] for o in others) > 1}
            text += "; ALSO RUNNING, not current: " + ", ".join(
                s["release"] + (f" ({_handle(s)})" if s["release"] in twice else "") + _deadline(s) for s in others
            )
        if self.strangers:
            text += "; " + "; ".join(self.strangers)
        return text


def status(reach: Reach, profile: str, port: int, hosts: Sequence[HostSpec]) -> list[HostStatus]:
    def one(host: HostSpec) -> HostStatus:
        t, root = reach.open(host)
        base = f"{root}/{profile}"
        platform = platform_of(host, t)
        seen = platform.look(base)
        found = HostStatus(host.name, seen.current, strangers=[s.describe(host.name) for s in seen.strangers])
        for server in seen.servers:
            its = rel.Release(t, root, profile, server.release)
            current = server.release == found.current
            deadline = None if current else _confirm_by(t, its)
            found.servers.append(
                {
                    "release": server.release,
                    "process_group" if platform.on_host else "job": server.handle,
                    **({"job_state": server.note} if server.note else {}),
                    "current": current,
                    "confirm_by": deadline,
                    # a deadline is a promise only while the watchdog that keeps it is seen alive
                    "watchdog": platform.watchdog(its) if deadline else None,
                }
            )
        found.running = any(s["current"] for s in found.servers)
        release = rel.Release(t, root, profile, found.current) if found.current else None
        if release is not None:
            kept = release.record(current=True)
            found.verification, found.serving_since = kept.verification.text, kept.since or None
            found.record = kept.to_dict()
        if release is not None and not found.running:
            found.ended = platform.ended(release)
        if found.running and release is not None:
            serving = rel.port(release) or port
            found.healthy = EngineClient(server_url(platform, release, serving), timeout_s=10).healthy(timeout_s=10)
        held = lock.read(t, base)
        found.locked_by = lock.describe(held) if held else None
        return found

    group = run_group(hosts, one)
    return [
        group.results[h.name] if h.name in group.results else HostStatus(h.name, error=error_text(group.errors[h.name]))
        for h in hosts
    ]


WATCHDOG_SLACK_S = 90  # past a deadline: the watchdog's grace (TERM, 30 s, KILL), its one-second polls, clocks


def _deadline(server: dict[str, Any]) -> str:
    """When a server that is not current stops itself, said only while its watchdog is seen alive; else
    that it will not (its watchdog is gone), or that it should have and did not."""
    deadline = server.get("confirm_by")
    if not deadline:
        return ""
    due = calendar.timegm(time.strptime(deadline, "%Y-%m-%dT%H:%M:%SZ"))
    if time.time() > due + WATCHDOG_SLACK_S:
        return f" (was to stop itself at {deadline}: its watchdog is gone; `specctl stop` stops it)"
    if not server.get("watchdog"):
        return f" (was to stop itself at {deadline}, but no watchdog is seen: it will not; `specctl stop` stops it)"
    return f" (stops itself at {deadline})"


def _handle(server: dict[str, Any]) -> str:
    return str(server.get("job", server.get("process_group", "?")))


def _confirm_by(t: Transport, release: rel.Release) -> str | None:
    raw = t.read(release.path("confirm-by"))
    if not raw or not raw.strip().isdigit():
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(raw.strip())))


def stop(
    reach: Reach,
    profile: str,
    hosts: Sequence[HostSpec],
    *,
    command: str,
    on_note: Callable[[str, str], None] = lambda host, text: None,
) -> dict[str, list[str] | str]:
    """Stop every server of the profile on each host, under its lock; per host the releases stopped
    (or the error). `on_note(host, text)`: what taking a lock says (an empty file taken over, a root
    last used under another name, a stale holder)."""
    owner = lock.owner(rel.new_run_id(), command)
    seen = lock.Seen()

    def one(host: HostSpec) -> list[str]:
        t, root = reach.open(host)
        base = f"{root}/{profile}"
        platform = platform_of(host, t)
        for text in lock.said(lock.take(t, base, owner, own_root=platform.machine_root, seen=seen)):
            on_note(host.name, text)
        try:
            return platform.stop_running(root, profile)
        finally:
            lock.release(t, base)

    group = run_group(hosts, one)
    return {
        h.name: group.results[h.name] if h.name in group.results else error_text(group.errors[h.name]) for h in hosts
    }


def facts(
    reach: Reach, hosts: Sequence[HostSpec], *, python: str, port: int, distribution: str
) -> list[dict[str, Any]]:
    """`hosts --check`: per host, reachable or not, and its facts (GPUs, CUDA, Python, engine, disk, port)."""

    def one(h: HostSpec) -> HostFacts:
        t, root = reach.open(h)
        return host_facts.gather(
            t, python=python or h.python or "python3", root=root, port=port, distribution=distribution
        )

    group = run_group(hosts, one)
    return [
        {"host": h.name, "reachable": True, "facts": group.results[h.name].to_dict()}
        if h.name in group.results
        else {"host": h.name, "reachable": False, "error": error_text(group.errors[h.name])}
        for h in hosts
    ]


def _prove(
    t: Transport,
    root: str,
    p: Profile,
    engine: Engine,
    the_plan: Plan,
    rank: int,
    secrets_env: Mapping[str, str],
    *,
    on_host: bool,
    refused: Sequence[str] = (),
    current: str | None = None,
) -> dict[str, Any]:
    """The deploy's `prove` as a dry run, by the same driver (flows/prove.py `prove_host`): the host's
    facts judged against the profile (as the deploy's preflight judges them), the launch script as it
    would be written run on the host with its `exec` replaced (paths inside the release to be written
    are not asked), the port tried unless `current`'s release says it serves on it (its stop frees
    it), and `refused`: what the platform's own dry run of the start refused (`_prove_start`)."""
    from specctl.flows import prove as proving
    from specctl.plan.render import render_sh

    facts, held = None, False
    if on_host:
        port = p.engine.port
        facts = host_facts.gather(
            t, python=p.engine.python, root=root, port=port, distribution=engine.distribution(), address=p.engine.host
        )
        held = current is not None and rel.port(rel.Release(t, root, p.metadata.name, current)) in (port, None)
    proof, found = proving.prove_host(
        t,
        engine=engine,
        profile=p,
        plan=the_plan.to_dict(),
        release_dir=f"{root}/{p.metadata.name}/releases/{rel.new_run_id()}",
        root=root,
        secrets_env=secrets_env,
        on_host=on_host,
        prove_start=lambda: refused,
        port_held=held,
        facts=facts,
        launch=render_sh(the_plan, the_plan.nodes[min(rank, len(the_plan.nodes) - 1)]),
    )
    problems = [{"check": x.check, "message": x.message, "fix": x.fix} for x in found]
    return {"ok": not found, "problems": problems, **(proof.to_dict() if proof is not None else {})}


def _prove_start(
    t: Transport, platform: Platform, the_plan: Plan, report: CheckReport, root: str, *, hf_home: str | None
) -> list[str]:
    """The platform's dry run of the start (`Platform.prove_start`: a scheduler asked whether it would
    take the job, submitting nothing), as the deploy's prove asks it. What the platform adds to a
    release (a job script) is written, for this question only, to a directory of its own in the
    host's temporary directory and removed after: the state root is not written."""
    run_id = rel.new_run_id()
    p, distribution = report.inputs.profile, report.inputs.engine.distribution()
    profile = p.metadata.name
    if not platform.release_files(the_plan, p, distribution, rel.Release(t, root, profile, run_id), hf_home=hf_home):
        return platform.prove_start(rel.Release(t, root, profile, run_id))  # nothing of its own to ask with
    scratch = t.run(["mktemp", "-d"]).stdout.strip()
    try:
        asked = rel.Release(t, scratch, profile, run_id)
        for name, content in platform.release_files(the_plan, p, distribution, asked, hf_home=hf_home).items():
            if isinstance(content, tuple):  # a link is not asked of anything: only files are
                t.put(asked.path(name), content[0], mode=content[1])
        return platform.prove_start(asked)
    finally:
        t.run(["rm", "-rf", "--", scratch], check=False)


def preview(
    reach: Reach, report: CheckReport, hosts: Sequence[HostSpec], *, secrets_env: Mapping[str, str]
) -> list[dict[str, Any]]:
    """`deploy --dry-run`: per host, what runs now, what staging would fetch, where the drafter
    overlay would link, the launch command, and the deploy's prove (a failure is what a deploy would
    stop at); nothing is written in the state root or fetched."""
    p = report.inputs.profile
    profile, version = p.metadata.name, p.metadata.version
    the_plan = plan(report, node0_address=None)
    checkpoints = staging.profile_checkpoints(p, baseline=False)

    def one(host: HostSpec) -> dict[str, Any]:
        t, root = reach.open(host)
        current = rel.linked(t, root, profile)
        shown = "nothing"
        if current:
            raw = t.read(f"{root}/{profile}/releases/{current}/profile.json")
            try:
                running = json.loads(raw)["metadata"]["version"] if raw else "?"
            except (ValueError, KeyError, TypeError):
                running = "?"
            shown = f"{current} (v{running})"
        row: dict[str, Any] = {
            "host": host.name,
            "current": shown,
            "would_deploy": f"v{version} (a new release; current switches when ready)",
        }
        snapshots: dict[str, str] = {}
        if checkpoints:
            try:
                answer = staging.plan(
                    t,
                    python=p.engine.python,
                    root=root,
                    checkpoints=checkpoints,
                    env=staging.staging_env(p.engine.env, secrets_env, host.hf_home),
                )
                row["stage"] = [
                    {"repo": x.repo, "staged": True, "bytes": x.bytes, "fetch": 0} for x in answer.staged
                ] + [{"repo": x.repo, "staged": False, "bytes": x.bytes, "fetch": x.fetch} for x in answer.planned]
                row["disk"] = {"cache": answer.cache, "free": answer.free, "need": answer.need, "fits": answer.fits}
                snapshots = {
                    **{x.repo: x.snapshot for x in answer.staged},
                    **{x.repo: x.snapshot for x in answer.planned},
                }
            except HostError as exc:
                row["stage"] = [{"repo": c.repo, "staged": None, "error": error_text(exc)} for c in checkpoints]
        rank = hosts.index(host) if p.parallel.nnodes > 1 else 0
        row["launch"] = shlex.join(the_plan.nodes[min(rank, len(the_plan.nodes) - 1)].argv)
        platform = platform_of(host, t)
        placed = the_plan
        if platform.node0_address is not None:  # the platform places the node ranks: they meet where it says
            placed = plan(report, node0_address=platform.node0_address)
            row["launch"] = shlex.join(placed.nodes[0].argv)
            row.update(platform.dry_run_settings(placed, p, report.inputs.engine.distribution(), f"{root}/{profile}"))
        if the_plan.overlay is not None and p.drafter is not None:
            source = (
                p.drafter.model
                if is_local_path(p.drafter.model)
                else snapshots.get(p.drafter.model, "(the staged snapshot)")
            )
            row["overlay"] = {
                "directory": the_plan.overlay.directory,
                "links_to": source,
                "links": len(the_plan.overlay.links),
                "ids": (the_plan.capture or {}).get("ids"),
            }
        refused = _prove_start(t, platform, placed, report, root, hf_home=host.hf_home)
        row["prove"] = _prove(
            t,
            root,
            p,
            report.inputs.engine,
            the_plan,
            rank,
            secrets_env,
            on_host=platform.on_host,
            refused=refused,
            current=current,
        )
        return row

    group = run_group(hosts, one)
    for error in group.errors.values():
        raise error
    return [group.results[h.name] for h in hosts]
