"""The host-free flows: gather a profile's inputs, check them, plan the launch (validate/check/render)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from specctl.engines import Convention, get_engine
from specctl.errors import CheckpointError, EngineError
from specctl.facts.checkpoint import CheckpointMeta, read_checkpoint
from specctl.plan.checks import run_checks
from specctl.plan.findings import Finding
from specctl.plan.inputs import Inputs
from specctl.plan.plan import Plan, build_plan
from specctl.plan.resolve import CaptureResolution, resolve_capture
from specctl.profile import load_manifest, load_profile


@dataclass(frozen=True)
class CheckReport:
    inputs: Inputs
    resolution: CaptureResolution | None
    findings: list[Finding]


def gather(profile_path: Path | str, *, offline: bool = False, assume_convention: str | None = None) -> Inputs:
    """Read everything a profile refers to. Document errors raise; unreadable checkpoints become findings."""
    loaded = load_profile(profile_path)
    profile = loaded.model
    engine = get_engine(profile.engine.name)
    manifest = manifest_path = None
    if profile.drafter is not None:
        manifest_path = str(loaded.file_of("drafter", "manifest").parent / profile.drafter.manifest)
        manifest = load_manifest(manifest_path).model
    target, target_error = _read(profile.target.model, profile.target.revision, offline)
    drafter = drafter_error = None
    if profile.drafter is not None:
        drafter, drafter_error = _read(profile.drafter.model, profile.drafter.revision, offline)
    inputs = Inputs(profile, str(profile_path), loaded.sha256, engine, manifest, manifest_path, target, target_error, drafter, drafter_error)
    convention, convention_error = _convention(inputs, assume_convention)
    return dataclasses.replace(inputs, convention=convention, convention_error=convention_error,
                               workload_dir=str(loaded.file_of("verify", "workload").parent))


def _read(model: str, revision: str | None, offline: bool) -> tuple[CheckpointMeta | None, CheckpointError | None]:
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


def check(profile_path: Path | str, *, offline: bool = False, assume_convention: str | None = None,
          engine_python: str | None = None) -> CheckReport:
    """Static checks; with `engine_python` the installed engine is asked."""
    inputs = gather(profile_path, offline=offline, assume_convention=assume_convention)
    if engine_python:
        from specctl.flows.probe import with_probe

        inputs = with_probe(inputs, engine_python)
    resolution = resolve_capture(inputs)
    return CheckReport(inputs, resolution, run_checks(inputs, resolution))


def plan(report: CheckReport, *, baseline: bool = False, node0_address: str | None = None) -> Plan:
    return build_plan(report.inputs, report.resolution, baseline=baseline, node0_address=node0_address)
