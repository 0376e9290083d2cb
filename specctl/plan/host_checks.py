"""Static checks against a host's facts: what `check` cannot know
without the host. Pure: facts in, findings out."""

from __future__ import annotations

from typing import Any

from specctl.engines.base import Engine
from specctl.gpus import GPUS
from specctl.plan.findings import Finding, Severity
from specctl.profile.profile import Profile


def check_host(profile: Profile, facts: dict[str, Any], engine: Engine) -> list[Finding]:
    """GPU model and count, Python, and the installed engine version against the profile."""
    host = facts.get("host", "?")
    findings: list[Finding] = []
    gpu = GPUS.get(profile.hardware.gpu)
    gpus = facts.get("gpus") or ()
    if gpu is not None and gpu.architecture != "cpu":
        needed = profile.hardware.gpus_per_node
        if len(gpus) < needed:
            findings.append(Finding("host-gpu-count", Severity.ERROR, f"{host} has {len(gpus)} GPU(s); the profile needs {needed}",
                                    "deploy to a host with enough GPUs, or lower parallel.tp / hardware.gpus_per_node",
                                    {"host": host, "found": len(gpus), "needed": needed}, "hardware.gpus_per_node"))
        names = sorted({str(g.get("name")) for g in gpus})
        if gpus and not any(_same_gpu(gpu.name, name) for name in names):
            findings.append(Finding("host-gpu-model", Severity.ERROR, f"{host} has {', '.join(names)}, not {gpu.name}",
                                    f"set hardware.gpu to the host's GPU, or deploy to a host with {gpu.name}",
                                    {"host": host, "found": names, "expected": gpu.name}, "hardware.gpu"))
    if facts.get("python") is None:
        findings.append(Finding("host-python", Severity.ERROR, f"{host}: {profile.engine.python} does not run",
                                "set engine.python to the interpreter the engine is installed in",
                                {"host": host, "python": profile.engine.python}, "engine.python"))
    elif engine.pins_installed_version() and facts.get("engine_version") != profile.engine.version:
        found = facts.get("engine_version") or "not installed"
        findings.append(Finding("host-engine-version", Severity.ERROR,
                                f"{host}: {engine.distribution()} is {found}, the profile pins {profile.engine.version}",
                                f"install {engine.distribution()}=={profile.engine.version} in {profile.engine.python}, "
                                "or set engine.version to what is installed (and re-check the capture convention)",
                                {"host": host, "found": found, "expected": profile.engine.version}, "engine.version"))
    return findings


def _same_gpu(catalog_name: str, reported: str) -> bool:
    """nvidia-smi names vary in suffixes ("NVIDIA H200" vs "NVIDIA H200 NVL"): compare the stem."""
    return reported.lower().startswith(catalog_name.lower()) or catalog_name.lower().startswith(reported.lower())
