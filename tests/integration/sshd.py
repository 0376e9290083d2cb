"""Real OpenSSH servers for the tests: one per host, each in its own network namespace with its own
address on a veth pair (or, where namespaces cannot be made, on its own loopback port).

Keys, authorized_keys, known_hosts and an ssh_config are generated per run; nothing touches the
user's ~/.ssh. Teardown (`SshLab.stop`, also registered with atexit as a last resort, and safe to
run again) kills every sshd it started, every process inside its namespaces (the hosts' servers and
sessions; the mounts of a host live in its sshd's mount namespace and go with them) and every server
a test left under the hosts' roots, then removes every namespace and link it made.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests._hygiene import kill_servers

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def namespaces_work() -> bool:
    if os.geteuid() != 0 or not shutil.which("ip"):
        return False
    probe = f"specctl-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "del", probe)
        return True
    except (subprocess.CalledProcessError, OSError):
        return False


def wire_namespace(ns: str, outside: str, inside: str, subnet: str) -> None:
    """A veth pair into namespace `ns`: `<subnet>.1` on this machine's side, `<subnet>.2` inside, and a
    default route through this machine, so namespaces reach each other (multi-node rendezvous)."""
    _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
    _run("ip", "link", "set", inside, "netns", ns)
    _run("ip", "addr", "add", f"{subnet}.1/24", "dev", outside)
    _run("ip", "link", "set", outside, "up")
    _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{subnet}.2/24", "dev", inside)
    _run("ip", "netns", "exec", ns, "ip", "link", "set", inside, "up")
    _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    _run("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", f"{subnet}.1")
    _run("sysctl", "-qw", "net.ipv4.ip_forward=1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SshHost:
    name: str
    address: str
    port: int
    root: Path  # the host's state directory (hosts share this machine's filesystem)
    namespace: str | None
    process: subprocess.Popen[bytes] | None = None
    host_key_pub: str = ""
    # in a namespace: the login shell's ~/.bashrc, this host's own (bind-mounted in its mount namespace),
    # so the hosts do not read this machine's (whose pyenv init takes one lock in one shared ~/.pyenv)
    bashrc: Path | None = None
    # in a namespace: file systems only this host sees, path -> tmpfs size ("4m"): a disk of its own
    tmpfs: dict[str, str] = field(default_factory=dict)
    # in a namespace: files this host sees in place of this machine's, target path -> the file shown there
    binds: dict[str, str] = field(default_factory=dict)
    hostname: str | None = None  # a UTS namespace with this hostname (None: this machine's)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _free_octet() -> int:
    """A second octet x in 100..199 such that this machine has no address in 10.x.0.0/16 (another lab's)."""
    used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    first = os.getpid() % 100
    for k in range(100):
        octet = 100 + (first + k) % 100
        if f" 10.{octet}." not in used:
            return octet
    raise RuntimeError("no free 10.x subnet for the SSH lab")


def _remove_stale(namespace: str, link: str, subnet: str) -> None:
    """What a killed earlier run left with this run's names or subnet (a reused pid)."""
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
    subprocess.run(["ip", "link", "del", link], capture_output=True)
    for line in subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout.splitlines():
        if f" {subnet}.1/24 " in line:
            subprocess.run(["ip", "link", "del", line.split()[1]], capture_output=True)


@dataclass
class SshLab:
    """A set of sshd hosts plus the client-side files that reach them."""

    workdir: Path
    use_namespaces: bool
    hosts: dict[str, SshHost] = field(default_factory=dict)
    user_key: Path = Path()
    ssh_config: Path = Path()
    known_hosts: Path = Path()
    # in the names of its namespaces and links: this process, so concurrent runs never share one
    tag: str = field(default_factory=lambda: str(os.getpid()))
    # the second octet of the hosts' 10.x.y.0/24 subnets (None: one this machine does not use yet);
    # a second lab in one run needs its own (and its own tag)
    octet: int | None = None
    # each host a machine of its own: its own /etc/machine-id and hostname (what a state root's
    # identity is read from); off, every host is this machine, as the labs' other tests expect
    own_machines: bool = False
    # a home directory every host's sessions have as $HOME (one NFS home shared by several machines):
    # where specctl's default state roots live (None: the login user's real home)
    home: Path | None = None

    def start(self, count: int) -> None:
        atexit.register(self.stop)  # the last resort, should a teardown be cut short
        if self.use_namespaces and self.octet is None:
            self.octet = _free_octet()
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.home is not None:
            self.home.mkdir(parents=True, exist_ok=True)
        self.user_key = self.workdir / "id_ed25519"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.user_key))
        (self.workdir / "authorized_keys").write_text((self.workdir / "id_ed25519.pub").read_text())
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            self._add(f"h{i}", i)
        self.write_client_files()

    def add_host(self, name: str, *, port: int = 22, tmpfs: dict[str, str] | None = None) -> SshHost:
        """One more host after start(), its sshd on `port` (namespaces only), in the client files too;
        `tmpfs`: paths where it has a small file system of its own that no other host sees."""
        assert self.use_namespaces or (port == 22 and not tmpfs), "without namespaces hosts share everything"
        self._add(name, len(self.hosts), port, tmpfs or {})
        self.write_client_files()
        return self.hosts[name]

    def gateway(self, name: str) -> str:
        """This machine's address on a namespaced host's link: where the host reaches a server the tests run."""
        host = self.hosts[name]
        assert host.namespace is not None, "without namespaces the hosts are this machine: use 127.0.0.1"
        return host.address.rsplit(".", 1)[0] + ".1"

    def only_from(self, host: SshHost, *allowed: SshHost) -> None:
        """Drop packets to the host's sshd unless they come from `allowed` (none: from anywhere), so
        it is reached only through them. An nftables table in the host's namespace, gone with it."""
        assert host.namespace is not None, "a firewall of its own needs a namespace of its own"
        rule = (
            f"tcp dport {host.port} drop"
            if not allowed
            else f"tcp dport {host.port} ip saddr != {{ {', '.join(h.address for h in allowed)} }} drop"
        )
        script = (
            f"table inet specctl_lab {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n"
            f"    {rule}\n  }}\n}}\n"
        )
        subprocess.run(
            ["ip", "netns", "exec", host.namespace, "nft", "-f", "-"],
            input=script.encode(),
            check=True,
            capture_output=True,
        )

    def _add(self, name: str, index: int, port: int = 22, tmpfs: dict[str, str] | None = None) -> None:
        hostdir = self.workdir / name
        hostdir.mkdir()
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostdir / "host_key"))
        if self.use_namespaces:
            ns, outside, inside = f"sc{self.tag}h{index}", f"sc{self.tag}h{index}a", f"sc{self.tag}h{index}b"
            assert self.octet is not None
            subnet = f"10.{self.octet}.{index + 10}"  # per run, so concurrent runs never collide
            _remove_stale(ns, outside, subnet)
            _run("ip", "netns", "add", ns)
            wire_namespace(ns, outside, inside, subnet)
            (hostdir / "bashrc").write_text("# this host's own login-shell start-up file\n")
            binds = {}
            if self.own_machines:
                (hostdir / "machine-id").write_text(secrets.token_hex(16) + "\n")
                binds["/etc/machine-id"] = str(hostdir / "machine-id")
            host = SshHost(
                name,
                f"{subnet}.2",
                port,
                hostdir / "root",
                ns,
                bashrc=hostdir / "bashrc",
                tmpfs=dict(tmpfs or {}),
                binds=binds,
                hostname=name if self.own_machines else None,
            )
        else:
            host = SshHost(name, "127.0.0.1", _free_port(), hostdir / "root", None)
        host.root.mkdir()
        host.host_key_pub = (hostdir / "host_key.pub").read_text().split()[1]
        (hostdir / "sshd_config").write_text(
            "\n".join(
                [
                    f"Port {host.port}",
                    f"ListenAddress {host.address}",
                    f"HostKey {hostdir / 'host_key'}",
                    f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
                    f"PidFile {hostdir / 'sshd.pid'}",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "AllowTcpForwarding yes",
                    "MaxStartups 100",
                    "LogLevel ERROR",
                    *([f"SetEnv HOME={self.home}"] if self.home is not None else []),
                    "",
                ]
            )
        )
        self.hosts[name] = host
        self.start_sshd(host)

    def start_sshd(self, host: SshHost) -> None:
        argv = [SSHD, "-D", "-e", "-f", str(self.workdir / host.name / "sshd_config")]
        if host.namespace:
            assert host.bashrc is not None
            mounts = "".join(
                f"mkdir -p {shlex.quote(path)} && mount -t tmpfs -o size={size} tmpfs {shlex.quote(path)} || exit 1; "
                for path, size in host.tmpfs.items()
            )
            mounts += "".join(
                f"mount --bind {shlex.quote(source)} {shlex.quote(target)} || exit 1; "
                for target, source in host.binds.items()
            )
            own = (
                mounts
                + 'if [ -e "$HOME/.bashrc" ]; then mount --bind "$1" "$HOME/.bashrc" || exit 1; fi; shift; exec "$@"'
            )
            prefix = ["ip", "netns", "exec", host.namespace]
            if host.hostname:  # in a UTS namespace of its own
                own = f"hostname {shlex.quote(host.hostname)} || exit 1; " + own
                prefix += ["unshare", "--uts"]
            argv = [*prefix, "sh", "-c", own, "sh", str(host.bashrc), *argv]
        host.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection((host.address, host.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline or host.process.poll() is not None:
                    raise RuntimeError(f"sshd for {host.name} did not start") from None
                time.sleep(0.05)

    def stop_sshd(self, host: SshHost) -> None:
        if host.process is not None and host.process.poll() is None:
            host.process.terminate()
            try:
                host.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                host.process.kill()
                host.process.wait(timeout=10)

    def kill_sshd(self, host: SshHost) -> None:
        """The host's sshd and every connection it serves, as a crash would: the listener this lab
        started, then the per-connection sshd processes inside the host's own namespace, by pid."""
        self.stop_sshd(host)
        assert host.namespace is not None, "connections can be told apart only inside a host's namespace"
        pids = subprocess.run(["ip", "netns", "pids", host.namespace], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                continue
            if os.path.basename(exe) in ("sshd", "sshd-session", "sshd-auth"):
                subprocess.run(["kill", "-KILL", pid], capture_output=True)

    def known_hosts_line(self, host: SshHost, key_b64: str | None = None) -> str:
        where = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        return f"{where} ssh-ed25519 {key_b64 or host.host_key_pub}\n"

    def write_client_files(self, known: list[str] | None = None) -> None:
        self.known_hosts = self.workdir / "known_hosts"
        self.known_hosts.write_text(
            "".join(self.known_hosts_line(h) for h in self.hosts.values() if known is None or h.name in known)
        )
        self.ssh_config = self.workdir / "ssh_config"
        self.ssh_config.write_text(
            "".join(
                f"Host {h.name}\n  HostName {h.address}\n  Port {h.port}\n  User root\n  IdentityFile {self.user_key}\n"
                f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n\n"
                for h in self.hosts.values()
            )
        )

    def inventory(self, path: Path, python: str) -> Path:
        lines = ["apiVersion: specctl/v1", "kind: Inventory", "hosts:"]
        for h in self.hosts.values():
            lines += [f"  {h.name}:", f"    ssh: {h.name}", f"    root: {h.root}", f"    python: {python}"]
        lines += ["groups:", "  all: [" + ", ".join(self.hosts) + "]", ""]
        path.write_text("\n".join(lines))
        return path

    def stop(self) -> None:
        """Everything the lab started and made, gone; safe to call again (atexit does), or after a failed start."""
        for host in self.hosts.values():
            try:
                self.stop_sshd(host)
            except (OSError, subprocess.SubprocessError):
                pass  # it is killed with its namespace below
            kill_servers(host.root)  # servers a test left running: their process groups
            if host.namespace:  # anything still inside would keep the namespace, its link and its address alive
                _empty_namespace(host.namespace)
                subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        if self.use_namespaces:
            for i in range(len(self.hosts)):
                subprocess.run(["ip", "link", "del", f"sc{self.tag}h{i}a"], capture_output=True)
        atexit.unregister(self.stop)


def _empty_namespace(namespace: str) -> None:
    """Every process inside the namespace (all of them the lab's: its sshd, its sessions, their servers) killed."""
    for _ in range(50):
        done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
        pids = [int(p) for p in done.stdout.split()]
        if done.returncode != 0 or not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
