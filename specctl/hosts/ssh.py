"""SSH hosts through paramiko, the way the user's own `ssh` would reach them.

Honours `~/.ssh/config` (Host aliases, HostName, User, Port, IdentityFile, ProxyJump,
UserKnownHostsFile), the SSH agent and known_hosts. An unknown host key is refused unless the
caller accepts new keys (then it is added to known_hosts); a changed key is always refused, with
both fingerprints. Connecting is retried with backoff; commands are not.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shlex
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import paramiko

from specctl.errors import ConnectionLost, HostError
from specctl.hosts.transport import Completed, Transport

CONNECT_TIMEOUT_S = 10.0
CONNECT_ATTEMPTS = 4
BACKOFF_S = 0.5
# Export NAME=base64(value) lines from stdin, then exec the command: secrets never appear in an argv.
_ENV_WRAPPER = ('while IFS= read -r line; do name=${line%%=*}; value=$(printf %s "${line#*=}" | base64 -d) || exit 97; '
                'export "$name=$value"; done; exec "$@"')


@dataclass(frozen=True)
class SshTarget:
    """Where and how to connect, after ~/.ssh/config is applied."""

    alias: str
    hostname: str
    port: int = 22
    user: str | None = None
    identity_files: tuple[str, ...] = ()
    proxy_jump: str | None = None
    known_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class SshOptions:
    """How strict to be, and where the user's SSH files are."""

    config_path: str | None = None  # default ~/.ssh/config
    accept_new_host_key: bool = False
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    extra: Mapping[str, Any] = field(default_factory=dict)


def resolve(alias: str, options: SshOptions, overrides: Mapping[str, Any] | None = None) -> SshTarget:
    """Apply ~/.ssh/config to an alias (or hostname), then the inventory's explicit fields."""
    config = paramiko.SSHConfig()
    path = Path(options.config_path or Path.home() / ".ssh" / "config").expanduser()
    if path.exists():
        config = paramiko.SSHConfig.from_path(str(path))
    entry = config.lookup(alias)
    o = dict(overrides or {})
    known = entry.get("userknownhostsfile", "~/.ssh/known_hosts").split()
    return SshTarget(
        alias=alias, hostname=o.get("hostname") or entry.get("hostname", alias),
        port=int(o.get("port") or entry.get("port", 22)), user=o.get("user") or entry.get("user"),
        identity_files=tuple(os.path.expanduser(p) for p in ([o["identity_file"]] if o.get("identity_file") else entry.get("identityfile", []))),
        proxy_jump=o.get("proxy_jump") or entry.get("proxyjump"),
        known_hosts=tuple(os.path.expanduser(p) for p in known),
    )


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """Unknown key: refuse, or record it when the user said --accept-new-host-key."""

    def __init__(self, target: SshTarget, accept_new: bool) -> None:
        self.target = target
        self.accept_new = accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise HostError(f"{self.target.alias}: unknown host key {key.get_name()} {fingerprint(key)} for {hostname}",
                            host=self.target.alias,
                            fix="verify the fingerprint, then add it to known_hosts (ssh-keyscan) or pass --accept-new-host-key")
        client.get_host_keys().add(hostname, key.get_name(), key)
        path = Path(self.target.known_hosts[0] if self.target.known_hosts else "~/.ssh/known_hosts").expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class SshRunner:
    """Runs argv on one host over a lazily opened, reused connection."""

    def __init__(self, target: SshTarget, options: SshOptions) -> None:
        self.target = target
        self.options = options
        self._client: paramiko.SSHClient | None = None
        self._jump: SshRunner | None = None
        self._was_connected = False

    def _connect_once(self) -> paramiko.SSHClient:
        t = self.target
        client = paramiko.SSHClient()
        for path in t.known_hosts:
            if Path(path).exists():
                client.load_host_keys(path)  # also where accepted keys are saved by paramiko's own save()
        client.set_missing_host_key_policy(_KnownHostsPolicy(t, self.options.accept_new_host_key))
        sock = None
        if t.proxy_jump:
            self._jump = SshRunner(resolve(t.proxy_jump, self.options), self.options)
            transport = self._jump.client().get_transport()
            assert transport is not None
            sock = transport.open_channel("direct-tcpip", (t.hostname, t.port), ("127.0.0.1", 0),
                                          timeout=self.options.connect_timeout_s)
        try:
            client.connect(t.hostname, port=t.port, username=t.user, key_filename=list(t.identity_files) or None,
                           timeout=self.options.connect_timeout_s, banner_timeout=self.options.connect_timeout_s,
                           auth_timeout=self.options.connect_timeout_s, sock=sock, allow_agent=True, look_for_keys=True)
        except paramiko.BadHostKeyException as exc:
            raise HostError(
                f"{t.alias}: the host key CHANGED for {exc.hostname}: expected {fingerprint(exc.expected_key)}, "
                f"got {fingerprint(exc.key)}", host=t.alias,
                fix="if the host was really reinstalled, remove the old key (ssh-keygen -R) after verifying the new one; "
                    "specctl never accepts a changed key") from None
        except paramiko.AuthenticationException as exc:
            raise HostError(f"{t.alias}: authentication failed as {t.user or 'the default user'}: {exc}", host=t.alias,
                            fix="check User and IdentityFile in ~/.ssh/config, or load the key into ssh-agent") from None
        return client

    def client(self) -> paramiko.SSHClient:
        current = self._client.get_transport() if self._client is not None else None
        if current is not None and current.is_active():
            assert self._client is not None
            return self._client
        delay = BACKOFF_S
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                self._client = self._connect_once()
                self._was_connected = True
                return self._client
            except HostError:
                raise  # host keys and authentication are answers, not transient failures
            except (OSError, socket.timeout, paramiko.SSHException, EOFError) as exc:
                if attempt == CONNECT_ATTEMPTS:
                    error = ConnectionLost if self._was_connected else HostError  # lost and not back, or never there
                    raise error(f"{self.target.alias}: cannot connect to {self.target.hostname}:{self.target.port} "
                                    f"after {attempt} attempts: {exc or type(exc).__name__}", host=self.target.alias,
                                    fix="check that the host is up and sshd listens there (ssh -v " f"{self.target.alias})") from None
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def __call__(self, argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None,
                 stdin: bytes | None) -> Completed:
        if env:
            if stdin is not None:
                raise ValueError("env and stdin cannot both be sent")
            argv = ["sh", "-c", _ENV_WRAPPER, "sh", *argv]
            stdin = "".join(f"{k}={base64.b64encode(v.encode()).decode()}\n" for k, v in env.items()).encode()
        client = self.client()
        transport = client.get_transport()
        assert transport is not None
        command = shlex.join(argv)
        try:
            channel = transport.open_session(timeout=self.options.connect_timeout_s)
            channel.settimeout(1.0)
            channel.exec_command(command)
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout_s
            while True:
                if channel.recv_ready():
                    out += channel.recv(65536)
                elif channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                elif channel.exit_status_ready() and not channel.recv_ready() and not channel.recv_stderr_ready():
                    break
                elif time.monotonic() > deadline:
                    channel.close()
                    return Completed(124, bytes(out), f"timed out after {timeout_s:.0f} s")
                elif transport.is_active():
                    time.sleep(0.01)
                else:
                    break
        except (paramiko.SSHException, OSError, EOFError) as exc:
            self._lost(command, exc)
        if channel.exit_status == -1 and _dies(transport):  # closed without an exit status: the connection broke
            self._lost(command, None)
        code = channel.recv_exit_status()
        channel.close()
        return Completed(code, bytes(out), err.decode(errors="replace") or ("" if code != -1 else "killed by a signal"))

    def _lost(self, command: str, exc: BaseException | None) -> NoReturn:
        """Forget the broken connection (the next command opens a new one) and say what was running."""
        if self._client is not None:
            self._client.close()
        self._client = None
        cause = f": {exc}" if exc else ""
        raise ConnectionLost(f"{self.target.alias}: the connection broke during `{command[:80]}`{cause}", host=self.target.alias,
                             fix="check the host and the network; `specctl status` shows what runs there once it answers")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._jump is not None:
            self._jump.close()


def _dies(transport: paramiko.Transport, within_s: float = 2.0) -> bool:
    """Whether the connection is going down: paramiko closes the channels just before it marks the
    transport inactive, so a channel without an exit status is followed by this within moments."""
    deadline = time.monotonic() + within_s
    while transport.is_active():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def ssh_transport(name: str, target: SshTarget, options: SshOptions, *, address: str | None = None) -> Transport:
    """A Transport over SSH; its servers are reached at `address`, by default the SSH hostname."""
    return Transport(name, address or target.hostname, SshRunner(target, options))
