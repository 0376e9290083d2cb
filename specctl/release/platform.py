"""Where a release's server runs: a process group on the host itself (SSH or local), or a job that a
scheduler places (Slurm, `release/slurm.py`). The stages every flow shares (flows/change.py),
readiness, status, stop and verify speak to a Platform, never to `setsid` or `sbatch` themselves, so
checks, verify, the ledger and rollback are one code path whatever runs the servers.

A handle names one started server: its process group, or its job id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from specctl.hosts.transport import Completed, Transport
from specctl.release import release as rel

if TYPE_CHECKING:
    from specctl.hosts.inventory import HostSpec

__all__ = ["Observation", "ProcessPlatform", "Platform", "server_url", "platform_of"]


@dataclass(frozen=True)
class Observation:
    """One look at a starting server: alive (or queued), its log's last lines, where it answers
    once it is placed, and what it waits for while it is not."""

    alive: bool
    lines: list[str]
    address: str | None
    waiting: str | None = None  # e.g. "queued: PENDING (Resources)"
    ended: str | None = None  # why it is gone, when the target knows (a job's final state)


class Platform(Protocol):
    kind: str
    # True: a new release starts beside the running one, which stops only once the new one is
    # verified (a scheduler has the room); False: the running server stops first (one host, one port)
    rolling: bool
    on_host: bool  # the server answers at the host's own address (else where the scheduler placed it)
    poll_s: float  # between looks at a starting server

    def survey_command(self, base: str) -> list[str]:
        """One command printing `current`'s target, then one "run-id handle" line per running server."""
        ...

    def servers(self, base: str) -> list[rel.Server]: ...

    def start(self, release: rel.Release, *, confirm_within_s: float, env: Mapping[str, str] | None = None) -> int:
        """Start the release's server; its handle. Unless `current` names the release within
        `confirm_within_s`, the server stops by itself (a deploy that lost its host leaves none)."""
        ...

    def observe(self, release: rel.Release, handle: int) -> Observation: ...

    def address(self, release: rel.Release) -> str:
        """Where the release's server answers HTTP."""
        ...

    def endpoint(self, address: str, port: int) -> tuple[str, int]:
        """Where this machine sends a server's HTTP: the server's address, or a tunnel to it."""
        ...

    def stop(self, release: rel.Release) -> bool:
        """Stop the release's server; True if one was running."""
        ...

    def stop_running(self, root: str, profile: str, *, keep: str | None = None) -> list[str]:
        """Stop every server of the profile but `keep`'s; their run ids."""
        ...

    def facts(self, release: rel.Release) -> Completed | None:
        """The host facts the server's own machine gave (None: gather them on the host)."""
        ...


class ProcessPlatform:
    """The server as a detached process group on the host specctl reaches (release/release.py)."""

    kind = "host"
    rolling = False
    on_host = True
    poll_s = 0.5

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def survey_command(self, base: str) -> list[str]:
        return rel.survey_command(base)

    def servers(self, base: str) -> list[rel.Server]:
        return rel.servers(self.transport, base)

    def start(self, release: rel.Release, *, confirm_within_s: float, env: Mapping[str, str] | None = None) -> int:
        return rel.start(release, confirm_within_s=confirm_within_s, env=dict(env or {}))

    def observe(self, release: rel.Release, handle: int) -> Observation:
        alive, lines = rel.observe(release, handle)
        return Observation(alive, lines, self.transport.address)

    def address(self, release: rel.Release) -> str:
        return self.transport.address

    def endpoint(self, address: str, port: int) -> tuple[str, int]:
        return address, port

    def stop(self, release: rel.Release) -> bool:
        return rel.stop(release)

    def stop_running(self, root: str, profile: str, *, keep: str | None = None) -> list[str]:
        if keep is None:
            return rel.stop_running(self.transport, root, profile)
        others = [s.release for s in self.servers(f"{root}/{profile}") if s.release != keep]
        return [run_id for run_id in others if rel.stop(rel.Release(self.transport, root, profile, run_id))]

    def facts(self, release: rel.Release) -> Completed | None:
        return None


def platform_of(spec: HostSpec, transport: Transport) -> Platform:
    """The target an inventory entry names: a Slurm cluster's jobs, else processes on the host."""
    if spec.slurm is not None:
        from specctl.release.slurm import SlurmPlatform

        return SlurmPlatform(transport, spec.slurm)
    return ProcessPlatform(transport)


def server_url(target: Platform, release: rel.Release, port: int) -> str:
    """The base URL of a release's server, as this machine reaches it."""
    host, reached = target.endpoint(target.address(release), port)
    return f"http://{host}:{reached}"
