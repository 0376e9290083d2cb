"""The host-free flows: gather a profile's inputs, check them, plan the launch (validate/check/render).

Checkpoint facts are read on this machine, except a model given as a host path that this machine
cannot see: with `on_hosts` (check's profile hosts or `--on HOST`, deploy's hosts) it is read on a
host instead, and the report says where every checkpoint's facts came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specctl.engines import Convention, get_engine
from specctl.errors import CheckpointError, EngineError, HostError, InputError
from specctl.facts.checkpoint import CheckpointMeta, read_checkpoint
from specctl.plan.checks import run_checks
from specctl.plan.findings import Finding, Severity
from specctl.plan.inputs import Inputs
from specctl.plan.plan import Plan, build_plan
from specctl.plan.resolve import CaptureResolution, resolve_capture
from specctl.profile import Profile, load_manifest, load_profile
from specctl.profile.profile import is_local_path

if TYPE_CHECKING:
    from specctl.facts.remote import ReadOnHosts

THIS_MACHINE = "this machine"
HUB = "the Hugging Face Hub (or this machine's cache of it)"


@dataclass(frozen=True)
class FactsSource:
    """Where one checkpoint's facts were read: this machine, the Hub, or hosts over SSH."""

    role: str  # target or drafter
    model: str
    where: str
    hosts: tuple[str, ...] = ()  # the hosts that answered, when read on hosts

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "where": self.where, "hosts": list(self.hosts)}


@dataclass(frozen=True)
class CheckReport:
    inputs: Inputs
    resolution: CaptureResolution | None
    findings: list[Finding]
    facts: Mapping[str, FactsSource] = field(default_factory=dict)  # role -> where its checkpoint facts came from


def gather(
    profile_path: Path | str,
    *,
    offline: bool = False,
    assume_convention: str | None = None,
    on_hosts: ReadOnHosts | None = None,
) -> Inputs:
    """Read everything a profile refers to. Document errors raise; unreadable checkpoints become findings."""
    return _gather(profile_path, offline=offline, assume_convention=assume_convention, on_hosts=on_hosts)[0]


def _gather(
    profile_path: Path | str, *, offline: bool, assume_convention: str | None, on_hosts: ReadOnHosts | None
) -> tuple[Inputs, dict[str, FactsSource]]:
    loaded = load_profile(profile_path)
    profile = loaded.model
    engine = get_engine(profile.engine.name)
    manifest = manifest_path = None
    if profile.drafter is not None:
        manifest_path = str(loaded.file_of("drafter", "manifest").parent / profile.drafter.manifest)
        manifest = load_manifest(manifest_path).model
    models = {"target": (profile.target.model, profile.target.revision)}
    if profile.drafter is not None:
        models["drafter"] = (profile.drafter.model, profile.drafter.revision)
    facts, sources = _read_checkpoints(profile, models, offline, on_hosts)
    target, target_error = facts["target"]
    drafter, drafter_error = facts.get("drafter", (None, None))
    inputs = Inputs(
        profile,
        str(profile_path),
        loaded.sha256,
        engine,
        manifest,
        manifest_path,
        target,
        target_error,
        drafter,
        drafter_error,
    )
    convention, convention_error = _convention(inputs, assume_convention)
    return dataclasses.replace(
        inputs,
        convention=convention,
        convention_error=convention_error,
        workload_dir=str(loaded.file_of("verify", "workload").parent),
    ), sources


Read = tuple[CheckpointMeta | None, CheckpointError | None]


def _read_checkpoints(
    profile: Profile, models: Mapping[str, tuple[str, str | None]], offline: bool, on_hosts: ReadOnHosts | None
) -> tuple[dict[str, Read], dict[str, FactsSource]]:
    """Each role's checkpoint facts and where they came from; the host paths this machine cannot
    see are read on the hosts, all in one round trip."""
    facts: dict[str, Read] = {}
    sources: dict[str, FactsSource] = {}
    remote = {role: m for role, m in models.items() if on_hosts is not None and on_hosts.wanted(m[0])}
    for role, (model, revision) in models.items():
        if role not in remote:
            facts[role] = _read(model, revision, offline)
            sources[role] = FactsSource(role, model, THIS_MACHINE if is_local_path(model) else HUB)
    if not remote:
        return facts, sources
    assert on_hosts is not None
    try:
        read = on_hosts.read(profile, {model: revision for model, revision in remote.values()})
    except (HostError, InputError) as exc:
        if on_hosts.forced or on_hosts.every or isinstance(exc, CheckpointError):
            raise  # asked for by name, or a deploy's hosts that disagree: not a finding to read past
        read, note = None, f"; not read on the profile's host either: {exc.message}"
    else:
        note = ""
    for role, (model, revision) in remote.items():
        if read is None:  # no host to read on (or it did not answer): this machine's own answer
            meta, error = _read(model, revision, offline)
            if error is not None:
                error = CheckpointError(
                    error.message + note,
                    source=error.source,
                    revision=error.revision,
                    fix="fix the path, or read it on a host that has it: specctl check --on HOST (with --inventory)",
                )
            facts[role] = meta, error
            sources[role] = FactsSource(role, model, THIS_MACHINE)
            continue
        result = read.results[model]
        facts[role] = (None, result) if isinstance(result, CheckpointError) else (result, None)
        sources[role] = FactsSource(role, model, read.where, read.hosts)
    return facts, sources


def _read(model: str, revision: str | None, offline: bool) -> Read:
    try:
        return read_checkpoint(model, revision, offline=offline), None
    except CheckpointError as exc:
        return None, exc


def _convention(inputs: Inputs, assume: str | None) -> tuple[Convention | None, EngineError | None]:
    """The engine's built-in convention for the profile's engine version, or the one the user assumes."""
    arch = inputs.architecture
    if inputs.profile.drafter is None or arch is None:
        return None, None
    version = inputs.profile.engine.version
    if assume:
        version, _, assumed_arch = assume.partition(":")
        arch = assumed_arch or arch
    try:
        return inputs.engine.convention(version, arch), None
    except EngineError as exc:
        return None, exc


def check(
    profile_path: Path | str,
    *,
    offline: bool = False,
    assume_convention: str | None = None,
    engine_python: str | None = None,
    on_hosts: ReadOnHosts | None = None,
) -> CheckReport:
    """Static checks; with `engine_python` the installed engine is asked; with `on_hosts`, host
    paths this machine cannot see are read on the hosts (a `facts-source` finding says which)."""
    inputs, sources = _gather(profile_path, offline=offline, assume_convention=assume_convention, on_hosts=on_hosts)
    if engine_python:
        from specctl.flows.probe import with_probe

        inputs = with_probe(inputs, engine_python)
    resolution = resolve_capture(inputs)
    findings = run_checks(inputs, resolution)
    on_a_host = [s for s in sources.values() if s.hosts]
    if on_a_host:
        findings.append(facts_finding(sources))
    return CheckReport(inputs, resolution, findings, sources)


def rechecked(report: CheckReport, inputs: Inputs, more: list[Finding]) -> CheckReport:
    """The checks again on other inputs (a host engine's answers), keeping where the facts came from."""
    resolution = resolve_capture(inputs)
    kept = [f for f in report.findings if f.code == "facts-source"]
    return CheckReport(inputs, resolution, run_checks(inputs, resolution) + kept + more, report.facts)


def facts_finding(sources: Mapping[str, FactsSource]) -> Finding:
    """An info finding saying where each checkpoint's facts were read, for the checks that use them."""
    by_where: dict[str, list[str]] = {}
    for source in sources.values():
        by_where.setdefault(source.where, []).append(source.role)
    said = "; ".join(f"{' and '.join(roles)} read on {where}" for where, roles in by_where.items())
    return Finding(
        "facts-source",
        Severity.INFO,
        f"checkpoint facts: {said}",
        "nothing to do: every check above uses these facts (--on HOST reads them on another host)",
        {role: s.to_dict() for role, s in sources.items()},
    )


def plan(report: CheckReport, *, baseline: bool = False, node0_address: str | None = None, staged: bool = True) -> Plan:
    return build_plan(report.inputs, report.resolution, baseline=baseline, node0_address=node0_address, staged=staged)
