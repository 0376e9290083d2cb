"""The default state root: one per inventory host (`~/.specctl/hosts/<name>`), and an installation
from before per-host roots adopted in place by the host of the machine that wrote it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specctl.hosts.local import local_transport
from specctl.release.release import host_root


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_a_fresh_home_gives_every_host_a_root_of_its_own(home: Path) -> None:
    t = local_transport()
    assert host_root(t, None, "h0") == f"{home}/.specctl/hosts/h0"
    assert host_root(t, None, "h1") == f"{home}/.specctl/hosts/h1"
    assert host_root(t, "~/state", "h0") == f"{home}/state" and host_root(t, "/srv/x", "h0") == "/srv/x"


def test_an_old_root_with_releases_is_adopted_in_place_by_the_first_host_only(home: Path) -> None:
    (home / ".specctl" / "p" / "releases" / "r1").mkdir(parents=True)
    t = local_transport()
    assert host_root(t, None, "h0") == f"{home}/.specctl"  # the first name on this machine keeps it
    assert os.readlink(home / ".specctl" / "adopted-by") == "h0"
    assert host_root(t, None, "h1") == f"{home}/.specctl/hosts/h1"  # another name (one machine, two names)
    assert host_root(t, None, "h0") == f"{home}/.specctl"  # and it stays so


def test_an_old_root_another_machine_wrote_is_not_adopted(home: Path) -> None:
    (home / ".specctl" / "p" / "releases" / "r1").mkdir(parents=True)
    (home / ".specctl" / "host-identity").write_text("0000someothermachine other\n")
    assert host_root(local_transport(), None, "h0") == f"{home}/.specctl/hosts/h0"
    assert not (home / ".specctl" / "adopted-by").is_symlink()


def test_a_host_that_already_has_its_own_root_adopts_nothing(home: Path) -> None:
    (home / ".specctl" / "hosts" / "h0").mkdir(parents=True)
    (home / ".specctl" / "p" / "releases" / "r1").mkdir(parents=True)
    assert host_root(local_transport(), None, "h0") == f"{home}/.specctl/hosts/h0"
