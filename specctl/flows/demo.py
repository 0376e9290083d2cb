"""`specctl demo`: the embedded default, end to end on this machine.

Writes two versions of a profile for the shipped tiny models (v1 serves the drafter on the layers it
was trained on; v2 "fixes" its ids to a same-width wrong list), checks them, deploys them to the
`local` host through the same release code a remote deploy uses, measures acceptance and
throughput against the non-speculative baseline, and stops everything it started.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specctl.flows import static
from specctl.flows.change import Change
from specctl.flows.release_files import release_contents
from specctl.flows.session import Context
from specctl.flows.stages import Walk
from specctl.hosts.inventory import HostSpec
from specctl.hosts.local import LOCAL
from specctl.ledger.ledger import Ledger
from specctl.plan.findings import Finding
from specctl.release import release as rel
from specctl.verdict.client import EngineClient
from specctl.verdict.measure import Measurement, measure
from specctl.verdict.workload import load_workload

MODELS = Path(__file__).resolve().parents[1] / "engines" / "reference" / "models"
TARGET, DRAFTER = "tiny-llama", "tiny-llama-eagle3"
WRONG_IDS = [-1, 1, 3]  # same width: the embedding and layers 1 and 3 instead of 1, 3 and 4


@dataclass
class DemoResult:
    """What the demo measured, as data (for --json and the summary table)."""

    workdir: str
    checks: dict[str, list[Finding]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"workdir": self.workdir, "checks": {k: [f.to_dict() for f in v] for k, v in self.checks.items()}, "runs": self.runs}


def write_inputs(workdir: Path, port: int) -> tuple[Path, Path]:
    """The demo's manifest and two profile versions, with absolute paths to the shipped models."""
    manifest_src = yaml.safe_load((MODELS / f"{DRAFTER}.manifest.yaml").read_text())
    target, drafter = str(MODELS / TARGET), str(MODELS / DRAFTER)
    manifest_src["drafter"] = {"model": drafter}
    manifest_src["target"] = {**manifest_src["target"], "model": target}
    manifest_src["target"].pop("revision", None)
    manifest_src["target"].pop("allow_unpinned", None)
    (workdir / "manifests").mkdir(parents=True, exist_ok=True)
    (workdir / "profiles").mkdir(parents=True, exist_ok=True)
    (workdir / "manifests" / "tiny-llama-eagle3.yaml").write_text(yaml.safe_dump(manifest_src, sort_keys=False))
    v1: dict[str, Any] = {
        "apiVersion": "specctl/v1", "kind": "Profile",
        "metadata": {"name": "tiny-llama-demo", "version": 1, "description": "the shipped tiny models on the reference engine"},
        "target": {"model": target}, "drafter": {"model": drafter, "manifest": "../manifests/tiny-llama-eagle3.yaml"},
        "speculative": {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
        "parallel": {"tp": 1}, "hardware": {"gpu": "cpu", "gpus_per_node": 1},
        "engine": {"name": "reference", "version": "0.5.23", "python": _python(), "host": "127.0.0.1", "port": port},
        "verify": {"workload": "chat-small", "requests": 8, "max_new_tokens": 64},
        "hosts": ["local"],
    }
    v2 = {"apiVersion": "specctl/v1", "kind": "Profile", "extends": "tiny-llama-v1.yaml",
          "metadata": {"name": "tiny-llama-demo", "version": 2, "description": "ids 'fixed' to a same-width wrong list"},
          "drafter": {"layer_ids": WRONG_IDS}}
    (workdir / "profiles" / "tiny-llama-v1.yaml").write_text(yaml.safe_dump(v1, sort_keys=False))
    (workdir / "profiles" / "tiny-llama-v2.yaml").write_text(yaml.safe_dump(v2, sort_keys=False))
    return workdir / "profiles" / "tiny-llama-v1.yaml", workdir / "profiles" / "tiny-llama-v2.yaml"


def _python() -> str:
    import sys

    return sys.executable


def summary(m: Measurement) -> dict[str, Any]:
    return {"requests": len(m.generations), "completion_tokens": m.completion_tokens, "wall_s": round(m.wall_s, 3),
            "output_tokens_per_s": round(m.output_tokens_per_s, 1),
            "mean_accept_length": round(m.mean_accept_length, 3) if m.mean_accept_length else None,
            "acceptance_rate": round(m.acceptance_rate, 3) if m.acceptance_rate is not None else None}


def run_demo(workdir: Path, *, port: int = 31000, requests: int = 8, max_new_tokens: int = 64,
             say: Callable[[str], None] = lambda line: None, progress: Callable[[str], None] = lambda stage: None) -> DemoResult:
    workdir.mkdir(parents=True, exist_ok=True)
    v1, v2 = write_inputs(workdir, port)
    result = DemoResult(str(workdir))
    ctx = Context(Ledger(workdir / "ledger.db"), "specctl demo", budget_s=300, on_progress=lambda host, stage: progress(stage))
    session = ctx.session(HostSpec(LOCAL, str(workdir / "hosts" / "local"), None, None, {}), "tiny-llama-demo")
    workload = load_workload("chat-small")
    started: list[rel.Release] = []

    def run(label: str, report: static.CheckReport, baseline: bool = False) -> None:
        say(f"deploy {label} to local")
        p, engine = report.inputs.profile, report.inputs.engine
        the_plan = static.plan(report, baseline=baseline)
        change = Change(session, session.release(rel.new_run_id(), p.metadata.name + ("-baseline" if baseline else "")),
                        port=p.engine.port, python=p.engine.python, distribution=engine.distribution(),
                        startup_stages=engine.startup_stages(), budget_s=ctx.budget_s,
                        files=release_contents(report, the_plan, the_plan.nodes[0]),
                        clear=(p.metadata.name, p.metadata.name + "-baseline"))
        Walk(lambda stage, event, detail: None).run(change.stages())
        started.append(change.release)
        measured = measure(EngineClient(f"http://127.0.0.1:{p.engine.port}"), workload, requests=requests, max_new_tokens=max_new_tokens)
        result.runs[label] = {**summary(measured), "startup_s": round(change.startup_s or 0.0, 2), "release": change.release.dir}
        rel.stop(change.release)

    try:
        report1 = static.check(v1)
        result.checks["v1"] = report1.findings
        say("check v1: " + _verdict(report1.findings))
        run("v1: trained layers", report1)
        run("baseline: no speculation", report1, baseline=True)
        report2 = static.check(v2)
        result.checks["v2"] = report2.findings
        say("check v2: " + _verdict(report2.findings))
        run("v2: wrong layers", report2)
    finally:
        for release in started:
            rel.stop(release)
        ctx.ledger.close()
    base = result.runs.get("baseline: no speculation", {}).get("output_tokens_per_s")
    for run_result in result.runs.values():
        run_result["speedup"] = round(run_result["output_tokens_per_s"] / base, 2) if base else None
    return result


def _verdict(findings: list[Finding]) -> str:
    errors = [f for f in findings if f.severity.value == "error"]
    return "ok" if not errors else "FAIL: " + ", ".join(sorted({f.code for f in errors}))
