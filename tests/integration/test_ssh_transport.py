"""The SSH transport against real OpenSSH servers: commands, files, detached starts, host keys, injection."""

from __future__ import annotations

import os
import posixpath
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specctl.errors import HostError
from specctl.hosts.ssh import ssh_transport
from specctl.hosts.ssh_destination import SshOptions, resolve
from tests.integration.sshd import SshLab


def transport(lab: SshLab, name: str, options: SshOptions):  # type: ignore[no-untyped-def]
    return ssh_transport(name, resolve(name, options), options)


def test_ssh_config_is_honoured(lab: SshLab, ssh_options: SshOptions) -> None:
    target = resolve("h1", ssh_options)
    h1 = lab.hosts["h1"]
    assert (target.hostname, target.port, target.user) == (h1.address, h1.port, "root")
    assert target.known_hosts == (str(lab.known_hosts),)


def test_run_put_read_and_start(lab: SshLab, ssh_options: SshOptions) -> None:
    t = transport(lab, "h0", ssh_options)
    assert t.run(["echo", "hello"]).stdout == "hello\n"
    root = str(lab.hosts["h0"].root)
    t.put(f"{root}/file.txt", b"contents\n")
    assert t.read(f"{root}/file.txt") == b"contents\n" and t.read(f"{root}/missing") is None
    pid = t.start(
        ["sh", "-c", 'echo "secret=$SECRET"; sleep 30'],
        cwd=root,
        log=f"{root}/log",
        pidfile=f"{root}/pid",
        env={"SECRET": "s3cr3t with 'quotes' and $dollars"},
    )
    time.sleep(0.5)
    assert t.read(f"{root}/log") == b"secret=s3cr3t with 'quotes' and $dollars\n"
    assert t.read(f"{root}/pid") == f"{pid}\n".encode()
    assert t.run(["kill", "-0", f"-{pid}"], check=False).rc == 0  # its own process group
    t.run(["kill", "-TERM", f"-{pid}"])
    deadline = time.monotonic() + 10  # until the orphaned group is reaped
    while t.run(["kill", "-0", f"-{pid}"], check=False).rc == 0:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_command_timeout(lab: SshLab, ssh_options: SshOptions) -> None:
    done = transport(lab, "h0", ssh_options).run(["sleep", "5"], timeout_s=0.5, check=False)
    assert done.rc == 124


def test_unknown_host_key_refused_unless_accepted(lab: SshLab, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(lab.ssh_config.read_text().replace(str(lab.known_hosts), str(known)))
    strict = SshOptions(config_path=str(config), connect_timeout_s=5)
    with pytest.raises(HostError) as info:
        transport(lab, "h2", strict).run(["true"])
    assert "unknown host key" in info.value.message and "SHA256:" in info.value.message
    accepting = SshOptions(config_path=str(config), connect_timeout_s=5, accept_new_host_key=True)
    assert transport(lab, "h2", accepting).run(["true"]).rc == 0
    assert lab.hosts["h2"].host_key_pub in known.read_text()
    assert transport(lab, "h2", strict).run(["true"]).rc == 0  # now known


def test_changed_host_key_always_refused(lab: SshLab, tmp_path: Path) -> None:
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[1]
    known = tmp_path / "known_hosts"
    known.write_text(lab.known_hosts_line(lab.hosts["h1"], other))
    config = tmp_path / "ssh_config"
    config.write_text(lab.ssh_config.read_text().replace(str(lab.known_hosts), str(known)))
    for accept in (False, True):
        with pytest.raises(HostError) as info:
            transport(
                lab, "h1", SshOptions(config_path=str(config), connect_timeout_s=5, accept_new_host_key=accept)
            ).run(["true"])
        assert "CHANGED" in info.value.message and info.value.message.count("SHA256:") == 2


def test_host_down_is_a_host_error(lab: SshLab, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host ghost\n  HostName 127.0.0.1\n  Port 1\n  User root\n  UserKnownHostsFile {lab.known_hosts}\n"
    )
    with pytest.raises(HostError) as info:
        transport(lab, "ghost", SshOptions(config_path=str(config), connect_timeout_s=1)).run(["true"])
    assert "cannot connect" in info.value.message and info.value.exit_code == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(
        st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=20),
        min_size=1,
        max_size=4,
    )
)
def test_argv_reaches_the_host_as_plain_data(lab: SshLab, ssh_options: SshOptions, words: list[str]) -> None:
    t = transport(lab, "h0", ssh_options)
    done = t.run(["printf", "%s\\0", *words])
    assert done.stdout.split("\0")[:-1] == words


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch=st.lists(
        st.tuples(
            st.lists(
                st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12),
                max_size=3,
            ),
            st.integers(0, 3),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_a_batch_gives_each_command_its_own_bytes_and_status(
    lab: SshLab, ssh_options: SshOptions, batch: list[tuple[list[str], int]]
) -> None:
    """Output with newlines, quotes and invalid UTF-8, error text and exit status, one round trip."""
    t = transport(lab, "h0", ssh_options)
    commands = [
        ["sh", "-c", 'for w; do printf "%s\\377\\n" "$w"; done; printf "e%s" "$#" >&2; exit "$0"', str(rc), *words]
        for words, rc in batch
    ]
    results = t.run_all(commands)
    assert len(results) == len(batch)
    for (words, rc), done in zip(batch, results, strict=True):
        assert done.out == b"".join(w.encode() + b"\xff\n" for w in words)
        assert (done.rc, done.stderr) == (rc, f"e{len(words)}")
    with pytest.raises(HostError, match="exited 3"):
        t.checked(["false"], t.run_all([["sh", "-c", "exit 3"]])[0])


def test_a_batch_that_runs_out_of_time_keeps_what_finished(lab: SshLab, ssh_options: SshOptions) -> None:
    first, slow, never = transport(lab, "h0", ssh_options).run_all(
        [["echo", "done"], ["sleep", "30"], ["echo", "never"]], timeout_s=2
    )
    assert (first.rc, first.out) == (0, b"done\n")
    assert slow.rc == never.rc == 124 and not never.out


def test_binary_files_read_back_exactly(lab: SshLab, ssh_options: SshOptions) -> None:
    t = transport(lab, "h0", ssh_options)
    path = f"{lab.hosts['h0'].root}/blob.bin"
    data = bytes(range(256)) * 4 + b"\xff\xfe\x00invalid utf-8 \xc3\x28"
    t.put(path, data)
    assert t.read(path) == data


def test_a_put_then_a_command_in_one_round_trip_and_the_writes_failure_still_raised(
    lab: SshLab, ssh_options: SshOptions
) -> None:
    t = transport(lab, "h0", ssh_options)
    root = lab.hosts["h0"].root
    (root / "lock").write_text("held")
    t.put(f"{root}/copy.json", b"{}\n", then=["rm", "-f", f"{root}/lock"])
    assert (root / "copy.json").read_bytes() == b"{}\n" and not (root / "lock").exists()
    (root / "lock").write_text("held")
    (root / "plain").write_text("a file, not a directory")
    with pytest.raises(HostError):  # the write cannot happen under a file; the command after it still runs
        t.put(f"{root}/plain/copy.json", b"x", then=["rm", "-f", f"{root}/lock"])
    assert not (root / "lock").exists()


def test_a_dropped_connection_is_connection_lost_and_a_retry_reconnects(lab: SshLab, ssh_options: SshOptions) -> None:
    from specctl.errors import ConnectionLost

    host = lab.hosts["h2"]
    t = transport(lab, "h2", ssh_options)
    assert t.run(["true"]).rc == 0
    killer = threading.Timer(0.5, lambda: lab.kill_sshd(host))
    killer.start()
    try:
        with pytest.raises(ConnectionLost) as info:  # not "exited -1": nobody knows whether it ran
            t.run(["sleep", "10"])
        assert "connection broke" in info.value.message and info.value.exit_code == 3
        lab.start_sshd(host)
        assert t.run(["echo", "back"], retry=True).stdout == "back\n"  # a fresh connection
    finally:
        killer.join()
        if not host.alive():
            lab.start_sshd(host)


def test_a_connection_down_for_good_fails_the_retry(lab: SshLab, ssh_options: SshOptions) -> None:
    from specctl.errors import ConnectionLost

    host = lab.hosts["h2"]
    t = transport(lab, "h2", ssh_options)
    assert t.run(["true"]).rc == 0
    lab.kill_sshd(host)
    try:
        with pytest.raises(ConnectionLost) as info:
            t.run(["true"], retry=True)
        assert "cannot connect" in info.value.message
    finally:
        lab.start_sshd(host)


@pytest.fixture
def own_bashrc(lab: SshLab) -> Iterator[tuple[Path, Path]]:
    """h1's login-shell start-up file, to write for one test (restored after), and a file it counts its runs in."""
    host = lab.hosts["h1"]
    if host.bashrc is None:
        pytest.skip("a host's own ~/.bashrc needs a mount namespace of its own")
    before = host.bashrc.read_text()
    logins = host.root / "logins"
    logins.unlink(missing_ok=True)
    try:
        yield host.bashrc, logins
    finally:
        host.bashrc.write_text(before)  # in place: the host sees this file through a bind mount


def test_one_login_shell_per_connection_whatever_it_prints(
    lab: SshLab, ssh_options: SshOptions, own_bashrc: tuple[Path, Path]
) -> None:
    """Commands run in one shell per connection: the login shell's start-up file runs once, and what
    it prints (a banner, a conda notice) never reaches a command's output."""
    bashrc, logins = own_bashrc
    bashrc.write_text(f'echo login >>{logins}; echo "Welcome to h1"; echo "conda: notice" >&2\n')
    t = transport(lab, "h1", ssh_options)
    assert t.run(["printf", "x"]).out == b"x"
    assert [d.out for d in t.run_all([["echo", "a"], ["echo", "b"]])] == [b"a\n", b"b\n"]
    path = f"{lab.hosts['h1'].root}/blob"
    t.put(path, bytes(range(256)))
    assert t.read(path) == bytes(range(256))
    for _ in range(5):
        t.run(["true"])
    assert logins.read_text() == "login\n"


def test_a_host_that_will_not_keep_a_shell_gets_a_channel_per_command(
    lab: SshLab, ssh_options: SshOptions, own_bashrc: tuple[Path, Path]
) -> None:
    bashrc, logins = own_bashrc
    bashrc.write_text(f'echo login >>{logins}; case "$BASH_EXECUTION_STRING" in *specctl-shell*) exit 0;; esac\n')
    t = transport(lab, "h1", ssh_options)
    assert t.run(["echo", "still"]).stdout == "still\n"
    assert t.run(["sh", "-c", "exit 5"], check=False).rc == 5
    assert logins.read_text().count("login") == 3  # the refused shell, then one login per command


def test_unread_stdin_and_a_timeout_leave_the_shell_in_step(lab: SshLab, ssh_options: SshOptions) -> None:
    t = transport(lab, "h0", ssh_options)
    assert t.run(["true"], stdin=b"x" * 300_000).rc == 0  # the rest of its stdin is drained, not read as a command
    assert t.run(["cat"], stdin=b"abc").out == b"abc"
    pidfile = f"{lab.hosts['h0'].root}/slow.pid"
    done = t.run(["sh", "-c", f"echo $$ >{pidfile}; echo started; sleep 30"], timeout_s=1, check=False)
    assert (done.rc, done.out) == (124, b"started\n")  # what it wrote before its time was up comes back
    assert t.run(["echo", "next"]).stdout == "next\n"
    time.sleep(0.5)
    running = f'p=$(cat {pidfile}); [ -d /proc/$p ] && ! grep -q "^State:.Z" /proc/$p/status'  # a zombie is stopped
    assert t.run(["sh", "-c", running], check=False).rc != 0  # stopped on the host


def test_a_full_tmp_on_the_host_is_no_space_never_an_empty_answer(lab: SshLab, ssh_options: SshOptions) -> None:
    """The file system under the connection's shell fills up: a command's output cannot be kept, so its
    result is an error naming the place with no space (the command ran), not an empty output nor a lost
    link. The lab fills a small tmpfs mounted over the shell's own directory, in h2's mount namespace."""
    if not lab.use_namespaces or os.geteuid() != 0:
        pytest.skip("a file system of its own needs root and the host's own mount namespace")
    t = transport(lab, "h2", ssh_options)
    own = posixpath.dirname(t.run(["sh", "-c", "readlink /proc/$$/fd/1"]).stdout.strip())  # where its output goes
    assert own.startswith("/tmp/")
    admin = transport(lab, "h2", ssh_options)
    admin.stream(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", own], print, timeout_s=30)
    try:
        assert t.run(["echo", "before"]).stdout == "before\n"
        fill = f"dd if=/dev/zero of={own}/filler bs=4k count=100 2>/dev/null; true"
        admin.stream(["sh", "-c", fill], print, timeout_s=30)  # on a channel: no shell directory involved
        with pytest.raises(HostError, match=r"h2: no space left on /tmp: .* ran \(exit \d+\)") as raised:
            t.run(["echo", "the run ids a stop printed"])
        assert "free space in /tmp" in (raised.value.fix or "")
        assert t.run(["echo", "after"]).stdout == "after\n"  # a new shell, in a directory with room
    finally:
        admin.stream(["umount", "-l", own], print, timeout_s=30)
