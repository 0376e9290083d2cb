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
    rel.materialize(
        r,
        {
            "launch.sh": (b"echo hi\n", 0o755),
            "sub/config.json": (b"{}\n", 0o644),
            "sub/model.safetensors": "/srv/drafter/model.safetensors",
        },
    )
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
        runs.append((r, rel.start(r, confirm_within_s=600)))
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


def test_env_file_is_safe_to_source(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    env = {"PLAIN": "x", "NASTY": f"$(touch {marker}) `touch {marker}` 'q' \"d\" \\ $HOME", "LINES": "a\nb"}
    (tmp_path / "env").write_bytes(rel.env_file(env))
    out = subprocess.run(
        ["sh", "-c", '. ./env && printf "%s\\0%s\\0%s" "$PLAIN" "$NASTY" "$LINES"'],
        cwd=tmp_path,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    assert [v.decode() for v in out] == [env["PLAIN"], env["NASTY"], env["LINES"]]
    assert not marker.exists()


def test_a_disk_that_fills_while_a_release_unpacks_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk under the unpack read as tar's own exit ("`sh -c ...` exited 2"): now as every whole
    write says it, host, path and what is free, and nothing is left behind. tar here is a stand-in
    that writes one file, then fails as GNU tar does on ENOSPC."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tar = bin_dir / "tar"
    tar.write_text(
        '#!/bin/sh\ncat >/dev/null; touch "$5/launch.sh"\n'
        'echo "tar: profile.json: Cannot write: No space left on device" >&2; exit 2\n'
    )
    tar.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    r = rel.Release(local_transport("h1"), str(tmp_path / "root"), "p", "run1")
    with pytest.raises(HostError, match=rf"^no space left on h1 at {r.dir} \([0-9.]+ MB free\)$") as e:
        rel.materialize(r, {"launch.sh": (b"true\n", 0o755), "profile.json": (b"{}", 0o644)})
    assert e.value.host == "h1" and "nothing was left half-written" in str(e.value.fix)
    assert list((tmp_path / "root" / "p" / "releases").iterdir()) == []


def test_a_failed_unpack_leaves_no_part_and_sweep_removes_old_ones(tmp_path: Path) -> None:
    t = local_transport()
    r = rel.Release(t, str(tmp_path), "p", "run1")
    with pytest.raises(HostError):
        t.run(["sh", "-c", rel._UNPACK, "sh", r.dir], stdin=b"not a tar archive")
    releases = tmp_path / "p" / "releases"
    assert list(releases.iterdir()) == []
    (releases / "run0.part.123").mkdir()  # what a killed transfer of an earlier run left
    assert rel.read_survey(t.run(rel.survey_command(str(tmp_path / "p"), t.name))) == rel.Survey(None, [])
    assert list(releases.iterdir()) == []


def test_missing_files_names_what_a_restart_needs(tmp_path: Path) -> None:
    t = local_transport()
    r = rel.Release(t, str(tmp_path), "p", "run1")
    assert rel.missing_files(r) == ["the release directory"]
    rel.materialize(r, {name: (b"{}", 0o644) for name in rel.WHOLE})
    assert rel.missing_files(r) == []
    (Path(r.dir) / "launch.sh").unlink()
    assert rel.missing_files(r) == ["launch.sh"]


def _wait_gone(group: int, within_s: float = 10) -> None:
    deadline = time.monotonic() + within_s
    while subprocess.run(["sh", "-c", 'kill -0 "-$1"', "sh", str(group)], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, f"process group {group} still runs"
        time.sleep(0.1)


def test_servers_are_found_without_pid_file_or_release_directory(tmp_path: Path) -> None:
    t = local_transport()
    a, b = rel.Release(t, str(tmp_path), "p", "a"), rel.Release(t, str(tmp_path), "p", "b")
    other = rel.Release(t, str(tmp_path), "p-other", "c")  # another profile whose name starts the same
    groups = {}
    for r in (a, b, other):
        rel.materialize(r, {"launch.sh": (b"exec sleep 60\n", 0o755)})
        groups[r.run_id] = rel.start(r, confirm_within_s=600)
        rel.switch(r)
    try:
        assert sorted(s.release for s in rel.servers(t, a.base)) == ["a", "b"]
        (Path(a.dir) / rel.PID).unlink()
        subprocess.run(
            ["rm", "-rf", b.dir], check=True
        )  # its release directory is gone: the environment still names it
        assert sorted((s.release, s.handle) for s in rel.servers(t, a.base)) == [("a", groups["a"]), ("b", groups["b"])]
        assert rel.stop_running(t, str(tmp_path), "p") == ["a", "b"]
        _wait_gone(groups["a"])
        _wait_gone(groups["b"])
        assert [s.release for s in rel.servers(t, other.base)] == ["c"]
    finally:
        rel.stop_running(t, str(tmp_path), "p-other")


def test_a_server_never_made_current_stops_itself_at_its_deadline(tmp_path: Path) -> None:
    t = local_transport()
    kept, dropped = rel.Release(t, str(tmp_path), "p", "kept"), rel.Release(t, str(tmp_path), "p", "dropped")
    for r in (kept, dropped):
        rel.materialize(r, {"launch.sh": (b"exec sleep 60\n", 0o755)})
    # the kept one is switched right after its start, with seconds to spare on a loaded machine
    began = time.monotonic()
    group_kept = rel.start(kept, confirm_within_s=3)
    rel.switch(kept)
    group_dropped = rel.start(dropped, confirm_within_s=1)  # the shortest deadline the watchdog keeps
    try:
        _wait_gone(group_dropped, within_s=15)
        assert "was not made current by its deadline" in (Path(dropped.dir) / rel.LOG).read_text()
        time.sleep(max(0.0, began + 3.2 - time.monotonic()))  # past the kept one's deadline too
        assert [s.release for s in rel.servers(t, kept.base)] == ["kept"]  # confirmed: it keeps running
        assert group_kept
    finally:
        rel.stop_running(t, str(tmp_path), "p")


def test_restore_budget_comes_from_the_release_itself(tmp_path: Path) -> None:
    r = rel.Release(local_transport(), str(tmp_path), "p", "r")
    rel.materialize(r, {"launch.sh": (b"true\n", 0o755)})
    assert rel.startup_budget(r, 2400) == 2400  # nothing recorded: the default
    rel.switch(r, startup_s=2.0)
    assert rel.startup_budget(r, 2400) == 60  # a fast server still gets a minute
    rel.switch(r, startup_s=600.0)
    assert rel.startup_budget(r, 2400) == 1830  # three times its own, plus half a minute


def test_a_server_that_exited_but_waits_to_be_reaped_is_not_running(tmp_path: Path) -> None:
    """A zombie answers `kill -0`; a container whose init reaps late (or never) must not make
    stop wait out its grace period or status call a dead server running."""
    t = local_transport()
    r = rel.Release(t, str(tmp_path), "p", "z")
    rel.materialize(r, {"launch.sh": (b"true\n", 0o755)})
    zombie = subprocess.Popen(["setsid", "sh", "-c", "exit 0"])  # not waited for: a zombie once it exits
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert subprocess.run(["sh", "-c", 'kill -0 "-$1"', "sh", str(zombie.pid)]).returncode == 0  # still "there"
        (Path(r.dir) / rel.PID).write_text(f"{zombie.pid}\n")
        assert rel.servers(t, r.base) == []
        started = time.monotonic()
        assert rel.stop_running(t, str(tmp_path), "p", timeout_s=5) == []
        assert time.monotonic() - started < 3
    finally:
        zombie.wait()


def _foreign(seconds: int = 60) -> subprocess.Popen[bytes]:
    """A process specctl did not start: its own session, no mark in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCTL_")}
    return subprocess.Popen(["setsid", "sleep", str(seconds)], env=env)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_pid_file_naming_another_process_is_never_signalled(tmp_path: Path) -> None:
    """The pid was recycled (or the file rewritten): the process behind it is left alone, and said."""
    t = local_transport("h1")
    r = rel.Release(t, str(tmp_path), "p", "old")
    rel.materialize(r, {"launch.sh": (b"exec sleep 60\n", 0o755)})
    group = rel.start(r, confirm_within_s=600)
    rel.switch(r)
    stranger = _foreign()
    try:
        assert rel.stop_running(t, str(tmp_path), "p") == ["old"]
        _wait_gone(group)
        (Path(r.dir) / rel.PID).write_text(f"{stranger.pid}\n")  # what a recycled pid looks like
        seen = rel.look(t, r.base)
        assert seen.servers == [] and seen.strangers == [rel.Stranger("old", stranger.pid)]
        assert "is not the server specctl started on h1; left alone" in seen.strangers[0].describe("h1")
        assert rel.stop_running(t, str(tmp_path), "p", timeout_s=1) == [] and not rel.stop(r, timeout_s=1)
        assert _alive(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()


def test_one_process_table_under_two_inventory_names_proves_its_servers_through_either(tmp_path: Path) -> None:
    """One machine reached under two inventory names (one home, one process table): the server's mark
    is the process table (boot id and pid namespace) and the release directory, not the name, so the
    server started through h0 is proven ours through h1, found, not a stranger, and stopped."""
    h0, h1 = local_transport("h0"), local_transport("h1")
    r0, r1 = rel.Release(h0, str(tmp_path), "p", "run"), rel.Release(h1, str(tmp_path), "p", "run")
    rel.materialize(r0, {"launch.sh": (b"exec sleep 60\n", 0o755)})
    g0 = rel.start(r0, confirm_within_s=600)
    rel.switch(r0)
    try:
        environ = Path(f"/proc/{g0}/environ").read_bytes().split(b"\0")
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        table = f"{boot}/{os.readlink('/proc/self/ns/pid')}"
        assert f"SPECCTL_SERVER={table} {r0.dir}".encode() in environ
        seen = rel.look(h1, r1.base)
        assert [(s.release, s.handle) for s in seen.servers] == [("run", g0)] and seen.strangers == []
        assert rel.stop_running(h1, str(tmp_path), "p") == ["run"]
        _wait_gone(g0)
    finally:
        rel.stop_running(h0, str(tmp_path), "p")


def test_the_watchdog_signals_only_a_group_that_carries_the_servers_mark(tmp_path: Path) -> None:
    """At its deadline the watchdog proves the group is the server's before it signals it."""
    t = local_transport()
    r = rel.Release(t, str(tmp_path), "p", "unmarked")
    rel.materialize(r, {"launch.sh": (b"exec env -u SPECCTL_SERVER -u SPECCTL_RELEASE_DIR sleep 60\n", 0o755)})
    group = rel.start(r, confirm_within_s=1)
    try:
        time.sleep(3)  # past the deadline: a group whose members carry no mark is not provably the server
        assert _alive(group)
        assert "not made current" not in (Path(r.dir) / rel.LOG).read_text()
    finally:
        os.killpg(group, 9)
