"""The platform seam: the kind is picked from the inventory entry in one place, and what the flows
need to know of it are declared capabilities (and the files and dry-run settings it adds itself)."""

from __future__ import annotations

from pathlib import Path

from specctl.constants import HEAD_ADDRESS
from specctl.flows import static
from specctl.hosts.inventory import HostSpec
from specctl.hosts.local import local_transport
from specctl.plan.sbatch import FACTS_SCRIPT, JOB_FILE, node_script
from specctl.profile.inventory import SlurmCluster
from specctl.release.platform import ProcessPlatform, platform_of, platform_type
from specctl.release.release import Release
from specctl.release.slurm import SlurmPlatform
from tests.factory import Scenario, merge


def _specs(tmp_path: Path) -> tuple[HostSpec, HostSpec]:
    cluster = SlurmCluster(kind="slurm", login="local", root=str(tmp_path))
    return HostSpec("local", "~/.specctl", None, None, {}), HostSpec("c", str(tmp_path), None, None, {}, slurm=cluster)


def test_the_kind_is_picked_from_the_entry_and_declares_its_capabilities(tmp_path: Path) -> None:
    host, cluster = _specs(tmp_path)
    assert platform_type(host) is ProcessPlatform and platform_type(cluster) is SlurmPlatform
    assert isinstance(platform_of(cluster, local_transport("c")), SlurmPlatform)
    on_host = platform_type(host)
    assert (on_host.rolling, on_host.on_host, on_host.places_every_rank, on_host.tunable) == (False, True, False, True)
    assert on_host.node0_address is None
    placed = platform_type(cluster)
    assert (placed.rolling, placed.on_host, placed.places_every_rank, placed.tunable) == (True, False, True, False)
    assert placed.node0_address == HEAD_ADDRESS


def test_what_each_platform_adds_to_a_release_and_to_a_dry_run(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"parallel": {"tp": 2, "nnodes": 2}, "hardware": {"gpus_per_node": 1}})
    report = static.check(s.write())
    p, profile, distribution = static.plan(report, node0_address=HEAD_ADDRESS), report.inputs.profile, "sglang"
    host, cluster = _specs(tmp_path)
    release = Release(local_transport("c"), str(tmp_path), p.profile, "r1")
    process = platform_of(host, local_transport("local"))
    assert process.release_files(p, profile, distribution, release) == {}
    assert process.dry_run_settings(p, profile, distribution, f"{tmp_path}/{p.profile}") == {}
    slurm = platform_of(cluster, local_transport("c"))
    assert set(slurm.release_files(p, profile, distribution, release)) == {JOB_FILE, FACTS_SCRIPT, node_script(1)}
    job = slurm.dry_run_settings(p, profile, distribution, f"{tmp_path}/{p.profile}")["job"]
    assert job[0] == "sbatch" and f"--job-name=specctl:{p.profile}:<run-id>" in job
