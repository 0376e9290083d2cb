"""A release directory on the local host: written in one transfer, whole or not at all; servers
stopped by process group with the waiting done on the host."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from specctl.errors import HostError
from specctl.hosts.local import local_transport
from specctl.release import release as rel


def test_materialize_writes_files_modes_and_links(tmp_path: Path) -> None:
    r = rel.Release(local_transport(), str(tmp_path), "p", "run1")
    rel.materialize(r, {"launch.sh": (b"echo hi\n", 0o755), "sub/config.json": (b"{}\n", 0o644),
                        "sub/model.safetensors": "/srv/drafter/model.safetensors"})
    d = Path(r.dir)
    assert (d / "launch.sh").read_text() == "echo hi\n"
    assert os.stat(d / "launch.sh").st_mode & 0o777 == 0o755
    assert os.stat(d / "sub/config.json").st_mode & 0o777 == 0o644
    assert os.readlink(d / "sub/model.safetensors") == "/srv/drafter/model.safetensors"
    assert sorted(p.name for p in (tmp_path / "p/releases").iterdir()) == ["run1"]  # no temporary left


def test_a_failed_transfer_leaves_no_release_directory(tmp_path: Path) -> None:
    r = rel.Release(local_transport(), str(tmp_path), "p", "run1")
    rel.materialize(r, {"a": (b"1", 0o644)})
    with pytest.raises(HostError):  # the directory exists: the rename refuses, the old one stays whole
        rel.materialize(r, {"a": (b"2", 0o644)})
    assert (Path(r.dir) / "a").read_text() == "1"
    broken = rel.Release(local_transport(), str(tmp_path), "p", "run2")
    with pytest.raises(HostError):
        broken.transport.run(["sh", "-c", rel._UNPACK, "sh", broken.dir], stdin=b"not a tar archive")
    assert not Path(broken.dir).exists()


def test_stop_running_stops_every_group_and_names_them(tmp_path: Path) -> None:
    t = local_transport()
    runs = []
    for run_id in ("a", "b"):
        r = rel.Release(t, str(tmp_path), "p", run_id)
        rel.materialize(r, {"launch.sh": (b"trap '' TERM; sleep 60 & sleep 60\n", 0o755)})
        runs.append((r, t.start(["sh", "launch.sh"], cwd=r.dir, log=r.path(rel.LOG), pidfile=r.path(rel.PID))))
    time.sleep(0.3)
    started = time.monotonic()
    assert sorted(rel.stop_running(t, str(tmp_path), "p", timeout_s=0.5)) == ["a", "b"]  # TERM ignored: KILL
    assert time.monotonic() - started < 10
    for _, group in runs:  # killed; the host's init may take a moment to reap them
        deadline = time.monotonic() + 5
        while subprocess.run(["sh", "-c", 'kill -0 "-$1"', "sh", str(group)], capture_output=True).returncode == 0:
            assert time.monotonic() < deadline, f"process group {group} survived the stop"
            time.sleep(0.1)
    assert rel.stop_running(t, str(tmp_path), "p") == []
