"""The host's engine as judge: the capture probe and the flag parse run by each host's own engine
interpreter over SSH, because the build installed on a host is the truth for that host (a patched
or different build on one host is exactly the drift nobody sees).

One probe per distinct build: each host says which build it has (its engine version and a digest of
the files the probe's answers come from: one round trip per host, a fraction of a second), the
hosts of one build share one probe run, and the answer is kept in this machine's cache under the
build and the question, so a fleet that has not changed is not probed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.engines import ProbeReport
from specctl.errors import HostError
from specctl.flows.probe import PROBE_TIMEOUT_S, answer_of, probe_question, with_answer
from specctl.flows.static import CheckReport, rechecked
from specctl.hosts.group import parallel
from specctl.hosts.transport import Transport
from specctl.plan.host_checks import check_engines
from specctl.plan.inputs import Inputs


@dataclass(frozen=True)
class Build:
    """One host's engine build, or why it has none."""

    version: str | None
    digest: str | None
    error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.version}-{self.digest}"

    def text(self) -> str:
        return self.error or f"sglang {self.version} (build {self.digest})"


@dataclass(frozen=True)
class FleetProbe:
    """Every host's build, the probe answer of each build, and the inputs it gives each host."""

    builds: dict[str, Build]
    answers: dict[str, dict[str, Any]]  # build key -> probe answer
    inputs: dict[str, Inputs]  # host -> inputs with that host's engine as judge
    seconds: float
    probed: int  # probe runs made (not from the cache)

    def report(self, host: str) -> ProbeReport | None:
        return self.inputs[host].probe if host in self.inputs else None

    def disagreement(self) -> str | None:
        """Hosts whose engines answer the same question differently (captures or parse), named."""
        by_answer: dict[str, list[str]] = {}
        for host, build in self.builds.items():
            if build.error is None and not self.answers[build.key].get("error"):  # a failed probe is no answer
                by_answer.setdefault(_verdict(self.answers[build.key]), []).append(host)
        if len(by_answer) < 2:
            return None
        groups = sorted(by_answer.values(), key=lambda hosts: (-len(hosts), hosts))
        return " vs ".join(f"{', '.join(hosts)} ({self.builds[hosts[0]].text()})" for hosts in groups)


def _verdict(answer: Mapping[str, Any]) -> str:
    """What of an answer must agree across hosts: captures per ids, and each argv's parse verdict."""
    captures = [
        {
            "architecture": c.get("architecture"),
            "supported": c.get("supported"),
            "results": [(r.get("ids"), r.get("requested"), bool(r.get("error"))) for r in c.get("results") or []],
        }
        for c in answer.get("captures") or []
    ]
    parse = [bool(p.get("ok")) for p in answer.get("parse") or []]
    return json.dumps({"captures": captures, "parse": parse}, sort_keys=True)


def probe_fleet(
    inputs: Inputs, transports: Mapping[str, Transport], python: str, *, cache: Path | None = None
) -> FleetProbe:
    """Ask each host for its build, probe one host per build not in the cache, and give every host
    the inputs its own engine's answers make."""
    start = time.perf_counter()
    engine = inputs.engine
    script = engine.build_script()
    assert script is not None, "ask probes_on_hosts(engine) first"
    build_source = script.read_text(encoding="utf-8")
    builds = parallel(transports, lambda t: _build(t, python, build_source))
    question, architecture = probe_question(inputs)
    probe_source = engine.probe_script().read_text(encoding="utf-8")
    # the answer depends on the build, the question and the probe itself (a newer specctl asks anew)
    asked = hashlib.sha256(
        json.dumps(question, sort_keys=True).encode() + probe_source.encode() + build_source.encode()
    ).hexdigest()[:16]
    cache = cache or probe_cache()
    answers: dict[str, dict[str, Any]] = {}
    first_host: dict[str, str] = {}
    for host, build in builds.items():
        if build.error is None:
            first_host.setdefault(build.key, host)
    missing = {}
    for key, host in first_host.items():
        kept = cache / f"{key}-{asked}.json"
        try:
            answers[key] = json.loads(kept.read_text())
        except (OSError, ValueError):
            missing[key] = host
    fresh = parallel(
        {key: transports[host] for key, host in missing.items()}, lambda t: _probe(t, python, probe_source, question)
    )
    for key, answer in fresh.items():
        answers[key] = answer
        if not answer.get("error"):
            _keep(cache / f"{key}-{asked}.json", answer)
    per_host = {
        host: with_answer(inputs, python, architecture, answers[build.key])
        for host, build in builds.items()
        if build.error is None
    }
    return FleetProbe(builds, answers, per_host, time.perf_counter() - start, len(fresh))


def _build(t: Transport, python: str, source: str) -> Build:
    try:
        done = t.run([python, "-c", source], check=False, timeout_s=60, retry=True)
    except HostError as exc:  # an unreachable host is not asked; the deploy's own steps decide about it
        return Build(None, None, f"{t.name} cannot be reached: {exc.message}")
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-2:])
        return Build(None, None, f"{python} on {t.name} cannot tell its engine build (exit {done.rc}: {tail})")
    if answer.get("error"):
        return Build(None, None, str(answer["error"]))
    return Build(str(answer["version"]), str(answer["digest"]))


def _probe(t: Transport, python: str, source: str, question: Mapping[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    done = t.run([python, "-c", source], stdin=json.dumps(question).encode(), check=False, timeout_s=PROBE_TIMEOUT_S)
    return answer_of(done.rc, done.stdout, done.stderr, time.perf_counter() - start, timeout_s=PROBE_TIMEOUT_S)


def probe_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specctl" / "probes"


def _keep(path: Path, answer: Mapping[str, Any]) -> None:
    """Written whole or not at all: a reader never sees half an answer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp.{os.getpid()}")
    tmp.write_text(json.dumps(answer, sort_keys=True))
    os.replace(tmp, path)


def probes_on_hosts(inputs: Inputs) -> bool:
    """Whether the profile's engine can be asked on its hosts (the reference engine cannot)."""
    return inputs.engine.build_script() is not None


def judged(
    report: CheckReport, transports: Mapping[str, Transport], python: str, *, cache: Path | None = None
) -> CheckReport:
    """The report with the hosts' engines as judge: their answers replace the table (hosts of one
    build agree, or the report says which disagree), and a finding says what was asked."""
    fleet = probe_fleet(report.inputs, transports, python, cache=cache)
    failed = {
        h: str(fleet.answers[b.key]["error"])
        for h, b in fleet.builds.items()
        if b.error is None and fleet.answers[b.key].get("error")
    }
    findings = check_engines(
        {
            h: (None, failed[h]) if h in failed else (b.key if b.error is None else None, b.error)
            for h, b in fleet.builds.items()
        },
        fleet.disagreement(),
        probes=fleet.probed,
        seconds=fleet.seconds,
    )
    answered = [h for h in fleet.inputs if h not in failed]
    inputs = fleet.inputs[answered[0]] if answered else report.inputs  # hosts that answered agree, or it is an error
    return rechecked(report, inputs, findings)
