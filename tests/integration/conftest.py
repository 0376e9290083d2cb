"""Integration fixtures: a lab of real sshd hosts (network namespaces where possible)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture
def ssh_options(lab: SshLab):  # type: ignore[no-untyped-def]
    from specctl.hosts.ssh import SshOptions

    return SshOptions(config_path=str(lab.ssh_config), connect_timeout_s=5)
