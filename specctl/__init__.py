"""specctl: declarative deployment and reproducibility for EAGLE-3 speculative decoding on SGLang.

The public names are loaded lazily so that `import specctl` stays cheap for the launch probe and
the reference engine; the flow is profile -> plan -> release -> verdict -> ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "CheckpointMeta",
    "DrafterManifest",
    "Finding",
    "Plan",
    "Profile",
    "SpecctlError",
    "__version__",
    "load_manifest",
    "load_profile",
    "read_checkpoint",
]

_LAZY = {
    "CheckpointMeta": "specctl.facts.checkpoint",
    "DrafterManifest": "specctl.profile",
    "Finding": "specctl.plan.findings",
    "Plan": "specctl.plan.plan",
    "Profile": "specctl.profile",
    "SpecctlError": "specctl.errors",
    "load_manifest": "specctl.profile",
    "load_profile": "specctl.profile",
    "read_checkpoint": "specctl.facts.checkpoint",
}

if TYPE_CHECKING:
    from specctl.errors import SpecctlError
    from specctl.facts.checkpoint import CheckpointMeta, read_checkpoint
    from specctl.plan.findings import Finding
    from specctl.plan.plan import Plan
    from specctl.profile import DrafterManifest, Profile, load_manifest, load_profile


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specctl' has no attribute {name!r}")
