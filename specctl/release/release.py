"""One release on one host (DESIGN section 6): `<root>/<profile>/releases/<run-id>/` with the launch
script, environment, resolved inputs and drafter overlay; `current` and `known-good` symlinks that
are switched with a rename; a detached server whose process group is its pid."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from specctl.constants import OVERLAY_DIR, RELEASE_DIR_VAR
from specctl.errors import HostError
from specctl.hosts.transport import Transport
from specctl.plan.plan import NodePlan, Plan
from specctl.plan.render import render_sh

LOG = "server.log"
PID = "server.pid"


def new_run_id(now: datetime | None = None) -> str:
    """Sortable and unique: UTC time plus a random suffix."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class Release:
    """Where one run of one profile lives on a host."""

    transport: Transport
    root: str  # absolute
    profile: str
    run_id: str

    @property
    def base(self) -> str:
        return f"{self.root}/{self.profile}"

    @property
    def dir(self) -> str:
        return f"{self.base}/releases/{self.run_id}"

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}"


def host_root(transport: Transport, root: str) -> str:
    """The absolute state directory on the host (`~` means that host's home)."""
    if root == "~" or root.startswith("~/"):
        home = transport.run(["sh", "-c", 'printf %s "$HOME"']).stdout
        return home + root[1:]
    return root


def materialize(release: Release, plan: Plan, node: NodePlan, documents: dict[str, Any],
                overlay_sources: dict[str, str] | None = None) -> None:
    """Write the release directory: launch script, environment (no secrets), documents, overlay."""
    t = release.transport
    t.run(["mkdir", "-p", release.dir])
    t.put(release.path("launch.sh"), render_sh(plan, node).encode(), mode=0o755)
    env = "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(node.env.items()))
    t.put(release.path("env"), env.encode())
    for name, data in documents.items():
        text = data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
        t.put(release.path(name), text.encode())
    if plan.overlay is not None:
        overlay = release.path(OVERLAY_DIR)
        t.run(["mkdir", "-p", overlay])
        t.put(f"{overlay}/config.json", (json.dumps(plan.overlay.config, indent=2) + "\n").encode())
        for name in plan.overlay.links:
            source = (overlay_sources or {}).get(name)
            if source is None:
                raise HostError(f"{t.name}: no source for drafter file {name}", host=t.name,
                                fix="the drafter must be present on the host (a local path, or downloaded into its HF cache)")
            t.run(["ln", "-sfn", source, f"{overlay}/{name}"])


def switch(release: Release, link: str = "current") -> None:
    """Point `<base>/<link>` at this release with one rename: readers never see it missing."""
    t = release.transport
    tmp = f"{release.base}/.{link}.{secrets.token_hex(4)}"
    t.run(["ln", "-sfn", f"releases/{release.run_id}", tmp])
    t.run(["mv", "-Tf", tmp, f"{release.base}/{link}"])


def unlink(release: Release, link: str = "current") -> None:
    release.transport.run(["rm", "-f", f"{release.base}/{link}"])


def linked(transport: Transport, root: str, profile: str, link: str = "current") -> str | None:
    """The run id a link points at, or None."""
    done = transport.run(["readlink", f"{root}/{profile}/{link}"], check=False)
    target = done.stdout.strip()
    return target.rsplit("/", 1)[-1] if done.rc == 0 and target else None


def start(release: Release, *, env: dict[str, str] | None = None) -> int:
    """Start the release's launch script detached; secrets travel only in `env`, to this process."""
    return release.transport.start(["sh", "launch.sh"], cwd=release.dir, log=release.path(LOG), pidfile=release.path(PID),
                                   env={**(env or {}), RELEASE_DIR_VAR: release.dir})


def port(release: Release) -> int | None:
    """The port a release serves on, from its own resolved profile (a previous release may differ)."""
    raw = release.transport.read(release.path("profile.json"))
    try:
        return int(json.loads(raw)["engine"]["port"]) if raw else None
    except (ValueError, KeyError, TypeError):
        return None


def pid(release: Release) -> int | None:
    raw = release.transport.read(release.path(PID))
    return int(raw) if raw and raw.strip().isdigit() else None


# the shell's own kill: /bin/kill needs `--` before a negative pid and dash's builtin refuses `--`
_SIGNAL_GROUP = 'kill -"$1" "-$2"'


def signal_group(transport: Transport, process_group: int, signal: str) -> bool:
    """Send a signal to a process group (0: only test that it exists); True if it was there."""
    return transport.run(["sh", "-c", _SIGNAL_GROUP, "sh", signal, str(process_group)], check=False).rc == 0


def alive(transport: Transport, process_group: int) -> bool:
    return signal_group(transport, process_group, "0")


def stop(release: Release, *, timeout_s: float = 30.0) -> bool:
    """Stop the server's whole process group (TERM, then KILL); True if something was running."""
    t, group = release.transport, pid(release)
    if group is None or not alive(t, group):
        return False
    signal_group(t, group, "TERM")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(t, group):
            return True
        time.sleep(0.2)
    signal_group(t, group, "KILL")
    return True


_RUNNING = 'for f in "$1"/releases/*/server.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); ' \
           'kill -0 "-$p" 2>/dev/null && basename "${f%/server.pid}"; done; true'


def running(transport: Transport, root: str, profile: str) -> list[Release]:
    """Every release of the profile whose server still runs (current or not: a broken deploy may leave one)."""
    done = transport.run(["sh", "-c", _RUNNING, "sh", f"{root}/{profile}"])
    return [Release(transport, root, profile, run_id) for run_id in done.stdout.split()]


def log_tail(release: Release, lines: int = 20) -> list[str]:
    done = release.transport.run(["tail", "-n", str(lines), release.path(LOG)], check=False)
    return done.stdout.splitlines() if done.rc == 0 else []
