"""The SSH runner: argv on one host over a lazily opened, reused paramiko connection, through its
jump hosts, with specctl's own channel code.

fabric's `Connection` would open `ProxyJump a,b` as b then a, wait on a jump host's channel without
a timeout, and put a command's environment into its command line. Connecting is retried with
backoff; commands are not.
"""

from __future__ import annotations

import base64
import os
import select
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import paramiko

from specctl.errors import ConnectionLost, HostError
from specctl.hosts._host_keys import KnownHostsPolicy, fingerprint, which_host
from specctl.hosts.shell import OutputLost, RemoteShell, ShellGone
from specctl.hosts.ssh_destination import SshDestination, SshOptions
from specctl.hosts.transport import Completed, OnOutput
from specctl.hosts.tunnel import Tunnel

CONNECT_ATTEMPTS = 4
BACKOFF_S = 0.5
# Export NAME=base64(value) lines from stdin, then exec the command: secrets never appear in an argv.
_ENV_WRAPPER = (
    'while IFS= read -r line; do name=${line%%=*}; value=$(printf %s "${line#*=}" | base64 -d) || exit 97; '
    'export "$name=$value"; done; exec "$@"'
)


class _ProxyCommand(paramiko.ProxyCommand):  # type: ignore[misc]
    """paramiko's, except that a command that exited reads as end of file (paramiko's keeps reading
    nothing until a timeout) and close() reaps the process and its pipes."""

    def recv(self, size: int) -> bytes:
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
        if not ready:
            raise TimeoutError()
        data = os.read(self.process.stdout.fileno(), size)
        if not data:
            raise EOFError(f"ProxyCommand exited: {' '.join(self.cmd)}")
        return data

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a proxy that ignores SIGTERM
            self.process.kill()
            self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


class _Unreachable(Exception):
    """One connect attempt failed at a hop; transient, so the attempt is retried."""

    def __init__(self, where: str, cause: BaseException) -> None:
        super().__init__(f"{where}: {cause or type(cause).__name__}" if where else f"{cause or type(cause).__name__}")


class SshRunner:
    """Runs argv on one host over a lazily opened, reused connection (through its jump hosts)."""

    def __init__(self, destination: SshDestination, options: SshOptions) -> None:
        self.destination = destination
        self.options = options
        self._route = destination.route()
        self._clients: list[paramiko.SSHClient | None] = [None] * len(self._route)  # per hop, destination last
        self._was_connected = False
        self._shell: RemoteShell | None = None
        self._shell_works = True  # False once a host would not start one (a restricted shell): channels then
        self._shell_busy = threading.Lock()  # a second caller at once gets a channel of its own
        self._tunnels: dict[tuple[str, int], Tunnel] = {}
        self._tunnels_guard = threading.Lock()
        self._connecting = threading.Lock()

    def _hop_client(self, i: int) -> paramiko.SSHClient:
        """Open hop i of the route: through hop i-1's direct-tcpip channel, its ProxyCommand, or directly."""
        t, hop = self.destination, self._route[i]
        jump = hop.alias if i < len(self._route) - 1 else None
        where = (
            f"jump host {hop.alias} ({hop.hostname}:{hop.port})"
            if jump
            else f"from {self._route[i - 1].alias} to {hop.hostname}:{hop.port}"
            if i
            else ""
        )
        timeout = hop.connect_timeout_s or self.options.connect_timeout_s
        client = paramiko.SSHClient()
        for path in hop.known_hosts:
            if Path(path).exists():
                client.load_host_keys(path)  # also where accepted keys are saved by paramiko's own save()
        client.set_missing_host_key_policy(KnownHostsPolicy(t.alias, hop, self.options.accept_new_host_key, jump))
        self._clients[i] = client  # so that close() also ends a half-open hop (and its ProxyCommand)
        try:
            sock: Any = None
            if i:
                before = self._clients[i - 1]
                previous = before.get_transport() if before is not None else None
                assert previous is not None
                sock = previous.open_channel("direct-tcpip", (hop.hostname, hop.port), ("", 0), timeout=timeout)
            elif hop.proxy_command:
                sock = _ProxyCommand(hop.proxy_command)
            client.connect(
                hop.hostname,
                port=hop.port,
                username=hop.user,
                key_filename=list(hop.identity_files) or None,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                sock=sock,
                allow_agent=True,
                look_for_keys=True,
            )
        except paramiko.BadHostKeyException as exc:
            raise HostError(
                f"{t.alias}: the host key CHANGED for {which_host(jump, exc.hostname)}: "
                f"expected {fingerprint(exc.expected_key)}, got {fingerprint(exc.key)}",
                host=t.alias,
                fix="if the host was really reinstalled, remove the old key (ssh-keygen -R) "
                "after verifying the new one; specctl never accepts a changed key",
            ) from None
        except paramiko.AuthenticationException as exc:
            on = f" on {which_host(jump, hop.hostname)}" if jump else ""
            raise HostError(
                f"{t.alias}: authentication failed as {hop.user or 'the default user'}{on}: {exc}",
                host=t.alias,
                fix="check User and IdentityFile in ~/.ssh/config, or load the key into ssh-agent",
            ) from None
        except (TimeoutError, OSError, paramiko.SSHException, EOFError) as exc:
            raise _Unreachable(where, exc) from exc
        return client

    def _connect_once(self) -> paramiko.SSHClient:
        """Open what of the route is not open, first hop first; a jump host still connected is reused,
        and every hop after one opened anew is opened anew too (its tunnel went with the old one)."""
        reopen = False
        for i in range(len(self._route)):
            current = self._clients[i]
            transport = current.get_transport() if current is not None else None
            if reopen or transport is None or not transport.is_active():
                if current is not None:
                    current.close()
                self._hop_client(i)
                reopen = True
        client = self._clients[-1]
        assert client is not None
        return client

    @property
    def _client(self) -> paramiko.SSHClient | None:
        return self._clients[-1]

    def client(self) -> paramiko.SSHClient:
        current = self._client.get_transport() if self._client is not None else None
        if current is not None and current.is_active():
            assert self._client is not None
            return self._client
        with self._connecting:  # a command's hosts share one runner across threads: one connect at a time
            current = self._client.get_transport() if self._client is not None else None
            if current is not None and current.is_active():
                assert self._client is not None
                return self._client
            return self._connect()

    def _connect(self) -> paramiko.SSHClient:
        delay = BACKOFF_S
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                client = self._connect_once()
                self._was_connected = True
                return client
            except HostError:
                self.close()
                raise  # host keys and authentication are answers, not transient failures
            except _Unreachable as exc:
                self._drop()  # the next attempt starts from the first hop: a jump host may be what broke
                if attempt == CONNECT_ATTEMPTS:
                    t = self.destination
                    via = (
                        f" through {' -> '.join(j.alias for j in self._route[:-1])}"
                        if t.jumps
                        else f" through ProxyCommand `{t.proxy_command}`"
                        if t.proxy_command
                        else ""
                    )
                    error = ConnectionLost if self._was_connected else HostError  # lost and not back, or never there
                    raise error(
                        f"{t.alias}: cannot connect to {t.hostname}:{t.port}{via} after {attempt} attempts: {exc}",
                        host=t.alias,
                        fix=f"check that {'the host and its jump hosts are' if t.jumps else 'the host is'} up "
                        f"and sshd listens there (ssh -v {t.alias})",
                    ) from None
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        env: Mapping[str, str] | None,
        stdin: bytes | None,
        on_stdout: OnOutput | None = None,
    ) -> Completed:
        if env:
            if stdin is not None:
                raise ValueError("env and stdin cannot both be sent")
            argv = ["sh", "-c", _ENV_WRAPPER, "sh", *argv]
            stdin = "".join(f"{k}={base64.b64encode(v.encode()).decode()}\n" for k, v in env.items()).encode()
        client = self.client()
        transport = client.get_transport()
        assert transport is not None
        command = shlex.join(argv)
        if on_stdout is None and self._shell_works and self._shell_busy.acquire(blocking=False):
            try:
                return self._in_shell(transport, command, stdin or b"", timeout_s)
            finally:
                self._shell_busy.release()
        return self._on_channel(transport, command, stdin, timeout_s, on_stdout)

    def _in_shell(self, transport: paramiko.Transport, command: str, stdin: bytes, timeout_s: float) -> Completed:
        try:
            if self._shell is None or not self._shell.open:
                if self._shell is not None:
                    self._shell.close()
                    self._shell = None
                try:
                    self._shell = RemoteShell(transport, timeout_s=self.options.connect_timeout_s)
                except ShellGone:
                    if not transport.is_active():
                        raise
                    self._shell_works = False
                    return self._on_channel(transport, command, stdin, timeout_s)
            done = self._shell.run(command, stdin, timeout_s=timeout_s)
        except OutputLost as exc:
            self._shell = None
            alias, where = self.destination.alias, exc.where
            problem = f"specctl's temporary directory {where} vanished" if exc.vanished else f"no space left on {where}"
            raise HostError(
                f"{alias}: {problem}: `{command[:80]}` ran (exit {exc.rc}) but what it printed was lost",
                host=alias,
                fix=(
                    f"something removed {where} or mounted over it on {alias}; the next command starts afresh"
                    if exc.vanished
                    else f"free space in {where} on {alias} (df -h {where})"
                )
                + "; nothing was concluded from the lost output",
            ) from None
        except (paramiko.SSHException, OSError, EOFError, ShellGone) as exc:
            self._shell = None
            self._lost(command, None if isinstance(exc, ShellGone) and _dies(transport) else exc)
        if done is None:
            self._shell = None
            return Completed(124, b"", f"timed out after {timeout_s:.0f} s")
        return done

    def _on_channel(
        self,
        transport: paramiko.Transport,
        command: str,
        stdin: bytes | None,
        timeout_s: float,
        on_stdout: OnOutput | None = None,
    ) -> Completed:
        """The command on an SSH channel of its own (a long one streams its output through it), read
        by `sh` as in the long-lived shell, whatever the user's login shell is."""
        command = shlex.join(["sh", "-c", command])
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
                    data = channel.recv(65536)
                    out += data
                    if on_stdout is not None:
                        on_stdout(data)
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
            try:
                self._client.close()
            except (paramiko.SSHException, OSError, EOFError):
                pass  # closing says goodbye over the broken link (a dead jump host's tunnel): it may fail too
        self._clients[-1] = None  # the jump hosts stay open when they still are: the next connect reuses them
        cause = f": {exc}" if exc else ""
        raise ConnectionLost(
            f"{self.destination.alias}: the connection broke during `{command[:80]}`{cause}",
            host=self.destination.alias,
            fix="check the host and the network; `specctl status` shows what runs there once it answers",
        )

    def forward(self, host: str, port: int) -> tuple[str, int]:
        """A local address that reaches (host, port) from this host, through this connection (one
        tunnel per destination, kept until `close`)."""
        key = (host, port)
        with self._tunnels_guard:
            tunnel = self._tunnels.get(key)
            if tunnel is None:
                tunnel = self._tunnels[key] = Tunnel(self._open_direct, host, port)
        return "127.0.0.1", tunnel.local_port

    def _open_direct(self, where: tuple[str, int]) -> Any:
        transport = self.client().get_transport()
        assert transport is not None
        return transport.open_channel("direct-tcpip", where, ("127.0.0.1", 0), timeout=self.options.connect_timeout_s)

    def close(self) -> None:
        for tunnel in self._tunnels.values():
            tunnel.close()
        self._tunnels.clear()
        self._drop()

    def _drop(self) -> None:
        """The connection (every hop) and its shell closed; the tunnels' listeners stay, and their next
        channels ride the next connection."""
        if self._shell is not None:
            self._shell.close()
            self._shell = None
        for i in reversed(range(len(self._clients))):  # the destination first, then the hops it was tunnelled through
            client = self._clients[i]
            if client is not None:
                try:
                    client.close()
                except (paramiko.SSHException, OSError, EOFError):
                    pass  # a hop that is already gone cannot be told goodbye
                self._clients[i] = None


def _dies(transport: paramiko.Transport, within_s: float = 2.0) -> bool:
    """Whether the connection is going down: paramiko closes the channels just before it marks the
    transport inactive, so a channel without an exit status is followed by this within moments."""
    deadline = time.monotonic() + within_s
    while transport.is_active():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
