"""What a new release directory holds: the launch script and environment of its node, the resolved
inputs (profile, plan, manifest, checkpoint facts, pinned workload, one-line summary) and the
drafter overlay's links to the drafter's own files; plus whatever the platform adds (a scheduler's
job script and the launch script of every other node rank)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specctl.errors import HostError
from specctl.flows.static import CheckReport
from specctl.plan.plan import NodePlan, Plan
from specctl.profile.profile import is_local_path
from specctl.release import release as rel
from specctl.release.documents import PLAN_FILE, PROFILE_FILE
from specctl.release.platform import Files, Platform
from specctl.release.record import RECORD_FILE, first_record
from specctl.release.staging import CHECKPOINTS_FILE, Staged
from specctl.verdict.workload import Workload, load_workload


def overlay_sources(report: CheckReport, p: Plan, staged: Mapping[str, Staged]) -> dict[str, str]:
    """Where the overlay's links point on the host: the drafter's own files, in its directory or in
    the snapshot staging found on that host."""
    drafter = report.inputs.profile.drafter
    if p.overlay is None or drafter is None:
        return {}
    if is_local_path(drafter.model):
        return {name: f"{drafter.model}/{name}" for name in p.overlay.links}
    if drafter.model not in staged:
        raise HostError(
            f"the drafter {drafter.model} is not staged on this host, so its overlay has nothing to link to",
            host="-",
            fix="deploy stages it first; run `specctl stage` to see why it could not",
        )
    snapshot = staged[drafter.model].snapshot
    return {name: f"{snapshot}/{name}" for name in p.overlay.links}


def profile_workload(report: CheckReport) -> Workload:
    """The profile's pinned workload, read where the file that names it says."""
    inputs = report.inputs
    return load_workload(inputs.profile.verify.workload, Path(inputs.workload_dir or Path(inputs.profile_path).parent))


def release_documents(report: CheckReport, p: Plan) -> dict[str, Any]:
    """What a release keeps of its inputs: resolved profile, plan, manifest, checkpoint facts, the
    pinned workload (so a rollback verifies on the very same prompts), a one-line summary and its
    first record (staged, never verified)."""
    inputs = report.inputs
    profile = inputs.profile
    workload = profile_workload(report)
    return {
        PROFILE_FILE: profile.model_dump(mode="json", by_alias=True),
        PLAN_FILE: p.to_dict(),
        "manifest.json": inputs.manifest.model_dump(mode="json", by_alias=True) if inputs.manifest else None,
        "facts.json": {
            "target": inputs.target.summary() if inputs.target else None,
            "drafter": inputs.drafter.summary() if inputs.drafter else None,
        },
        rel.WORKLOAD_FILE: workload.raw.decode(),
        RECORD_FILE: first_record(profile.metadata.version),
        rel.SUMMARY_FILE: json.dumps(
            {
                "profile": profile.metadata.name,
                "version": profile.metadata.version,
                "sha256": inputs.profile_sha256,
                "baseline": p.baseline,
                "workload": workload.name,
                "workload_sha256": workload.sha256,
            },
            sort_keys=True,
        )
        + "\n",
    }


def release_contents(
    report: CheckReport,
    p: Plan,
    node: NodePlan,
    staged: Mapping[str, Staged] | None = None,
    *,
    platform: Platform | None = None,
    release: rel.Release | None = None,
    hf_home: str | None = None,
) -> Files:
    """Every file of one node's release directory (`staged`: the host's snapshots of Hub checkpoints);
    with a `platform`, what it adds to `release` too (`hf_home`: the inventory's cache, for every node rank)."""
    files = rel.release_files(p, node, release_documents(report, p), overlay_sources(report, p, staged or {}))
    if staged:  # what content the release served: each staged file's size and id, and whether it was checked
        record = {"checkpoints": [s.checksums() for _, s in sorted(staged.items())]}
        files[CHECKPOINTS_FILE] = ((json.dumps(record, indent=2, sort_keys=True) + "\n").encode(), 0o644)
    if platform is not None:
        assert release is not None, "a platform adds its files to one release directory"
        files.update(
            platform.release_files(
                p, report.inputs.profile, report.inputs.engine.distribution(), release, hf_home=hf_home
            )
        )
    return files
