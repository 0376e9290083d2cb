"""Deploying a checked profile to a host: materialise a release, stop the old server, start the new
one, wait for a real generation, switch `current`. The local host and SSH hosts share this code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specctl.constants import STARTUP_BUDGET_S
from specctl.errors import HostError
from specctl.flows.static import CheckReport, plan
from specctl.hosts.transport import Transport
from specctl.plan.plan import Plan
from specctl.release import release as rel
from specctl.release.readiness import wait_ready


@dataclass(frozen=True)
class Deployed:
    """A started, ready release on one host."""

    release: rel.Release
    plan: Plan
    url: str
    startup_s: float


def overlay_sources(report: CheckReport, p: Plan) -> dict[str, str]:
    """Where the overlay's links point on the host: the drafter's own files."""
    drafter = report.inputs.profile.drafter
    if p.overlay is None or drafter is None:
        return {}
    if drafter.model.startswith("/"):
        return {name: f"{drafter.model}/{name}" for name in p.overlay.links}
    raise HostError(f"overlays of Hugging Face repo drafters ({drafter.model}) are not supported yet", host="-",
                    fix="download the drafter and point drafter.model at its directory")


def deploy_one(transport: Transport, root: str, report: CheckReport, *, baseline: bool = False, run_id: str | None = None,
               secrets_env: dict[str, str] | None = None, budget_s: float = STARTUP_BUDGET_S,
               on_progress: Callable[[str], None] = lambda stage: None) -> Deployed:
    """Put the profile's plan on one host and start it; the previous server of the profile is stopped first."""
    the_plan = plan(report, baseline=baseline)
    profile = report.inputs.profile
    name = profile.metadata.name + ("-baseline" if baseline else "")
    release = rel.Release(transport, rel.host_root(transport, root), name, run_id or rel.new_run_id())
    documents = {
        "profile.json": profile.model_dump(mode="json", by_alias=True),
        "plan.json": the_plan.to_dict(),
        "manifest.json": report.inputs.manifest.model_dump(mode="json", by_alias=True) if report.inputs.manifest else None,
        "facts.json": {"target": report.inputs.target.summary() if report.inputs.target else None,
                       "drafter": report.inputs.drafter.summary() if report.inputs.drafter else None},
    }
    on_progress("writing release")
    rel.materialize(release, the_plan, the_plan.nodes[0], documents, overlay_sources(report, the_plan))
    previous = rel.linked(transport, release.root, name)
    if previous:
        on_progress("stopping the previous server")
        rel.stop(rel.Release(transport, release.root, name, previous))
    rel.start(release, env=secrets_env)
    startup = wait_ready(release, profile.engine.port, report.inputs.engine.startup_stages(), budget_s=budget_s,
                         on_progress=on_progress)
    rel.switch(release)
    return Deployed(release, the_plan, f"http://{transport.address}:{profile.engine.port}", startup)
