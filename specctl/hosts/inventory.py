"""Inventory hosts as transports: names and groups resolved, `local` built in, SSH for the rest; a
Slurm cluster is reached through its login node."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specctl.errors import InputError
from specctl.hosts.local import LOCAL, local_transport
from specctl.hosts.transport import Transport

if TYPE_CHECKING:
    from specctl.profile.inventory import Host, KubernetesCluster, SlurmCluster


@dataclass(frozen=True)
class HostSpec:
    """One host to act on: how to reach it and where its state lives."""

    name: str
    root: str | None  # None: the default, one per inventory host (release.host_root resolves it on the host)
    python: str | None
    ssh_alias: str | None
    ssh_overrides: dict[str, object]
    address: str | None = None
    hf_home: str | None = None  # the Hugging Face home on this host, when it is not the profile's
    slurm: SlurmCluster | None = None  # a cluster: this is its login node, and sbatch places the servers

    def transport(self, *, ssh_config: str | None = None, accept_new_host_key: bool = False) -> Transport:
        """The host's transport; inside `connections.held()` (a CLI command) one per host, reused."""
        from specctl.hosts.connections import shared

        return shared(
            (self.name, ssh_config, accept_new_host_key), lambda: self._new_transport(ssh_config, accept_new_host_key)
        )

    def _new_transport(self, ssh_config: str | None, accept_new_host_key: bool) -> Transport:
        if self.ssh_alias is None and (
            self.name == LOCAL or (self.slurm is not None and self.slurm.login == LOCAL and not self.ssh_overrides)
        ):
            return local_transport(self.name)
        from specctl.hosts.ssh import ssh_transport
        from specctl.hosts.ssh_destination import SshOptions, resolve

        options = SshOptions(config_path=ssh_config, accept_new_host_key=accept_new_host_key)
        return ssh_transport(
            self.name, resolve(self.ssh_alias or self.name, options, self.ssh_overrides), options, address=self.address
        )


def inventory_path(explicit: str | None) -> Path | None:
    """--inventory, else $SPECCTL_INVENTORY, else ./hosts.yaml when it exists."""
    for candidate in (explicit, os.environ.get("SPECCTL_INVENTORY"), "hosts.yaml"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
        if candidate and candidate == explicit:
            raise InputError(f"inventory {candidate} not found", fix="pass --inventory PATH to a hosts.yaml")
    return None


def resolve_hosts(names: Sequence[str], inventory: Path | None) -> list[HostSpec]:
    """Host and group names in order, each host once; `local` needs no inventory entry."""
    from specctl.profile import load_document
    from specctl.profile.inventory import Inventory

    inv = load_document(inventory, Inventory, "Inventory").model if inventory else None
    hosts = dict(inv.hosts) if inv else {}
    groups = dict(inv.groups) if inv else {}
    clusters = dict(inv.clusters) if inv else {}
    out: list[HostSpec] = []
    for name in names:
        members = groups.get(name, [name])
        for member in members:
            if any(h.name == member for h in out):
                continue
            if member in clusters:
                out.append(_cluster_spec(member, clusters[member], hosts, inventory))
                continue
            if member not in hosts:
                if member == LOCAL:
                    out.append(HostSpec(LOCAL, None, None, None, {}))
                    continue
                where = f"in {inventory}" if inventory else "(no inventory: pass --inventory or create hosts.yaml)"
                raise InputError(
                    f"unknown host or group {member!r} {where}", fix="add it under hosts: or groups: in the inventory"
                )
            entry = hosts[member]
            alias, overrides = _ssh(entry)
            out.append(HostSpec(member, entry.root, entry.python, alias, overrides, entry.address, entry.hf_home))
    return out


def _ssh(entry: Host) -> tuple[str | None, dict[str, object]]:
    """(ssh_config alias, connection overrides) of an inventory host."""
    from specctl.profile.inventory import SshSettings

    if isinstance(entry.ssh, SshSettings):
        return None, {k: v for k, v in entry.ssh.model_dump().items() if v is not None}
    return (entry.ssh, {}) if isinstance(entry.ssh, str) else (None, {})


def _cluster_spec(
    name: str, cluster: SlurmCluster | KubernetesCluster, hosts: Mapping[str, Host], inventory: Path | None
) -> HostSpec:
    """A Slurm cluster as the host deploys talk to: its login node, with the cluster's shared root.
    Its servers' addresses come from each job's allocation, not from the login node."""
    from specctl.profile.inventory import KubernetesCluster

    if isinstance(cluster, KubernetesCluster):
        raise InputError(
            f"{name} is a Kubernetes cluster: specctl renders its objects but does not apply them yet",
            fix=f"specctl render PROFILE --platform k8s --cluster {name} --inventory {inventory} | kubectl apply -f -",
        )
    if cluster.login == LOCAL:
        return HostSpec(name, cluster.root, cluster.python, None, {}, slurm=cluster)
    login = hosts[cluster.login]
    alias, overrides = _ssh(login)
    return HostSpec(
        name,
        cluster.root,
        cluster.python or login.python,
        alias or (None if overrides else cluster.login),
        overrides,
        login.address,
        login.hf_home,
        slurm=cluster,
    )
