"""The Inventory (`hosts.yaml`): hosts by name, groups of them, and clusters run by a scheduler."""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from specctl.profile._invalid import host_path, interpreter, invalid, one_line
from specctl.profile.profile import Name, StrictModel


def state_directory(root: str) -> str:
    """Releases are created and removed under root, so it must be a real directory of its own:
    an empty or relative root would land in whatever directory a command runs in, and "/" is
    the whole filesystem."""
    if not (root == "~" or root.startswith("~/") or root.startswith("/")):
        raise invalid(
            "root_relative",
            "root {root!r} is not an absolute path or one under ~/",
            {"root": root, "fix": "write an absolute path, or one under the host's home, e.g. `root: ~/.specctl`"},
        )
    if posixpath.normpath(root) in ("/", "//"):
        raise invalid(
            "root_filesystem",
            "root {root!r} is the filesystem root",
            {"root": root, "fix": "use a directory of its own, e.g. `root: /srv/specctl`"},
        )
    return root


# What Slurm does not give back whole in a release directory (measured on slurm-wlm 22.05, the lab's):
# squeue prints the work directory (%Z, read last) in full, 4000 characters seen, "|", spaces, quotes,
# "$", ";" and UTF-8 included, but a newline ends its line (control characters are refused for every
# root); sbatch reads "%" in --output as a file name pattern (%j: the job id) and "\\" as turning
# patterns off, and with either in the path the job's log was never written where specctl reads it.
_SLURM_MANGLED = {
    "%": "sbatch reads it in --output as a file name pattern (%j: the job id)",
    "\\": "sbatch reads it in --output as an escape",
}


def slurm_root(root: str) -> str:
    """A Slurm cluster's root: one every release directory under which squeue and sbatch keep whole
    (squeue's %Z gives it back to find the root's jobs; sbatch's --output writes the job's log in it)."""
    for char, why in _SLURM_MANGLED.items():
        if char in root:
            raise invalid(
                "root_slurm_mangled",
                "root {root!r} holds {char!r}, which Slurm does not keep: {why}",
                {
                    "root": root,
                    "char": char,
                    "why": why,
                    "fix": f"choose a root without {char!r} (the job's log would be written elsewhere)",
                },
            )
    return root


class SshSettings(StrictModel):
    hostname: str
    user: str | None = None
    port: Annotated[int | None, Field(ge=1, le=65535)] = None
    identity_file: str | None = None
    proxy_jump: str | None = None


class _RemoteSide(StrictModel):
    """What a host and a Slurm cluster share: a state root, an interpreter, and values that reach scripts
    run there (one line each)."""

    @field_validator("root", check_fields=False)
    @classmethod
    def _root_is_a_state_directory(cls, root: str | None) -> str | None:
        return None if root is None else state_directory(root)

    @field_validator("python", check_fields=False)
    @classmethod
    def _python_on_the_host(cls, python: str | None) -> str | None:
        return interpreter(python)

    @field_validator("*")
    @classmethod
    def _one_line(cls, value: object) -> object:
        return one_line(value)


class Host(_RemoteSide):
    ssh: Annotated[
        str | SshSettings | None, Field(description="an alias from ~/.ssh/config, or connection details")
    ] = None
    root: Annotated[
        str | None,
        Field(
            description="remote state directory (default: ~/.specctl/hosts/<name>, one per inventory host even "
            "on a shared home; an older ~/.specctl holding releases stays the root of the host that wrote it)"
        ),
    ] = None
    address: Annotated[
        str | None, Field(description="where its servers are reached over HTTP (default: the SSH hostname)")
    ] = None
    python: str | None = None
    hf_home: Annotated[
        str | None,
        Field(
            description="this host's Hugging Face home (HF_HOME) for staging and the launch, "
            "in place of the profile's HF_HOME / HF_HUB_CACHE"
        ),
    ] = None
    gpu: str | None = None
    gpus: Annotated[int | None, Field(ge=1)] = None

    @field_validator("hf_home")
    @classmethod
    def _hf_home_is_a_host_path(cls, hf_home: str | None) -> str | None:
        return host_path(hf_home, "hf_home")


class SlurmCluster(_RemoteSide):
    """A Slurm cluster: specctl talks to its login node (a host of this inventory, or `local` when
    specctl runs there), keeps releases under `root` on storage every node mounts, and lets
    `sbatch` place the servers."""

    kind: Literal["slurm"]
    login: Annotated[str, Field(description="the login node: a host of this inventory, or `local`")]
    root: Annotated[str, Field(description="state directory on storage the login node and every compute node share")]
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: Annotated[str | None, Field(description="the job's time limit, as sbatch --time reads it")] = None
    gres: Annotated[
        str | None, Field(description="sbatch --gres per node (default gpu:<hardware.gpus_per_node>; '' for none)")
    ] = None
    tunnel: Annotated[
        bool,
        Field(
            description="reach the servers' HTTP through the login node's SSH connection "
            "(compute nodes that only the login node can reach)"
        ),
    ] = False
    exclusive: Annotated[
        bool, Field(description="whole nodes per job (--exclusive --mem=0): all their CPUs and memory")
    ] = True
    python: str | None = None
    env: Annotated[
        dict[str, str], Field(description="environment of the cluster's commands on the login node (SLURM_CONF, ...)")
    ] = {}
    setup: Annotated[list[str], Field(description="shell lines the job runs before its step (module load, ...)")] = []
    sbatch_args: list[str] = []
    srun_args: Annotated[
        list[str], Field(description="extra srun flags for the server step (--container-image=..., --mpi=...)")
    ] = []

    @field_validator("root")
    @classmethod
    def _root_slurm_gives_back_whole(cls, root: str) -> str:
        return slurm_root(root)


class KubernetesCluster(StrictModel):
    """A Kubernetes cluster: what `render --platform k8s --cluster NAME` writes into the objects
    (each also a flag of render, which wins). specctl does not apply them itself yet."""

    kind: Literal["kubernetes"]
    namespace: str | None = None
    image: Annotated[str | None, Field(description="the container image (default: the engine's published one)")] = None
    model_pvc: Annotated[str | None, Field(description="PersistentVolumeClaim for checkpoints and the HF cache")] = None
    model_mount: str | None = None
    secret_name: str | None = None
    image_python: str | None = None


Cluster = Annotated[SlurmCluster | KubernetesCluster, Field(discriminator="kind")]


class Inventory(StrictModel):
    api_version: Literal["specctl/v1"] = Field("specctl/v1", alias="apiVersion")
    kind: Literal["Inventory"] = "Inventory"
    hosts: dict[Name, Host] = {}
    groups: dict[str, list[str]] = {}
    clusters: dict[Name, Cluster] = {}

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True, defer_build=True)

    @model_validator(mode="after")
    def _groups_name_hosts(self) -> Inventory:
        for group, members in self.groups.items():
            unknown = [m for m in members if m not in self.hosts and m not in self.clusters]
            if unknown:
                raise invalid(
                    "unknown_host",
                    "group {group!r} names unknown hosts {unknown}",
                    {
                        "group": group,
                        "unknown": unknown,
                        "at": f"groups.{group}",
                        "fix": "define them under hosts or clusters, or fix the names",
                    },
                )
        return self

    @model_validator(mode="after")
    def _clusters_reach_a_login_node(self) -> Inventory:
        for name, cluster in self.clusters.items():
            if isinstance(cluster, SlurmCluster) and cluster.login != "local" and cluster.login not in self.hosts:
                raise invalid(
                    "unknown_login",
                    "cluster {name!r} names login node {login!r}, which is not a host",
                    {
                        "name": name,
                        "login": cluster.login,
                        "at": f"clusters.{name}.login",
                        "fix": "define it under hosts:, or write `login: local` when specctl runs on it",
                    },
                )
            if name in self.hosts or name in self.groups:
                raise invalid(
                    "cluster_name_taken",
                    "cluster {name!r} is also a host or group name",
                    {"name": name, "at": f"clusters.{name}", "fix": "give the cluster a name of its own"},
                )
        return self
