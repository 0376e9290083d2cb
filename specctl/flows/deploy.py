"""Deploying a checked profile to a host: materialise a release, stop the old server, start the new
one, wait for a real generation, switch `current`. The local host and SSH hosts share this code."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.cancel import NEVER, Cancelled, CancelToken

from specctl.constants import STARTUP_BUDGET_S
from specctl.errors import HostError
from specctl.facts import host as host_facts
from specctl.flows.static import CheckReport, plan
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Transport
from specctl.plan.plan import Plan
from specctl.release import lock
from specctl.release import release as rel
from specctl.release.readiness import StartupFailed, wait_ready
from specctl.release.release import SUMMARY_FILE, WORKLOAD_FILE
from specctl.verdict.workload import load_workload


@dataclass(frozen=True)
class Deployed:
    """A started, ready release on one host."""

    release: rel.Release
    plan: Plan
    url: str
    startup_s: float
    previous: str | None  # the run `current` named before this deploy


def overlay_sources(report: CheckReport, p: Plan) -> dict[str, str]:
    """Where the overlay's links point on the host: the drafter's own files."""
    drafter = report.inputs.profile.drafter
    if p.overlay is None or drafter is None:
        return {}
    if drafter.model.startswith("/"):
        return {name: f"{drafter.model}/{name}" for name in p.overlay.links}
    raise HostError(f"overlays of Hugging Face repo drafters ({drafter.model}) are not supported yet", host="-",
                    fix="download the drafter and point drafter.model at its directory")


def release_documents(report: CheckReport, p: Plan) -> dict[str, Any]:
    """What a release keeps of its inputs: resolved profile, plan, manifest, checkpoint facts, the
    pinned workload (so a rollback verifies on the very same prompts) and a one-line summary."""
    inputs = report.inputs
    profile = inputs.profile
    workload = load_workload(profile.verify.workload, Path(inputs.profile_path).parent)
    return {
        "profile.json": profile.model_dump(mode="json", by_alias=True),
        "plan.json": p.to_dict(),
        "manifest.json": inputs.manifest.model_dump(mode="json", by_alias=True) if inputs.manifest else None,
        "facts.json": {"target": inputs.target.summary() if inputs.target else None,
                       "drafter": inputs.drafter.summary() if inputs.drafter else None},
        WORKLOAD_FILE: workload.raw.decode(),
        SUMMARY_FILE: json.dumps({"profile": profile.metadata.name, "version": profile.metadata.version,
                                  "sha256": inputs.profile_sha256, "baseline": p.baseline, "workload": workload.name,
                                  "workload_sha256": workload.sha256}, sort_keys=True) + "\n",
    }


def deploy_one(transport: Transport, root: str, report: CheckReport, *, baseline: bool = False, run_id: str | None = None,
               secrets_env: dict[str, str] | None = None, budget_s: float = STARTUP_BUDGET_S,
               on_progress: Callable[[str], None] = lambda stage: None, cancel: CancelToken = NEVER) -> Deployed:
    """Put the profile's plan on one host and start it; the previous server of the profile is stopped first.
    Cancelled, it stops the new server and starts the previous one again before raising."""
    the_plan = plan(report, baseline=baseline)
    profile = report.inputs.profile
    name = profile.metadata.name + ("-baseline" if baseline else "")
    release = rel.Release(transport, rel.host_root(transport, root), name, run_id or rel.new_run_id())
    on_progress("writing release")
    rel.materialize(release, rel.release_files(the_plan, the_plan.nodes[0], release_documents(report, the_plan),
                                               overlay_sources(report, the_plan)))
    previous_id = rel.linked(transport, release.root, name)
    previous = rel.Release(transport, release.root, name, previous_id) if previous_id else None
    on_progress("stopping the running server")
    rel.stop_running(transport, release.root, name)
    facts = host_facts.gather(transport, python=profile.engine.python, root=release.root, port=profile.engine.port,
                              distribution=report.inputs.engine.distribution())
    transport.put(release.path("host-facts.json"), host_facts.to_json(facts).encode())
    if facts.port_free is False:
        if previous is not None:
            rel.start(previous, env=secrets_env)
        raise HostError(f"{transport.name}: port {profile.engine.port} is in use by something other than {name}",
                        host=transport.name, fix="free the port, or set engine.port to another one")
    stages = report.inputs.engine.startup_stages()
    group = rel.start(release, env=secrets_env)
    try:
        startup = wait_ready(release, profile.engine.port, stages, budget_s=budget_s, on_progress=on_progress,
                             process_group=group, cancel=cancel)
    except Cancelled:
        rel.stop(release)
        if previous is not None:  # started, not waited for: a signal asks to be quick
            rel.start(previous, env=secrets_env)
        raise
    except StartupFailed as failure:
        rel.stop(release)
        if previous is not None:  # `current` still names it: bring it back as it was
            on_progress(f"restoring {previous.run_id}")
            rel.start(previous, env=secrets_env)
            wait_ready(previous, rel.port(previous) or profile.engine.port, stages, budget_s=budget_s, on_progress=on_progress)
            failure.restored = previous.run_id
        raise
    rel.switch(release)
    return Deployed(release, the_plan, f"http://{transport.address}:{profile.engine.port}", startup, previous_id)


@dataclass(frozen=True)
class HostOutcome:
    """What happened on one host."""

    host: str
    ok: bool
    run_id: str | None
    detail: str
    log_tail: tuple[str, ...] = ()
    rolled_back: bool = False


def deploy_fleet(report: CheckReport, hosts: Sequence[HostSpec], *, command: str, max_failures: int = 0,
                 ssh_config: str | None = None, accept_new_host_key: bool = False, secrets_env: dict[str, str] | None = None,
                 budget_s: float = STARTUP_BUDGET_S, on_progress: Callable[[str, str], None] = lambda host, stage: None,
                 run_id: str | None = None, cancel: CancelToken = NEVER) -> list[HostOutcome]:
    """Deploy to every host in parallel (one run id); past `max_failures` failures the others roll back too."""
    run_id = run_id or rel.new_run_id()
    name = report.inputs.profile.metadata.name
    deployed: dict[str, tuple[Transport, Deployed]] = {}

    def one(host: HostSpec) -> Deployed:
        transport = host.transport(ssh_config=ssh_config, accept_new_host_key=accept_new_host_key)
        root = rel.host_root(transport, host.root)
        base = f"{root}/{name}"
        lock.acquire(transport, base, lock.owner(run_id, command))
        try:
            result = deploy_one(transport, root, report, run_id=run_id, secrets_env=secrets_env, budget_s=budget_s,
                                on_progress=lambda stage: on_progress(host.name, stage), cancel=cancel)
            deployed[host.name] = (transport, result)
            return result
        finally:
            lock.release(transport, base)

    if report.inputs.profile.parallel.nnodes > 1:
        return _deploy_multinode(report, hosts, run_id=run_id, command=command, ssh_config=ssh_config,
                                 accept_new_host_key=accept_new_host_key, secrets_env=secrets_env, budget_s=budget_s,
                                 on_progress=on_progress)
    group = run_group(hosts, one)
    outcomes = {h: HostOutcome(h, True, run_id, f"ready in {d.startup_s:.1f} s") for h, d in group.results.items()}
    for host, exc in group.errors.items():
        log = tuple(getattr(exc, "log", ()) or ())
        restored = getattr(exc, "restored", None)
        detail = getattr(exc, "message", str(exc)) + (f"; restored {restored}" if restored else "")
        outcomes[host] = HostOutcome(host, False, None, detail, log)
    if len(group.errors) > max_failures:
        for host, (transport, result) in deployed.items():
            previous = result.previous
            on_progress(host, "rolling back: too many hosts failed")
            rel.stop(result.release)
            if previous:
                prior = rel.Release(transport, result.release.root, name, previous)
                rel.start(prior, env=secrets_env)
                wait_ready(prior, rel.port(prior) or report.inputs.profile.engine.port, report.inputs.engine.startup_stages(),
                           budget_s=budget_s)
                rel.switch(prior)
            else:  # the host had nothing: it goes back to nothing
                rel.unlink(result.release)
            outcomes[host] = HostOutcome(host, False, run_id, f"rolled back to {previous or 'nothing'}: "
                                         f"{len(group.errors)} host(s) failed (max {max_failures})", rolled_back=True)
    return [outcomes[h.name] for h in hosts]


def _deploy_multinode(report: CheckReport, hosts: Sequence[HostSpec], *, run_id: str, command: str, ssh_config: str | None,
                      accept_new_host_key: bool, secrets_env: dict[str, str] | None, budget_s: float,
                      on_progress: Callable[[str, str], None]) -> list[HostOutcome]:
    """One server over several nodes: node rank r on host r, all ranks meeting at node 0's address;
    node 0 starts first, the deploy is ready when node 0 answers, then every node switches `current`."""
    profile = report.inputs.profile
    name, nnodes = profile.metadata.name, profile.parallel.nnodes
    if len(hosts) != nnodes:
        raise HostError(f"{name} spans {nnodes} nodes but {len(hosts)} host(s) were given", host="-",
                        fix=f"pass exactly {nnodes} hosts, node rank 0 first")
    transports = [h.transport(ssh_config=ssh_config, accept_new_host_key=accept_new_host_key) for h in hosts]
    roots = [rel.host_root(t, h.root) for t, h in zip(transports, hosts, strict=True)]
    the_plan = plan(report, node0_address=transports[0].address)
    releases = [rel.Release(t, root, name, run_id) for t, root in zip(transports, roots, strict=True)]
    previous = [rel.linked(t, root, name) for t, root in zip(transports, roots, strict=True)]
    for t, root in zip(transports, roots, strict=True):
        lock.acquire(t, f"{root}/{name}", lock.owner(run_id, command))
    try:
        documents = release_documents(report, the_plan)
        for rank, release in enumerate(releases):
            on_progress(hosts[rank].name, f"writing release (node rank {rank})")
            rel.materialize(release, rel.release_files(the_plan, the_plan.nodes[rank], documents, overlay_sources(report, the_plan)))
            if previous[rank]:
                rel.stop(rel.Release(release.transport, release.root, name, previous[rank]))  # type: ignore[arg-type]
        for rank, release in enumerate(releases):  # rank 0 first: the others join it
            rel.start(release, env=secrets_env)
        try:
            startup = wait_ready(releases[0], profile.engine.port, report.inputs.engine.startup_stages(), budget_s=budget_s,
                                 on_progress=lambda stage: on_progress(hosts[0].name, stage))
        except StartupFailed as failure:
            for release in releases:
                rel.stop(release)
            return [HostOutcome(h.name, False, None, failure.message, tuple(failure.log) if rank == 0 else ())
                    for rank, h in enumerate(hosts)]
        for release in releases:
            rel.switch(release)
        return [HostOutcome(h.name, True, run_id, f"node rank {rank}" + (f", ready in {startup:.1f} s" if rank == 0 else ""))
                for rank, h in enumerate(hosts)]
    finally:
        for t, root in zip(transports, roots, strict=True):
            lock.release(t, f"{root}/{name}")
