"""What a new release directory holds: the launch script and environment of its node, the resolved
inputs (profile, plan, manifest, checkpoint facts, pinned workload, one-line summary) and the
drafter overlay's links to the drafter's own files; on a Slurm cluster also the job script and the
launch script of every other node rank (one directory on shared storage serves the whole job)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specctl.errors import HostError
from specctl.facts import host as host_facts
from specctl.flows.static import CheckReport
from specctl.plan.plan import NodePlan, Plan
from specctl.plan.render import render_sh
from specctl.plan.sbatch import FACTS_SCRIPT, JOB_FILE, JobSettings, node_script, render_sbatch
from specctl.profile.inventory import SlurmCluster
from specctl.profile.profile import is_local_path
from specctl.release import release as rel
from specctl.release.documents import PLAN_FILE, PROFILE_FILE
from specctl.release.staging import Staged, host_env
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
    pinned workload (so a rollback verifies on the very same prompts) and a one-line summary."""
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
    cluster: SlurmCluster | None = None,
    release: rel.Release | None = None,
    hf_home: str | None = None,
) -> dict[str, tuple[bytes, int] | str]:
    """Every file of one node's release directory (`staged`: the host's snapshots of Hub checkpoints);
    on a `cluster`, the job's files too (`hf_home`: the inventory's cache, for every node rank)."""
    files = rel.release_files(p, node, release_documents(report, p), overlay_sources(report, p, staged or {}))
    if cluster is not None:
        assert release is not None, "a cluster's release is written for one release directory"
        files.update(job_files(report, p, cluster, release.dir, release.run_id, release.profile, hf_home))
    return files


def job_settings(
    report: CheckReport, cluster: SlurmCluster, release_dir: str, run_id: str, profile: str
) -> JobSettings:
    """What a release's job asks of the cluster: the entry's site settings, GPUs from the profile."""
    p = report.inputs.profile
    gres = cluster.gres if cluster.gres is not None else f"gpu:{p.hardware.gpus_per_node}"
    return JobSettings(
        release_dir,
        release_dir.rsplit("/releases/", 1)[0],
        run_id,
        profile,
        cluster.partition,
        cluster.account,
        cluster.qos,
        cluster.time,
        gres,
        tuple(cluster.setup),
        tuple(cluster.sbatch_args),
        tuple(cluster.srun_args),
        cluster.python or p.engine.python,
        p.engine.port,
        report.inputs.engine.distribution(),
        cluster.exclusive,
    )


def job_files(
    report: CheckReport,
    p: Plan,
    cluster: SlurmCluster,
    release_dir: str,
    run_id: str,
    profile: str,
    hf_home: str | None = None,
) -> dict[str, tuple[bytes, int] | str]:
    """The files a Slurm release adds: `job.sbatch`, the facts script its first node runs, and the
    launch scripts of node ranks 1.. (rank 0's is `launch.sh`, as everywhere)."""
    job = job_settings(report, cluster, release_dir, run_id, profile)
    files: dict[str, tuple[bytes, int] | str] = {
        JOB_FILE: (render_sbatch(p, job).encode(), 0o755),
        FACTS_SCRIPT: (host_facts.script().encode(), 0o644),
    }
    for node in p.nodes[1:]:
        node = dataclasses.replace(node, env=host_env(node.env, hf_home)) if hf_home else node
        files[node_script(node.rank)] = (render_sh(p, node).encode(), 0o755)
    return files
