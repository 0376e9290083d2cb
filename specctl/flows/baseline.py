"""The baseline: the same target without speculation, measured on the same workload, so that
speedup has something honest to divide by. It borrows the host: the profile's server is stopped,
the baseline served and measured, then the profile's current release is started again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specctl.cancel import NEVER, CancelToken
from specctl.constants import STARTUP_BUDGET_S
from specctl.flows.deploy import deploy_one
from specctl.flows.static import CheckReport
from specctl.hosts.transport import Transport
from specctl.release import release as rel
from specctl.release.readiness import wait_ready
from specctl.verdict.client import EngineClient
from specctl.verdict.measure import Measurement, measure, warm_up
from specctl.verdict.workload import load_workload


@dataclass(frozen=True)
class BaselineResult:
    release: rel.Release
    measurement: Measurement
    workload_sha256: str


def run_baseline(transport: Transport, root: str, report: CheckReport, *, run_id: str, secrets_env: dict[str, str] | None = None,
                 budget_s: float = STARTUP_BUDGET_S, cancel: CancelToken = NEVER,
                 on_progress: Callable[[str], None] = lambda stage: None) -> BaselineResult:
    """Serve and measure the baseline on one host, then give the host back to the profile."""
    profile = report.inputs.profile
    name, v = profile.metadata.name, profile.verify
    root = rel.host_root(transport, root)
    current = rel.linked(transport, root, name)
    was_running = rel.stop_running(transport, root, name)
    deployed = None
    try:
        deployed = deploy_one(transport, root, report, baseline=True, run_id=run_id, secrets_env=secrets_env,
                              budget_s=budget_s, on_progress=on_progress, cancel=cancel)
        workload = load_workload(v.workload, Path(report.inputs.profile_path).parent)
        client = EngineClient(deployed.url)
        warm_up(client, workload, max_new_tokens=v.max_new_tokens, temperature=v.temperature)
        measured = measure(client, workload, requests=v.requests, max_new_tokens=v.max_new_tokens, temperature=v.temperature,
                           on_request=lambda i, g: on_progress(f"baseline request {i + 1}/{v.requests}"),
                           cancelled=lambda: cancel.cancelled)
        cancel.check()
        return BaselineResult(deployed.release, measured, workload.sha256)
    finally:
        if deployed is not None:
            rel.stop(deployed.release)
        if current and was_running:  # give the host back as it was
            back = rel.Release(transport, root, name, current)
            rel.start(back, env=secrets_env)
            if not cancel.cancelled:
                on_progress(f"restarting {current}")
                wait_ready(back, rel.port(back) or profile.engine.port, report.inputs.engine.startup_stages(),
                           budget_s=budget_s, cancel=cancel)
