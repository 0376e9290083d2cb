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
    assert first.identity.process_table == again.identity.process_table and first.identity.net_ns
    assert not [p for p in tmp_path.iterdir() if ".tmp." in p.name]


def test_two_names_of_one_root_in_one_run_the_second_is_refused_and_the_lock_names_the_first(tmp_path: Path) -> None:
    """One machine under two inventory names, one `root:`: before, both "took" the lock (its owner
    named no host), then the second's release directory collided ("Directory not empty")."""
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
    # h0's hold is over, the run goes on: h1 still reaches h0's root, and is still refused (and leaves no lock)
    with pytest.raises(HostError, match=r"is h0's too \(root id [0-9a-f]{12}\): one machine under two"):
        lock.take(h1, base, lock.owner("run", "specctl deploy", "h1"))
    assert not (tmp_path / "p" / "lock").exists()


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


def test_a_root_used_from_other_ports_under_this_boot_is_refused(tmp_path: Path) -> None:
    """The sshd lab's hosts (and containers) share a machine-id, a boot and a process table, but not
    ports: one root for two of them would be one `current` for two servers."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    (tmp_path / "host-seen").write_text(f"{boot} net:[1] h9\n")
    with pytest.raises(HostError, match="is used by h9 from other ports") as e:
        lock.take(local_transport("h1"), f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    assert "host-seen" in str(e.value.fix) and not (tmp_path / "p" / "lock").exists()
    (tmp_path / "host-seen").write_text("another-boot net:[1] h9\n")  # the last use was before a reboot
    lock.take(local_transport("h1"), f"{tmp_path}/p", lock.owner("r1", "specctl deploy"))
    lock.release(local_transport("h1"), f"{tmp_path}/p")


def test_one_gpu_under_two_entries_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho GPU-1111\necho GPU-2222\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    h0, h1 = local_transport("h0"), local_transport("h1")
    first = lock.take(h0, f"{tmp_path}/a/p", lock.owner("gpus", "specctl deploy", "h0"))
    second = lock.take(h1, f"{tmp_path}/b/p", lock.owner("gpus", "specctl deploy", "h1"))
    lock.release(h0, f"{tmp_path}/a/p")
    lock.release(h1, f"{tmp_path}/b/p")
    assert first.identity is not None and first.identity.gpus == ("GPU-1111", "GPU-2222") and first.notes == ()
    assert "GPU GPU-1111 is h0's too: their servers would share it" in second.notes


def test_a_record_is_replaced_whole_and_a_lock_written_exclusively(tmp_path: Path) -> None:
    t = local_transport("h1")
    records.write(t, str(tmp_path), records.ReleaseRecord("r", 1, "serving"))
    assert records.read(t, str(tmp_path), "r", current=False).life == "serving"
    assert whole.put(t, f"{tmp_path}/x", b"one\n", exclusive=True)
    assert not whole.put(t, f"{tmp_path}/x", b"two\n", exclusive=True)
    assert (tmp_path / "x").read_text() == "one\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "record.json",
        "x",
    ]


def test_a_holders_pid_is_judged_only_in_its_own_process_table() -> None:
    """One hostname is no proof of one process table (containers, clones): a pid recorded under another
    boot or pid namespace says nothing here, though it names a live process of this machine."""
    held = {**lock.owner("r", "specctl deploy", "h1"), "run_id": "other", "pid": 1, "started": None}
    assert lock.holder_alive(held) is True  # pid 1 of this very table: alive
    assert lock.holder_alive({**held, "table": "another-boot/pid:[4026531836]"}) is None
    assert "on another machine" in lock.describe({**held, "table": "another-boot/pid:[4026531836]"})


def test_clones_of_one_image_are_said_and_refused_one_shared_root() -> None:
    """One machine-id under two boot ids: two machines from one image (an uncleared template), told
    apart by boot id: said; the same root seen by both (a shared home) refused."""
    image = "5f3c" * 8
    a = Identity("root-a", image, "boot-1", "pid:[1]", "net:[1]")
    b = Identity("root-b", image, "boot-2", "pid:[1]", "net:[1]")
    assert lock._seen(local_transport("a"), "/r/p", "clones", a) == ()
    [note] = lock._seen(local_transport("b"), "/r/p", "clones", b)
    assert "b and a share machine-id 5f3c5f3c5f3c under two boot ids: clones of one image" in note
    with pytest.raises(HostError, match=r"is a's too \(root id root-a\): two clones of one image"):
        lock._seen(local_transport("c"), "/r/p", "clones", Identity("root-a", image, "boot-3", "pid:[1]", "net:[1]"))
