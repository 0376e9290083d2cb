"""Integration fixtures: a lab of real sshd hosts (network namespaces where possible) and a real Slurm
cluster (slurm.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.flows.demo import write_inputs
from tests._hygiene import kill_servers
from tests.integration.slurm import SlurmLab, slurm_missing
from tests.integration.sshd import SshLab, namespaces_work


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    if not Path("/usr/sbin/sshd").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("openssh-server is not installed (make test installs it when run as root)")
        pytest.skip("openssh-server is not installed")
    lab = SshLab(tmp_path_factory.mktemp("sshlab"), namespaces_work())
    try:
        lab.start(3)
        yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="session")
def slurm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmLab]:
    """A real Slurm cluster (slurmctld, slurmd nodes sn0 and sn1 in namespaces of their own, munged),
    started once for the session; tests that drain nodes or leave jobs use `slurm` instead."""
    if not namespaces_work():
        pytest.skip("the Slurm lab needs root and network namespaces")
    if missing := slurm_missing():
        why = f"Slurm is not installed ({', '.join(missing)} missing; make test installs slurm-wlm and munge as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    lab = SlurmLab(tmp_path_factory.mktemp("slurmlab"))
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()


@pytest.fixture
def slurm(slurm_lab: SlurmLab) -> Iterator[SlurmLab]:
    """The session's Slurm lab, reset after the test: every job cancelled, every node resumed and idle."""
    yield slurm_lab
    slurm_lab.reset()


@pytest.fixture
def ssh_options(lab: SshLab):  # type: ignore[no-untyped-def]
    from specctl.hosts.ssh_destination import SshOptions

    return SshOptions(config_path=str(lab.ssh_config), connect_timeout_s=5)


def lab_profile(lab: SshLab, tmp_path: Path, port: int) -> dict[str, Any]:
    """The demo's v1 profile served on every lab host (all interfaces, group `all`), with an inventory."""
    if not lab.use_namespaces:
        pytest.skip("several hosts on one loopback address would share the profile's port")
    v1, _ = write_inputs(tmp_path, port)
    data = yaml.safe_load(v1.read_text())
    data["engine"]["host"] = "0.0.0.0"
    data["hosts"] = ["all"]
    v1.write_text(yaml.safe_dump(data, sort_keys=False))
    inventory = lab.inventory(tmp_path / "hosts.yaml", sys.executable)
    return {
        "v1": str(v1),
        "inventory": inventory,
        "common": ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config)],
        "tmp": tmp_path,
    }


def reset_lab(lab: SshLab) -> None:
    """What every test leaves: each sshd running, no server of any test left."""
    for host in lab.hosts.values():
        if not host.alive():
            lab.start_sshd(host)
        kill_servers(host.root)
