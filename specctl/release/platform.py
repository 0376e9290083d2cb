"""Where a release's server runs: a process group on the host itself (SSH or local), or a job that a
scheduler places (Slurm, `release/slurm.py`). The steps every flow shares (flows/change.py),
readiness, status, stop and verify speak to a Platform, never to `setsid` or `sbatch` themselves, so
checks, verify, the ledger and rollback are one code path whatever runs the servers.

A platform declares what it can do (capabilities, never a kind to test): whether a new release
starts beside the running one, whether its servers answer at the host's own address, whether it
places every node rank of a multi-node profile itself, where those ranks meet, whether tune can
measure on it. What it adds to a release directory (a job script) it writes itself.

`platform_type` is the one place that picks the kind from an inventory entry.

A handle names one started server: its process group, or its job id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from specctl.hosts.transport import Completed, Transport
from specctl.release import release as rel

if TYPE_CHECKING:
    from specctl.hosts.inventory import HostSpec
    from specctl.plan.plan import Plan
    from specctl.profile.profile import Profile

__all__ = ["Files", "Observation", "ProcessPlatform", "Platform", "server_url", "platform_of", "platform_type"]

Files = dict[str, tuple[bytes, int] | str]  # a release directory's files: name -> (content, mode), or a link


@dataclass(frozen=True)
class Observation:
    """One look at a starting server: alive (or queued), its log's last lines, where it answers
    once it is placed, and what it waits for while it is not."""

    alive: bool
    lines: list[str]
    address: str | None
    waiting: str | None = None  # e.g. "queued: PENDING (Resources)"
    ended: str | None = None  # why it is gone, when the platform knows (a job's final state)
    notes: tuple[str, ...] = ()  # what the look did that a person must hear once (a second job cancelled)


class Platform(Protocol):
    kind: ClassVar[str]
    noun: ClassVar[str]  # what an inventory entry of this platform is, for messages: "a host"
    # True: a new release starts beside the running one, which stops only once the new one is
    # verified (a scheduler has the room); False: the running server stops first (one host, one port)
    rolling: ClassVar[bool]
    on_host: ClassVar[bool]  # the server answers at the host's own address (else where the scheduler placed it)
    # True: one server start runs every node rank of a multi-node profile (deploy to the entry alone);
    # False: node rank r runs on the r-th host given
    places_every_rank: ClassVar[bool]
    # where the node ranks meet when the platform places them, as the launch scripts spell it (known
    # only once placed); None: at node rank 0's host
    node0_address: ClassVar[str | None]
    tunable: ClassVar[bool]  # tune can bring candidates up and measure them here
    poll_s: ClassVar[float]  # between looks at a starting server
    # True: the state root belongs to the one machine specctl reaches, and a root another machine wrote
    # (a shared home) is refused; False: it is shared by design (a cluster's login and compute nodes)
    machine_root: ClassVar[bool]

    @classmethod
    def on(cls, spec: HostSpec, transport: Transport) -> Platform:
        """The platform of an inventory entry, reached through `transport`."""
        ...

    def release_files(
        self, p: Plan, profile: Profile, distribution: str, release: rel.Release, *, hf_home: str | None = None
    ) -> Files:
        """The files this platform adds to a release directory beside node rank 0's launch script
        (`hf_home`: the inventory's cache, for the other node ranks)."""
        ...

    def dry_run_settings(self, p: Plan, profile: Profile, distribution: str, base: str) -> dict[str, Any]:
        """What `deploy --dry-run` shows of this platform's own settings for a new release under `base`."""
        ...

    def survey_command(self, base: str) -> list[str]:
        """One command printing the release `current` links to, then one "run-id handle" line per running server."""
        ...

    def servers(self, base: str) -> list[rel.Server]: ...

    def look(self, base: str) -> rel.Survey:
        """What runs of the profile here, read only: `current`, the servers, and the processes that
        pid files name but that specctl cannot prove it started (never signalled)."""
        ...

    def start(self, release: rel.Release, *, confirm_within_s: float, env: Mapping[str, str] | None = None) -> int:
        """Start the release's server; its handle. Unless `current` names the release within
        `confirm_within_s`, the server stops by itself (a deploy that lost its host leaves none)."""
        ...

    def observe(self, release: rel.Release, handle: int) -> Observation: ...

    def ended(self, release: rel.Release) -> str | None:
        """Why the release's server, no longer running, ended, when the platform knows (a job's final
        state and reason); None when it does not say."""
        ...

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

    def prove_start(self, release: rel.Release) -> list[str]:
        """What would keep the release's server from being started as `start` starts it, asked of
        whatever places it without starting anything (a scheduler's dry run); empty when nothing does.
        Part of the prove step, before anything running stops."""
        ...

    def time_limit(self, release: rel.Release) -> str | None:
        """The started server's time limit and when serving stops, in words; None where none is set."""
        ...

    def watchdog(self, release: rel.Release) -> bool:
        """Whether the watchdog that stops an unconfirmed server at its deadline (`confirm-by`) is seen
        alive now; False when it cannot be seen (then no deadline is claimed)."""
        ...


class ProcessPlatform:
    """The server as a detached process group on the host specctl reaches (release/release.py)."""

    kind: ClassVar[str] = "host"
    noun: ClassVar[str] = "a host"
    rolling: ClassVar[bool] = False
    on_host: ClassVar[bool] = True
    places_every_rank: ClassVar[bool] = False
    node0_address: ClassVar[str | None] = None
    tunable: ClassVar[bool] = True
    poll_s: ClassVar[float] = 0.5
    machine_root: ClassVar[bool] = True

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    @classmethod
    def on(cls, spec: HostSpec, transport: Transport) -> Platform:
        return cls(transport)

    def release_files(
        self, p: Plan, profile: Profile, distribution: str, release: rel.Release, *, hf_home: str | None = None
    ) -> Files:
        return {}

    def dry_run_settings(self, p: Plan, profile: Profile, distribution: str, base: str) -> dict[str, Any]:
        return {}

    def survey_command(self, base: str) -> list[str]:
        return rel.survey_command(base, self.transport.name)

    def servers(self, base: str) -> list[rel.Server]:
        return rel.servers(self.transport, base)

    def look(self, base: str) -> rel.Survey:
        return rel.look(self.transport, base)

    def start(self, release: rel.Release, *, confirm_within_s: float, env: Mapping[str, str] | None = None) -> int:
        return rel.start(release, confirm_within_s=confirm_within_s, env=dict(env or {}))

    def observe(self, release: rel.Release, handle: int) -> Observation:
        alive, lines = rel.observe(release, handle)
        return Observation(alive, lines, self.transport.address)

    def ended(self, release: rel.Release) -> str | None:
        return None  # a process group leaves no final state; its log says why

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

    def prove_start(self, release: rel.Release) -> list[str]:
        return []  # the launch itself is what the prove step runs on the host

    def time_limit(self, release: rel.Release) -> str | None:
        return None

    def watchdog(self, release: rel.Release) -> bool:
        done = self.transport.run(["sh", "-c", _WATCHDOG_SEEN, "sh", release.run_id, release.base], check=False)
        return done.rc == 0


# Whether the release's watchdog (release/release.py's `start`: `sh -c WATCHDOG sh <profile dir> <run id>
# <group> <deadline> <mark>`) is a live process here: a command line holding "sh", the profile's
# directory and the run id as consecutive arguments. This scan's own arguments come in the other order,
# and its own pid is skipped. $1 = run id, $2 = profile dir.
_WATCHDOG_SEEN = r"""
u=$(printf '\037')
for f in /proc/[0-9]*/cmdline; do
  p=${f#/proc/}; p=${p%/cmdline}
  [ "$p" != $$ ] || continue
  line=$(tr '\000' '\037' <"$f" 2>/dev/null) || continue
  case $line in "sh$u-c$u"*"${u}sh$u$2$u$1$u"*) exit 0;; esac
done
exit 1
"""


def platform_type(spec: HostSpec) -> type[Platform]:
    """The kind of platform an inventory entry names (its capabilities, before anything is reached):
    a Slurm cluster's jobs, else processes on the host."""
    if spec.slurm is not None:
        from specctl.release.slurm import SlurmPlatform

        return SlurmPlatform
    return ProcessPlatform


def platform_of(spec: HostSpec, transport: Transport) -> Platform:
    """The platform an inventory entry names, reached through `transport`."""
    return platform_type(spec).on(spec, transport)


def server_url(platform: Platform, release: rel.Release, port: int) -> str:
    """The base URL of a release's server, as this machine reaches it."""
    host, reached = platform.endpoint(platform.address(release), port)
    return f"http://{host}:{reached}"
