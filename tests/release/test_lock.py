"""The host lock and the first contact with a state root (release/lock.py), on this machine's real sh:
files written whole, empty files left by an interrupted write taken over, a root known by its own id
(two inventory names reaching it share one lock, named; in one run the second is refused)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from specctl.errors import HostError
from specctl.facts.host import Identity
from specctl.hosts.local import local_transport
from specctl.processes import process_table
from specctl.release import lock, whole
from specctl.release import record as records


def _old(path: Path, age_s: float = 120) -> None:
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_an_empty_lock_a_minute_old_is_taken_over_with_a_note(tmp_path: Path) -> None:
    """Before writes were whole, a full disk left the lock empty: "unreadable lock file ('')" until
    `unlock --force`. A minute old, it is taken over and said; younger, it is refused as what it is."""
    base = tmp_path / "p"
    base.mkdir()
    (base / "lock").write_bytes(b"")
    t = local_transport("h1")
    with pytest.raises(HostError, match="an empty lock file"):
        lock.take(t, str(base), lock.owner("r1", "specctl deploy"))
    _old(base / "lock")
    taken = lock.take(t, str(base), lock.owner("r1", "specctl deploy"))
    try:
        assert taken.stale is None and any("took over the empty lock file" in n for n in taken.notes), taken.notes
        held = json.loads((base / "lock").read_text())
        assert held["run_id"] == "r1" and held["host"] == "h1" and held["table"]
    finally:
        lock.release(t, str(base))
    assert sorted(p.name for p in base.iterdir()) == []  # nothing aside, nothing temporary


def test_an_empty_identity_a_minute_old_is_taken_over_with_a_note(tmp_path: Path) -> None:
    """An empty host-identity read "belongs to another machine" forever; a minute old it is rewritten."""
    (tmp_path / "host-identity").write_bytes(b"")
    t = local_transport("h1")
    with pytest.raises(HostError, match="host-identity is empty and less than a minute old"):
        lock.take(t, f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    assert not (tmp_path / "p" / "lock").exists()
    _old(tmp_path / "host-identity")
    taken = lock.take(t, f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    lock.release(t, f"{tmp_path}/p")
    assert any("took over the empty host-identity file" in n for n in taken.notes), taken.notes
    machine_id = Path("/etc/machine-id").read_text().strip() if Path("/etc/machine-id").exists() else os.uname()[1]
    assert (tmp_path / "host-identity").read_text().split()[0] == machine_id


def test_a_root_carries_its_own_id_written_once(tmp_path: Path) -> None:
    t = local_transport("h1")
    first = lock.take(t, f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    lock.release(t, f"{tmp_path}/p")
    again = lock.take(t, f"{tmp_path}/q", lock.owner("r2", "specctl deploy"))
    lock.release(t, f"{tmp_path}/q")
    assert first.identity is not None and again.identity is not None
    assert len(first.identity.root_id) == 32 and first.identity.root_id == again.identity.root_id
    assert (tmp_path / "root-id").read_text().strip() == first.identity.root_id
    assert (first.identity.boot_id, first.identity.pid_ns) == (again.identity.boot_id, again.identity.pid_ns)
    table = f"{first.identity.boot_id}/{first.identity.pid_ns}"
    assert table == process_table() and first.identity.net_ns  # the host's read is this machine's own here
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]


def test_two_names_of_one_root_in_one_run_the_second_is_refused_and_the_lock_names_the_first(tmp_path: Path) -> None:
    """One machine under two inventory names, one `root:`: before, both "took" the lock (its owner
    named no host), then the second's release directory collided ("Directory not empty"). The lock on
    disk is the refusal: it names the host this run holds it through."""
    h0, h1 = local_transport("h0"), local_transport("h1")
    base = f"{tmp_path}/p"
    lock.take(h0, base, lock.owner("run", "specctl deploy", "h0"))
    try:
        with pytest.raises(HostError, match="is h0's too: this run holds its lock through h0") as e:
            lock.take(h1, base, lock.owner("run", "specctl deploy", "h1"))
        assert "name each machine once in the inventory" in str(e.value.fix)
        assert json.loads((tmp_path / "p" / "lock").read_text())["host"] == "h0"
    finally:
        lock.release(h0, base)


def test_the_second_name_reading_the_lock_before_the_first_returns_is_refused_not_a_takeover(
    tmp_path: Path,
) -> None:
    """The race the lab met: h0's lock is on disk, written by this process for this run, but h0's `take`
    has not returned yet (the run not yet registered as holding it). h1, of the same run, read it as a
    holder gone and took it over, so both wrote one release ("Directory not empty")."""
    h1 = local_transport("h1")
    base = tmp_path / "p"
    base.mkdir()
    (base / "lock").write_text(json.dumps(lock.owner("run", "specctl deploy", "h0")) + "\n")
    with pytest.raises(HostError, match="is h0's too: this run holds its lock through h0"):
        lock.take(h1, str(base), lock.owner("run", "specctl deploy", "h1"))
    assert json.loads((base / "lock").read_text())["host"] == "h0"


def test_what_one_command_saw_is_not_carried_into_the_next(tmp_path: Path) -> None:
    """A long-lived process (a program embedding specctl, the test suite) runs command after command:
    what one saw of its hosts was kept in module globals forever, so a later command under a reused run
    id was refused a root its predecessor had reached under another name. Now each command's `Seen` is
    its own, and once h0's hold is over h1 shares the root's lock, said."""
    h0, h1 = local_transport("h0"), local_transport("h1")
    base = f"{tmp_path}/p"
    lock.take(h0, base, lock.owner("run", "specctl deploy", "h0"))
    lock.release(h0, base)
    taken = lock.take(h1, base, lock.owner("run", "specctl deploy", "h1"))
    lock.release(h1, base)
    assert any("that h0 used last: the two names share its lock" in n for n in taken.notes), taken.notes
    assert not [k for k, v in vars(lock).items() if isinstance(v, dict) and k in ("_roots", "_hosts")]


def test_two_names_of_one_root_across_runs_share_its_lock_and_say_so(tmp_path: Path) -> None:
    h0, h1 = local_transport("h0"), local_transport("h1")
    base = f"{tmp_path}/p"
    lock.take(h0, base, lock.owner("run1", "specctl deploy", "h0"))
    try:
        with pytest.raises(HostError, match=r"locked by .*specctl deploy through h0; its process is running"):
            lock.take(h1, base, lock.owner("run2", "specctl deploy", "h1"))
    finally:
        lock.release(h0, base)
    taken = lock.take(h1, base, lock.owner("run2", "specctl deploy", "h1"))
    lock.release(h1, base)
    assert any("that h0 used last: the two names share its lock" in n for n in taken.notes), taken.notes


def _boot() -> tuple[str, int]:
    """This machine's boot id and when it began (epoch seconds: /proc/stat's btime)."""
    btime = next(
        int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
    )
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip(), btime


def test_a_root_used_from_other_ports_under_this_boot_by_another_name_is_refused(tmp_path: Path) -> None:
    """The sshd lab's hosts (and containers) share a machine-id, a boot and a process table, but not
    ports: one root for two of them would be one `current` for two servers."""
    boot, _ = _boot()
    (tmp_path / "host-seen").write_text(f"{boot} net:[1] h9\n")  # a line from before SINCE was kept
    with pytest.raises(HostError, match="is used by h9 from other ports") as e:
        lock.take(local_transport("h1"), f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    assert "host-seen" in str(e.value.fix) and not (tmp_path / "p" / "lock").exists()
    (tmp_path / "host-seen").write_text(f"{boot} net:[1] 1000 h9\n")
    with pytest.raises(HostError, match="is used by h9 from other ports"):
        lock.take(local_transport("h1"), f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))


def test_the_same_name_from_a_new_network_namespace_is_the_host_restarted(tmp_path: Path) -> None:
    """A container restarted under its own name has a new network namespace, same boot: it was
    refused its own root until someone deleted host-seen. Now it is said, and the root is taken."""
    boot, _ = _boot()
    (tmp_path / "host-seen").write_text(f"{boot} net:[1] 1000 h1\n")
    t = local_transport("h1")
    taken = lock.take(t, f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    lock.release(t, f"{tmp_path}/p")
    assert any("from a new network namespace under the same boot: the same host restarted" in n for n in taken.notes)
    assert taken.identity is not None
    assert (tmp_path / "host-seen").read_text() == f"{boot} {taken.identity.net_ns} 1000 h1\n"  # alive since 1000


def test_another_boot_that_wrote_after_this_one_began_is_a_clone_refused_across_runs(tmp_path: Path) -> None:
    """One machine-id, two boot ids, one root (an image's clones on a shared home): across runs they
    only got a "seen" note, each taking the other's root. A boot that wrote the root after this boot
    began was alive beside it: a clone, refused. One that wrote before is this machine before a reboot."""
    boot, began = _boot()
    (tmp_path / "host-seen").write_text(f"other-boot net:[1] {began + 5} h9\n")
    with pytest.raises(HostError, match="written by h9 under boot id other-boot .* two clones of one image") as e:
        lock.take(local_transport("h1"), f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    assert "systemd-machine-id-setup" in str(e.value.fix) and not (tmp_path / "p" / "lock").exists()
    (tmp_path / "host-seen").write_text(f"other-boot net:[1] {began - 5} h9\n")  # before this boot: a reboot
    t = local_transport("h1")
    taken = lock.take(t, f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    lock.release(t, f"{tmp_path}/p")
    assert any("that h9 used last" in n for n in taken.notes), taken.notes
    now_boot, net, since, name = (tmp_path / "host-seen").read_text().split()
    assert (now_boot, name) == (boot, "h1") and int(since) >= began and taken.identity is not None
    assert net == taken.identity.net_ns


def test_one_gpu_under_two_entries_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho GPU-1111\necho GPU-2222\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    h0, h1 = local_transport("h0"), local_transport("h1")
    seen = lock.Seen()  # one command's
    first = lock.take(h0, f"{tmp_path}/a/p", lock.owner("gpus", "specctl deploy", "h0"), seen=seen)
    second = lock.take(h1, f"{tmp_path}/b/p", lock.owner("gpus", "specctl deploy", "h1"), seen=seen)
    other = lock.take(h1, f"{tmp_path}/c/p", lock.owner("gpus", "specctl deploy", "h1"), seen=lock.Seen())
    lock.release(h1, f"{tmp_path}/c/p")
    lock.release(h0, f"{tmp_path}/a/p")
    lock.release(h1, f"{tmp_path}/b/p")
    assert first.identity is not None and first.identity.gpus == ("GPU-1111", "GPU-2222") and first.notes == ()
    assert "GPU GPU-1111 is h0's too: their servers would share it" in second.notes
    assert other.notes == ()  # another command's


def test_a_record_is_replaced_whole(tmp_path: Path) -> None:
    t = local_transport("h1")
    records.write(t, str(tmp_path), records.ReleaseRecord("r", 1, "serving"))
    assert records.read(t, str(tmp_path), "r", current=False).life == "serving"
    t.put(f"{tmp_path}/x", b"one\n")  # the transport's put is the one whole writer
    t.put(f"{tmp_path}/x", b"two\n", mode=0o600)
    assert (tmp_path / "x").read_text() == "two\n" and stat.S_IMODE((tmp_path / "x").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json", "x"]


def test_a_file_is_synced_alone_where_sync_takes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """coreutils before 8.24 (EL7) has no `sync FILE`: the fallback was a global `sync`, flushing the
    whole host for each lock or record while a stage wrote gigabytes. Now: `dd conv=fsync` of that file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sync = bin_dir / "sync"
    sync.write_text(f"#!/bin/sh\n[ $# -gt 0 ] || exec touch {tmp_path}/global-sync\nexit 1\n")
    sync.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    t = local_transport("h1")
    whole.put(t, f"{tmp_path}/d/x", b"one\n")
    taken = lock.take(t, f"{tmp_path}/d/p", lock.owner("r1", "specctl deploy"))
    lock.release(t, f"{tmp_path}/d/p")
    assert (tmp_path / "d" / "x").read_text() == "one\n" and taken.identity is not None
    assert not (tmp_path / "global-sync").exists()


def test_a_holders_pid_is_judged_only_in_its_own_process_table() -> None:
    """One hostname is no proof of one process table (containers, clones): a pid recorded under another
    boot or pid namespace says nothing here, though it names a live process of this machine."""
    held = {**lock.owner("r", "specctl deploy", "h1"), "run_id": "other", "pid": 1, "started": None}
    assert lock.holder_alive(held) is True  # pid 1 of this very table: alive
    assert lock.holder_alive({**held, "table": "another-boot/pid:[4026531836]"}) is None
    assert "on another machine" in lock.describe({**held, "table": "another-boot/pid:[4026531836]"})


def test_clones_of_one_image_in_one_command_are_said() -> None:
    """One machine-id under two boot ids: two machines from one image (an uncleared template), told
    apart by boot id: said (a shared root of theirs is refused on the host: host-seen)."""
    image = "5f3c" * 8
    seen = lock.Seen()
    assert seen.add("a", Identity("root-a", image, "boot-1", "pid:[1]", "net:[1]")) == ()
    [note] = seen.add("b", Identity("root-b", image, "boot-2", "pid:[1]", "net:[1]"))
    assert "b and a share machine-id 5f3c5f3c5f3c under two boot ids: clones of one image" in note
    assert lock.Seen().add("b", Identity("root-b", image, "boot-2", "pid:[1]", "net:[1]")) == ()
