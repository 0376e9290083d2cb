"""Verify one running release (DESIGN section 7): static checks against the host's facts, drift of
the live server against the release's plan, and the live measurement with its gates.

Verify always works from what the release directory holds (its resolved profile, plan and pinned
workload), so a rollback verifies the exact release it restarts, not today's working tree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specctl.cancel import NEVER, CancelToken
from specctl.engines import get_engine
from specctl.errors import HostError
from specctl.facts import host as host_facts
from specctl.plan.findings import Finding, Severity
from specctl.plan.host_checks import check_host
from specctl.profile.profile import Profile
from specctl.release import release as rel
from specctl.verdict import gates as gate
from specctl.verdict import stats
from specctl.verdict.client import EngineClient, EngineHTTPError
from specctl.verdict.measure import Measurement, measure, warm_up
from specctl.verdict.workload import Workload, parse_workload


@dataclass(frozen=True)
class ReleaseDocs:
    """What verify reads back from a release directory."""

    profile: Profile
    plan: dict[str, Any]
    summary: dict[str, Any]
    workload: Workload


def read_release(release: rel.Release) -> ReleaseDocs:
    t = release.transport
    raw = {name: t.read(release.path(name)) for name in ("profile.json", "plan.json", rel.SUMMARY_FILE, rel.WORKLOAD_FILE)}
    missing = [name for name, data in raw.items() if data is None]
    if missing:
        raise HostError(f"{t.name}: release {release.run_id} lacks {', '.join(missing)}", host=t.name,
                        fix="it predates verify or was damaged; deploy the profile again")
    summary = json.loads(raw[rel.SUMMARY_FILE] or b"{}")
    return ReleaseDocs(Profile.model_validate(json.loads(raw["profile.json"] or b"{}")), json.loads(raw["plan.json"] or b"{}"),
                       summary, parse_workload(summary.get("workload", "workload"), raw[rel.WORKLOAD_FILE] or b""))


def baseline_key(profile: Profile, workload_sha256: str) -> str:
    """What makes a baseline comparable: target and revision, TP, GPU type, engine and version, workload."""
    key = {"target": profile.target.model, "revision": profile.target.revision, "tp": profile.parallel.tp,
           "nnodes": profile.parallel.nnodes, "gpu": profile.hardware.gpu, "engine": profile.engine.name,
           "engine_version": profile.engine.version, "workload_sha256": workload_sha256,
           "max_new_tokens": profile.verify.max_new_tokens, "temperature": profile.verify.temperature}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def gate_spec(profile: Profile) -> gate.GateSpec:
    v = profile.verify
    return gate.GateSpec(v.min_accept_length, v.min_speedup, v.max_ttft_s)


@dataclass
class HostVerdict:
    """Everything verify found on one host; `passed` only when nothing failed."""

    host: str
    release: str
    profile: str
    version: int
    findings: list[Finding] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    gates: list[gate.GateResult] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    stopped_early: bool = False
    baseline_run: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    measurement: Measurement | None = None

    @property
    def passed(self) -> bool:
        return (not any(f.severity is Severity.ERROR for f in self.findings) and not self.drift
                and all(g.passed for g in self.gates))

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "release": self.release, "profile": self.profile, "version": self.version,
                "passed": self.passed, "findings": [f.to_dict() for f in self.findings], "drift": self.drift,
                "gates": [g.to_dict() for g in self.gates], "summary": self.summary, "stopped_early": self.stopped_early,
                "baseline_run": self.baseline_run}


def drift(expected: dict[str, str], reported: dict[str, str | None]) -> list[dict[str, Any]]:
    """Fields the live server reports differently from the plan (numbers compare by value)."""
    out = []
    for key, want in sorted(expected.items()):
        got = reported.get(key)
        if got != want and not _same_number(got, want):
            out.append({"field": key, "expected": want, "reported": got})
    return out


def _same_number(a: str | None, b: str | None) -> bool:
    try:
        return a is not None and b is not None and float(a) == float(b)
    except ValueError:
        return False


def summarize(m: Measurement, baseline: Measurement | None, *, sequential: bool, planned_n: int) -> dict[str, Any]:
    """The measured values people read first, each with its interval where it has one."""
    def show(interval: stats.Interval | None) -> dict[str, Any] | None:
        return interval.to_dict() if interval else None

    return {
        "requests": len(m.generations), "completion_tokens": m.completion_tokens, "wall_s": round(m.wall_s, 3),
        "output_tokens_per_s": round(m.output_tokens_per_s, 2),
        "accept_length": show(gate.accept_length(m, sequential=sequential, planned_n=planned_n)),
        "acceptance_rate": show(gate.acceptance_rate(m, sequential=sequential, planned_n=planned_n)),
        "decode_tokens_per_s": show(gate.throughput(m, sequential=sequential, planned_n=planned_n)),
        "ttft_s": show(gate.ttft(m, sequential=sequential, planned_n=planned_n)),
        "speedup": show(gate.speedup(m, baseline, sequential=sequential, planned_n=planned_n)) if baseline else None,
    }


def verify_release(release: rel.Release, *, baseline: tuple[str, Measurement] | None = None, cancel: CancelToken = NEVER,
                   on_progress: Callable[[str], None] = lambda stage: None) -> HostVerdict:
    """Verify the running server of `release` on its host."""
    t = release.transport
    docs = read_release(release)
    profile = docs.profile
    engine = get_engine(profile.engine.name)
    verdict = HostVerdict(t.name, release.run_id, profile.metadata.name, profile.metadata.version,
                          baseline_run=baseline[0] if baseline else None)
    on_progress("host facts")
    facts = host_facts.gather(t, python=profile.engine.python, root=release.root, port=profile.engine.port,
                              distribution=engine.distribution())
    verdict.facts = facts.to_dict()
    verdict.findings = check_host(profile, verdict.facts, engine)
    client = EngineClient(f"http://{t.address}:{profile.engine.port}", timeout_s=600)
    on_progress("drift")
    try:
        info = client.server_info()
    except EngineHTTPError as exc:
        verdict.drift = [{"field": "server", "expected": "answering", "reported": str(exc)}]
        return verdict
    expected = engine.expected_server_args(docs.plan["nodes"][0]["argv"], release.dir, profile.engine.version)
    verdict.drift = drift(expected, engine.reported_server_args(info))
    v = profile.verify
    spec = gate_spec(profile)
    base = baseline[1] if baseline else None
    warm_up(client, docs.workload, max_new_tokens=v.max_new_tokens, temperature=v.temperature)

    def decided(m: Measurement) -> bool:
        if len(m.generations) < stats.MIN_SAMPLES:
            return False
        gates = gate.evaluate(spec, m, base, sequential=True, planned_n=v.requests)
        return bool(gates) and gate.all_decided(gates)

    measured = measure(client, docs.workload, requests=v.requests, max_new_tokens=v.max_new_tokens, temperature=v.temperature,
                       on_request=lambda i, g: on_progress(f"request {i + 1}/{v.requests}"), enough=decided,
                       cancelled=lambda: cancel.cancelled)
    cancel.check()
    verdict.stopped_early = len(measured.generations) < v.requests
    verdict.measurement = measured
    verdict.gates = gate.evaluate(spec, measured, base, sequential=verdict.stopped_early, planned_n=v.requests)
    verdict.summary = summarize(measured, base, sequential=verdict.stopped_early, planned_n=v.requests)
    return verdict


def keep_on_host(release: rel.Release, run: dict[str, Any], verdict: HostVerdict | None = None) -> None:
    """The release directory's own copy: the run record, and the newest verdict of this release."""
    t = release.transport
    t.run(["mkdir", "-p", release.path(rel.RUNS_DIR)])
    t.put(release.path(f"{rel.RUNS_DIR}/{run['id']}.json"), (json.dumps(run, indent=2, sort_keys=True, default=str) + "\n").encode())
    if verdict is not None:
        t.put(release.path(rel.VERDICT_FILE), (json.dumps({"passed": verdict.passed, "run": run["id"], "at": run.get("finished_at")},
                                                          sort_keys=True) + "\n").encode())
