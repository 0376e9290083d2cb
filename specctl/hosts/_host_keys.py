"""Host keys: an unknown key is refused unless the caller accepts new keys (then it is added to
known_hosts); a changed key is always refused, with both fingerprints, on a jump host as on the
host itself. fabric's `Connection` would accept unknown keys on every hop (paramiko's AutoAddPolicy)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import paramiko

from specctl.errors import HostError
from specctl.hosts.ssh_destination import SshDestination


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def which_host(jump: str | None, hostname: str) -> str:
    """How a message names the host it is about: the destination by its address, a jump host by name too."""
    return f"jump host {jump} ({hostname})" if jump else hostname


class KnownHostsPolicy(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """Unknown key: refuse, or record it when the user said --accept-new-host-key. Set on the client of
    every hop; a changed key never gets here (paramiko raises BadHostKeyException for it).

    Args:
        alias: the host being reached, for the error's `host`.
        hop: the host this client connects to (the destination or one of its jump hosts).
        jump: the jump host's name, or None when `hop` is the destination.
    """

    def __init__(self, alias: str, hop: SshDestination, accept_new: bool, jump: str | None = None) -> None:
        self.alias = alias
        self.hop = hop
        self.accept_new = accept_new
        self.jump = jump

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self.accept_new:
            raise HostError(
                f"{self.alias}: unknown host key {key.get_name()} {fingerprint(key)} "
                f"for {which_host(self.jump, hostname)}",
                host=self.alias,
                fix="verify the fingerprint, then add it to known_hosts (ssh-keyscan) or pass --accept-new-host-key",
            )
        client.get_host_keys().add(hostname, key.get_name(), key)
        path = Path(self.hop.known_hosts[0] if self.hop.known_hosts else "~/.ssh/known_hosts").expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
