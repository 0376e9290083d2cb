"""The ssh_config routes against real OpenSSH servers: ProxyJump chains (aliases and `user@host:port`
hops), ProxyCommand, ConnectTimeout, and host keys checked on every jump host.

The lab here is its own: bastions b1 (sshd on port 2222) and b2, and an `inner` host. A firewall in
b2's namespace drops what does not come from b1, and one in inner's drops what does not come from
b2, so inner is reached only through b1 then b2, in that order, as `ssh -J b1,b2` would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from specctl.errors import ConnectionLost, HostError, InputError
from specctl.hosts import _ssh_runner
from specctl.hosts._ssh_runner import SshRunner
from specctl.hosts.ssh_destination import SshOptions, resolve
from specctl.hosts.transport import Transport
from tests.integration.sshd import SshHost, SshLab, namespaces_work

CHAIN = "Host deep\n  HostName {inner}\n  ProxyJump b1,b2\n\n"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (make test installs openssh-server and nftables when run as root)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def jumplab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    if not Path("/usr/sbin/sshd").exists() or not shutil.which("nft"):
        _unavailable("openssh-server or nftables is not installed")
    if not namespaces_work():
        _unavailable("network namespaces are not available (run as root)")
    # its own tag and subnets: the session's lab (conftest.py) may be running beside it
    lab = SshLab(tmp_path_factory.mktemp("jumplab"), True, tag=f"{os.getpid() % 10000}j", octet=200 + os.getpid() % 50)
    try:
        lab.start(0)
        b1 = lab.add_host("b1", port=2222)
        b2 = lab.add_host("b2")
        inner = lab.add_host("inner")
        lab.only_from(b2, b1)
        lab.only_from(inner, b2)
        yield lab
    finally:
        lab.stop()


def hosts(lab: SshLab) -> tuple[SshHost, SshHost, SshHost]:
    return lab.hosts["b1"], lab.hosts["b2"], lab.hosts["inner"]


def options(
    lab: SshLab,
    tmp_path: Path,
    blocks: str = "",
    *,
    known: Path | None = None,
    accept: bool = False,
    timeout_s: float = 5,
) -> SshOptions:
    """The lab's ssh_config with `blocks` first and defaults for any other name last (first value wins)."""
    known = known or lab.known_hosts
    path = tmp_path / "ssh_config"
    path.write_text(
        blocks
        + lab.ssh_config.read_text().replace(str(lab.known_hosts), str(known))
        + f"Host *\n  User root\n  IdentityFile {lab.user_key}\n  UserKnownHostsFile {known}\n"
    )
    return SshOptions(config_path=str(path), accept_new_host_key=accept, connect_timeout_s=timeout_s)


@contextmanager
def reach(name: str, opts: SshOptions) -> Iterator[Transport]:
    """A transport to `name` whose connections (jump hosts and ProxyCommands too) are closed after."""
    runner = SshRunner(resolve(name, opts), opts)
    try:
        yield Transport(name, runner.destination.hostname, runner)
    finally:
        runner.close()


def client_address(t: Transport) -> str:
    """The address the host saw the SSH connection come from: the last hop before it."""
    return t.run(["sh", "-c", 'echo "${SSH_CONNECTION%% *}"']).stdout.strip()


def children(name: str) -> list[int]:
    """Pids of this process's children called `name`, zombies included."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if comm == name and int(rest[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


def test_proxyjump_hops_are_resolved_in_order_with_their_own_config(jumplab: SshLab, tmp_path: Path) -> None:
    b1, b2, inner = hosts(jumplab)
    opts = options(
        jumplab,
        tmp_path,
        CHAIN.format(inner=inner.address)
        + f"Host mixed\n  HostName {inner.address}\n  ProxyJump bob@b1:2200,b2\n  ConnectTimeout 3\n\n",
    )
    route = resolve("deep", opts).route()
    assert [(h.alias, h.hostname, h.port, h.user) for h in route] == [
        ("b1", b1.address, 2222, "root"),
        ("b2", b2.address, 22, "root"),
        ("deep", inner.address, 22, "root"),
    ]
    assert all(
        h.known_hosts == (str(jumplab.known_hosts),) and h.identity_files == (str(jumplab.user_key),) for h in route
    )
    mixed = resolve("mixed", opts)
    assert (mixed.jumps[0].user, mixed.jumps[0].port, mixed.jumps[0].hostname) == ("bob", 2200, b1.address)
    assert (mixed.connect_timeout_s, mixed.jumps[0].connect_timeout_s) == (3.0, None)
    # the inventory's explicit fields win over the ssh_config, proxy_jump included
    explicit = resolve("box", opts, {"hostname": inner.address, "user": "admin", "port": 2200, "proxy_jump": "b2"})
    assert [(h.alias, h.hostname, h.port, h.user) for h in explicit.route()] == [
        ("b2", b2.address, 22, "root"),
        ("box", inner.address, 2200, "admin"),
    ]


def test_two_jump_hosts_reach_a_host_hidden_behind_them(
    jumplab: SshLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b1, b2, inner = hosts(jumplab)
    opts = options(jumplab, tmp_path, CHAIN.format(inner=inner.address))
    with reach("deep", opts) as t:
        assert client_address(t) == b2.address  # b1 first, then b2, then inner
        path = f"{inner.root}/through-two-hops.bin"
        data = bytes(range(256)) * 64
        t.put(path, data)
        assert t.read(path) == data
        done = t.run(["sh", "-c", 'printf %s "$SECRET"'], env={"SECRET": "s3cr3t 'with' $quotes"})
        assert done.stdout == "s3cr3t 'with' $quotes"  # over the stdin channel, through both hops
    monkeypatch.setattr(_ssh_runner, "CONNECT_ATTEMPTS", 1)
    quick = options(jumplab, tmp_path, timeout_s=1)
    for name in ("inner", "b2"):  # neither is reachable without its jump hosts
        with pytest.raises(HostError, match="cannot connect"), reach(name, quick) as t:
            t.run(["true"])


def test_inventory_fields_route_through_the_jump_hosts(jumplab: SshLab, tmp_path: Path) -> None:
    _, b2, inner = hosts(jumplab)
    opts = options(jumplab, tmp_path)
    target = resolve(
        "gpu-box",
        opts,
        {"hostname": inner.address, "user": "root", "identity_file": str(jumplab.user_key), "proxy_jump": "b1,b2"},
    )
    runner = SshRunner(target, opts)
    try:
        assert client_address(Transport("gpu-box", inner.address, runner)) == b2.address
    finally:
        runner.close()


def test_a_user_at_host_port_hop(jumplab: SshLab, tmp_path: Path) -> None:
    b1, b2, _ = hosts(jumplab)
    # the hop's own user and port win over its Host block, whose values would fail
    blocks = (
        f"Host {b1.address}\n  User nosuchuser\n  Port 22\n\n"
        f"Host by-address\n  HostName {b2.address}\n  ProxyJump root@{b1.address}:2222\n\n"
    )
    with reach("by-address", options(jumplab, tmp_path, blocks)) as t:
        assert client_address(t) == b1.address


def test_a_proxycommand(jumplab: SshLab, tmp_path: Path) -> None:
    if not shutil.which("ssh"):
        _unavailable("the OpenSSH client is not installed")
    b1, b2, _ = hosts(jumplab)
    blocks = (
        f"Host by-command\n  HostName {b2.address}\n"
        f"  ProxyCommand ssh -F {jumplab.ssh_config} -o BatchMode=yes -W %h:%p b1\n\n"
    )
    before = set(children("ssh"))
    with reach("by-command", options(jumplab, tmp_path, blocks)) as t:
        assert client_address(t) == b1.address
        assert t.run(["echo", "over a ProxyCommand"]).stdout == "over a ProxyCommand\n"
        assert len(set(children("ssh")) - before) == 1
    assert set(children("ssh")) - before == set()  # the proxy was stopped and reaped


def test_connect_timeout_from_the_ssh_config_is_honoured(
    jumplab: SshLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, inner = hosts(jumplab)
    monkeypatch.setattr(_ssh_runner, "CONNECT_ATTEMPTS", 1)
    blocks = (
        f"Host dropped\n  HostName {inner.address}\n  ConnectTimeout 1\n\n"  # inner drops what is not from b2
        f"Host dropped-behind-b1\n  HostName {inner.address}\n  ConnectTimeout 1\n  ProxyJump b1\n\n"
    )
    opts = options(jumplab, tmp_path, blocks, timeout_s=30)  # so only ConnectTimeout can end it early
    for name, where in (
        ("dropped", f"cannot connect to {inner.address}:22 after 1 attempts"),
        ("dropped-behind-b1", f"through b1 after 1 attempts: from b1 to {inner.address}:22"),
    ):
        start = time.monotonic()
        with pytest.raises(HostError) as info, reach(name, opts) as t:
            t.run(["true"])
        elapsed = time.monotonic() - start
        assert 0.9 < elapsed < 15, (name, elapsed)  # ConnectTimeout 1 ended it, not the 30 s budget
        assert where in info.value.message and info.value.exit_code == 3


def test_a_jump_host_that_is_down_is_named(jumplab: SshLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b1, _, inner = hosts(jumplab)
    monkeypatch.setattr(_ssh_runner, "CONNECT_ATTEMPTS", 1)
    blocks = (
        f"Host b1-down\n  HostName {b1.address}\n  Port 1\n\n"
        f"Host deep-down\n  HostName {inner.address}\n  ProxyJump b1-down,b2\n\n"
    )
    with pytest.raises(HostError) as info, reach("deep-down", options(jumplab, tmp_path, blocks)) as t:
        t.run(["true"])
    assert info.value.message.startswith(
        f"deep-down: cannot connect to {inner.address}:22 through b1-down -> b2 after 1 attempts: "
    )
    assert f"jump host b1-down ({b1.address}:1)" in info.value.message and "and its jump hosts" in (
        info.value.fix or ""
    )


def test_a_jump_host_going_down_mid_command_is_connection_lost(jumplab: SshLab, tmp_path: Path) -> None:
    b1, _, inner = hosts(jumplab)
    with reach("deep", options(jumplab, tmp_path, CHAIN.format(inner=inner.address))) as t:
        assert t.run(["true"]).rc == 0
        try:
            jumplab.kill_sshd(b1)
            # lost mid-command, or found lost when the command is sent (the tunnel's end is seen first):
            # either way ConnectionLost, nobody knows whether it ran
            with pytest.raises(ConnectionLost, match="connection broke|cannot connect .* through b1"):
                t.run(["sleep", "5"])
            jumplab.start_sshd(b1)
            assert t.run(["echo", "back"], retry=True).stdout == "back\n"  # the whole chain again
        finally:
            if not b1.alive():
                jumplab.start_sshd(b1)


def _known_hosts(lab: SshLab, tmp_path: Path, *, change: str | None = None, drop: str | None = None) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[1]
    known = tmp_path / "known_hosts"
    known.write_text(
        "".join(
            lab.known_hosts_line(h, other if h.name == change else None) for h in lab.hosts.values() if h.name != drop
        )
    )
    return known


@pytest.mark.parametrize("hop", ["b1", "b2"])
def test_a_changed_key_on_a_jump_host_is_always_refused(jumplab: SshLab, tmp_path: Path, hop: str) -> None:
    known = _known_hosts(jumplab, tmp_path, change=hop)
    before = known.read_text()
    for accept in (False, True):
        opts = options(
            jumplab, tmp_path, CHAIN.format(inner=jumplab.hosts["inner"].address), known=known, accept=accept
        )
        with pytest.raises(HostError) as info, reach("deep", opts) as t:
            t.run(["true"])
        message = info.value.message
        assert message.startswith("deep: the host key CHANGED for jump host " + hop), message
        assert message.count("SHA256:") == 2 and info.value.exit_code == 3 and info.value.host == "deep"
    assert known.read_text() == before


@pytest.mark.parametrize("hop", ["b1", "b2"])
def test_an_unknown_key_on_a_jump_host_is_refused_unless_accepted(jumplab: SshLab, tmp_path: Path, hop: str) -> None:
    known = _known_hosts(jumplab, tmp_path, drop=hop)
    blocks = CHAIN.format(inner=jumplab.hosts["inner"].address)
    with pytest.raises(HostError) as info, reach("deep", options(jumplab, tmp_path, blocks, known=known)) as t:
        t.run(["true"])
    assert (
        "unknown host key ssh-ed25519 SHA256:" in info.value.message and f"for jump host {hop} (" in info.value.message
    )
    with reach("deep", options(jumplab, tmp_path, blocks, known=known, accept=True)) as t:
        assert t.run(["true"]).rc == 0
    assert jumplab.hosts[hop].host_key_pub in known.read_text()
    with reach("deep", options(jumplab, tmp_path, blocks, known=known)) as t:
        assert t.run(["true"]).rc == 0  # now known


def test_a_missing_ssh_config_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        resolve("anything", SshOptions(config_path=str(tmp_path / "nope")))
