"""An SSH destination: where and how to connect to a host, the way the user's own `ssh` would, from
the ssh_config and the inventory's explicit fields.

fabric reads the ssh_config (Host aliases, HostName, User, Port, IdentityFile, ConnectTimeout,
UserKnownHostsFile, ProxyCommand, and ProxyJump with `user@host:port` hops) and the inventory's
explicit fields win over it; specctl then opens every hop itself (hosts/_ssh_runner.py), first hop
first, each with its own known_hosts and specctl's host-key policy (hosts/_host_keys.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fabric  # type: ignore[import-untyped]

from specctl.errors import InputError

CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SshDestination:
    """Where and how to connect, after the ssh_config and the inventory's explicit fields are applied.

    `jumps` are the ProxyJump hosts in the order they are reached: the first one by its own route
    (its own ProxyJump or ProxyCommand, as `ssh -J` does), each next one through the one before.
    `proxy_command` is set only when there are no jumps (`ssh` takes the first of the two).
    """

    alias: str
    hostname: str
    port: int = 22
    user: str | None = None
    identity_files: tuple[str, ...] = ()
    proxy_jump: str | None = None  # as written in the ssh_config or the inventory
    known_hosts: tuple[str, ...] = ()
    proxy_command: str | None = None  # with %h, %p and friends already expanded
    connect_timeout_s: float | None = None  # ConnectTimeout; None: SshOptions.connect_timeout_s
    jumps: tuple[SshDestination, ...] = ()

    def route(self) -> tuple[SshDestination, ...]:
        """Every host an SSH connection is opened to on the way here, this one last."""
        if not self.jumps:
            return (self,)
        return (*self.jumps[0].route(), *self.jumps[1:], self)


@dataclass(frozen=True)
class SshOptions:
    """How strict to be, and where the user's SSH files are."""

    config_path: str | None = None  # like `ssh -F`; default ~/.ssh/config, then /etc/ssh/ssh_config
    accept_new_host_key: bool = False
    connect_timeout_s: float = CONNECT_TIMEOUT_S  # where the ssh_config gives no ConnectTimeout
    extra: Mapping[str, Any] = field(default_factory=dict)


def resolve(alias: str, options: SshOptions, overrides: Mapping[str, Any] | None = None) -> SshDestination:
    """Apply the ssh_config to an alias (or a hostname, or `user@host:port`), then the inventory's
    explicit fields (hostname, user, port, identity_file, proxy_jump); ProxyJump hops are resolved
    from the same ssh_config."""
    return _resolve(alias, _ssh_config(options), dict(overrides or {}), own_route=True, seen=())


def _ssh_config(options: SshOptions) -> Any:
    """A fabric Config holding the parsed ssh_config files, and none of fabric's own config files."""
    path = Path(options.config_path).expanduser() if options.config_path is not None else None
    if path is not None and not path.is_file():
        raise InputError(
            f"ssh_config {options.config_path} not found",
            fix="pass --ssh-config (or SPECCTL_SSH_CONFIG) an existing file, or leave it out for ~/.ssh/config",
        )
    # lazy: none of fabric's own files (/etc/fabric.yaml, ~/.fabric.yaml); a runtime path alone, as `ssh -F`
    config = fabric.Config(lazy=True, runtime_ssh_path=str(path) if path else None)
    config.load_ssh_config()
    return config


def _none(value: str | None) -> str | None:
    return None if value is None or value.strip().lower() == "none" else value.strip()


def _resolve(spec: str, config: Any, o: Mapping[str, Any], *, own_route: bool, seen: tuple[str, ...]) -> SshDestination:
    """One host: fabric looks it up (the shorthand's user and port win over the ssh_config, as in
    `ssh -J`), the overrides win over both. A jump host other than the first has no route of its own."""
    try:
        # gateway=False: fabric would build the ProxyJump hops itself, in reverse order and with AutoAddPolicy
        conn = fabric.Connection(spec, config=config, gateway=False)
    except ValueError as exc:  # e.g. a ConnectTimeout that is not a whole number
        raise InputError(f"ssh_config entry for {spec}: {exc}", fix="fix the entry in the ssh_config") from None
    entry: Mapping[str, Any] = conn.ssh_config  # paramiko's lookup; read directly, as fabric's connect_kwargs
    #                                            leak one host's IdentityFile into the next sharing its Config
    hostname = str(o.get("hostname") or conn.host)
    jump = _none(o.get("proxy_jump") or entry.get("proxyjump")) if own_route else None
    jumps: tuple[SshDestination, ...] = ()
    if jump:
        hops = [h.strip().removeprefix("ssh://") for h in jump.split(",") if h.strip()]
        first = fabric.connection.derive_shorthand(hops[0])["host"]
        if first in (conn.original_host, hostname):
            jump = None  # a Host pattern that matches its own jump host: reach it directly, as ssh does
        elif first in seen:
            raise InputError(
                f"ProxyJump loops: {' -> '.join((*seen, conn.original_host, first))}",
                fix=f"set `ProxyJump none` in the ssh_config's Host block for {first}",
            )
        else:
            jumps = (
                _resolve(hops[0], config, {}, own_route=True, seen=(*seen, conn.original_host)),
                *(_resolve(hop, config, {}, own_route=False, seen=()) for hop in hops[1:]),
            )
    identity = [o["identity_file"]] if o.get("identity_file") else entry.get("identityfile", [])
    known = str(entry.get("userknownhostsfile", "~/.ssh/known_hosts")).split()
    return SshDestination(
        alias=spec,
        hostname=hostname,
        port=int(o.get("port") or conn.port),
        user=o.get("user") or conn.user,
        identity_files=tuple(os.path.expanduser(p) for p in identity),
        proxy_jump=jump,
        known_hosts=tuple(os.path.expanduser(p) for p in known),
        proxy_command=_none(entry.get("proxycommand")) if own_route and not jumps else None,
        connect_timeout_s=float(conn.connect_timeout) if conn.connect_timeout else None,
        jumps=jumps,
    )
