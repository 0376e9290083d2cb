"""Static checks against a host's facts: what `check` cannot know
without the host. Pure: facts in, findings out."""

from __future__ import annotations

from collections.abc import Mapping
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
            findings.append(
                Finding(
                    "host-gpu-count",
                    Severity.ERROR,
                    f"{host} has {len(gpus)} GPU(s); the profile needs {needed}",
                    "deploy to a host with enough GPUs, or lower parallel.tp / hardware.gpus_per_node",
                    {"host": host, "found": len(gpus), "needed": needed},
                    "hardware.gpus_per_node",
                )
            )
        names = sorted({str(g.get("name")) for g in gpus})
        if gpus and not any(_same_gpu(gpu.name, name) for name in names):
            findings.append(
                Finding(
                    "host-gpu-model",
                    Severity.ERROR,
                    f"{host} has {', '.join(names)}, not {gpu.name}",
                    f"set hardware.gpu to the host's GPU, or deploy to a host with {gpu.name}",
                    {"host": host, "found": names, "expected": gpu.name},
                    "hardware.gpu",
                )
            )
    if facts.get("python") is None:
        findings.append(
            Finding(
                "host-python",
                Severity.ERROR,
                f"{host}: {profile.engine.python} does not run",
                "set engine.python to the interpreter the engine is installed in",
                {"host": host, "python": profile.engine.python},
                "engine.python",
            )
        )
    elif engine.pins_installed_version() and facts.get("engine_version") != profile.engine.version:
        found = facts.get("engine_version") or "not installed"
        findings.append(
            Finding(
                "host-engine-version",
                Severity.ERROR,
                f"{host}: {engine.distribution()} is {found}, the profile pins {profile.engine.version}",
                f"install {engine.distribution()}=={profile.engine.version} in {profile.engine.python}, "
                "or set engine.version to what is installed (and re-check the capture convention)",
                {"host": host, "found": found, "expected": profile.engine.version},
                "engine.version",
            )
        )
    return findings


def check_engines(
    builds: Mapping[str, tuple[str | None, str | None]], disagreement: str | None, *, probes: int, seconds: float
) -> list[Finding]:
    """The hosts' own engines as judge: `builds` maps each host to (its build, or None; why not).
    Hosts whose engines answer differently are an error before anything is stopped."""
    findings: list[Finding] = []
    asked = sorted(h for h, (build, _) in builds.items() if build is not None)
    cannot = {h: why for h, (build, why) in builds.items() if build is None}
    if cannot:
        first = sorted(cannot)[0]
        findings.append(
            Finding(
                "host-engine-probe",
                Severity.WARNING,
                f"the engine could not be asked on {', '.join(sorted(cannot))}: {cannot[first]}",
                "install the engine in engine.python on those hosts; until then the built-in table judges there",
                {"hosts": sorted(cannot)},
                "engine.python",
            )
        )
    if disagreement is not None:
        findings.append(
            Finding(
                "host-engines-disagree",
                Severity.ERROR,
                f"the hosts' engines capture or parse differently: {disagreement}",
                "install one sglang build on every host (a patched file counts), or deploy to the hosts of "
                "one build at a time with --hosts",
                {"hosts": asked},
                "engine.version",
            )
        )
    elif asked:
        builds_seen = len({builds[h][0] for h in asked})
        findings.append(
            Finding(
                "host-engines",
                Severity.INFO,
                f"the engine was asked on {len(asked)} host(s): {builds_seen} build(s), {probes} probe run(s) "
                f"({'the rest from the cache' if probes < builds_seen else 'none cached'}), {seconds:.1f} s",
                "nothing to do: the checks above use the hosts' own answers",
                {"hosts": asked},
            )
        )
    return findings


def _same_gpu(catalog_name: str, reported: str) -> bool:
    """nvidia-smi names vary in suffixes ("NVIDIA H200" vs "NVIDIA H200 NVL"): compare the stem."""
    return reported.lower().startswith(catalog_name.lower()) or catalog_name.lower().startswith(reported.lower())
