"""Real places for a ledger to fail: a tiny tmpfs to fill or remount read-only (needs root), and a
child process in which file modes apply even when the tests run as root (root ignores them)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PR_CAPBSET_DROP = 24  # <linux/prctl.h>
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER = 1, 2, 3  # <linux/capability.h>


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs of its own, unmounted after the test (also when it was remounted read-only)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(
                ["umount", "-l", str(mount)], check=True
            )  # busy: detach now, freed when the last file closes


def fill(disk: Path) -> Path:
    """Write a file until the filesystem says ENOSPC; tmpfs allocates whole pages, so none is left."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 1024)
        except OSError:
            pass
    assert os.statvfs(disk).f_bavail == 0
    return filler


def remount_read_only(disk: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, capture_output=True)


def _without_root_overrides() -> None:
    """In the child, before exec: drop the capabilities that let root ignore file modes."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture
def modes_apply(tmp_path: Path) -> dict[str, Any]:
    """subprocess arguments under which file modes apply: as root, a child without the capabilities
    that override them (it can still run this venv's python, which `nobody` cannot reach here)."""
    if os.geteuid() != 0:
        return {}
    probe = tmp_path / "probe"
    probe.mkdir(mode=0o555)
    try:
        tried = subprocess.run(
            [sys.executable, "-c", f"open({str(probe / 'f')!r}, 'w')"],
            capture_output=True,
            preexec_fn=_without_root_overrides,
        )
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop root's file-mode overrides here: {exc}")
    finally:
        probe.chmod(0o755)
    if tried.returncode == 0:
        pytest.skip("root still writes a mode-555 directory without CAP_DAC_OVERRIDE here")
    return {"preexec_fn": _without_root_overrides}
