"""One release on one host (DESIGN section 6): `<root>/<profile>/releases/<run-id>/` with the launch
script, environment, resolved inputs and drafter overlay; `current` and `known-good` symlinks that
are switched with a rename; a detached server whose process group is its pid."""

from __future__ import annotations

import io
import json
import secrets
import tarfile
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
SUMMARY_FILE = "release.json"  # profile name, version, sha256 and workload of the release, one line
WORKLOAD_FILE = "workload.jsonl"  # the pinned workload verify sends
VERDICT_FILE = "verdict.json"  # the newest verify verdict of this release (passed or not, by which run)
RUNS_DIR = "runs"  # a copy of every ledger run that touched this release


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


# Unpack a tar from stdin beside the release directory, then rename it into place: a release
# directory either does not exist or is whole. $1 = release directory.
_UNPACK = 'tmp="$1.part.$$" && mkdir -p "$tmp" && tar -x -f - -C "$tmp" && mv -T "$tmp" "$1"'


def release_files(plan: Plan, node: NodePlan, documents: dict[str, Any],
                  overlay_sources: dict[str, str] | None = None) -> dict[str, tuple[bytes, int] | str]:
    """Every file of a release: name -> (content, mode), or name -> symlink target."""
    files: dict[str, tuple[bytes, int] | str] = {
        "launch.sh": (render_sh(plan, node).encode(), 0o755),
        "env": ("".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(node.env.items())).encode(), 0o644),
    }
    for name, data in documents.items():
        text = data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
        files[name] = (text.encode(), 0o644)
    if plan.overlay is not None:
        files[f"{OVERLAY_DIR}/config.json"] = ((json.dumps(plan.overlay.config, indent=2) + "\n").encode(), 0o644)
        for name in plan.overlay.links:
            source = (overlay_sources or {}).get(name)
            if source is None:
                raise HostError(f"no source for drafter file {name}", host="-",
                                fix="the drafter must be present on the host (a local path, or downloaded into its HF cache)")
            files[f"{OVERLAY_DIR}/{name}"] = source
    return files


def archive(files: dict[str, tuple[bytes, int] | str]) -> bytes:
    """A tar of `files`, so that a whole release travels in one round trip."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, item in files.items():
            info = tarfile.TarInfo(name)
            info.mtime = int(time.time())
            if isinstance(item, str):
                info.type, info.linkname = tarfile.SYMTYPE, item
                tar.addfile(info)
            else:
                info.size, info.mode = len(item[0]), item[1]
                tar.addfile(info, io.BytesIO(item[0]))
    return buffer.getvalue()


def materialize(release: Release, files: dict[str, tuple[bytes, int] | str]) -> None:
    """Write the release directory in one transfer; it appears whole or not at all."""
    release.transport.run(["sh", "-c", _UNPACK, "sh", release.dir], stdin=archive(files))


_SWITCH = 'ln -sfn "$1" "$2" && mv -Tf "$2" "$3"'


def switch(release: Release, link: str = "current") -> None:
    """Point `<base>/<link>` at this release with one rename: readers never see it missing."""
    tmp = f"{release.base}/.{link}.{secrets.token_hex(4)}"
    release.transport.run(["sh", "-c", _SWITCH, "sh", f"releases/{release.run_id}", tmp, f"{release.base}/{link}"])


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


# Stop servers by process group, waiting on the host (no round trip per poll): TERM, up to $1 tenths
# of seconds of grace, then KILL. $2 = the profile's directory, $3 = one run id (else every release).
# Prints the run ids that were running.
_STOP = r'''
limit=$1; base=$2; shift 2
if [ $# -gt 0 ]; then set -- "$base/releases/$1/server.pid"; else set -- "$base"/releases/*/server.pid; fi
for f in "$@"; do
  p=$(cat "$f" 2>/dev/null) || continue
  case $p in ""|*[!0-9]*) continue;; esac
  kill -0 "-$p" 2>/dev/null || continue
  kill -TERM "-$p" 2>/dev/null
  i=0; while kill -0 "-$p" 2>/dev/null && [ $i -lt "$limit" ]; do sleep 0.1; i=$((i+1)); done
  kill -0 "-$p" 2>/dev/null && kill -KILL "-$p" 2>/dev/null
  f=${f%/server.pid}; echo "${f##*/}"
done
true
'''


def _stop(transport: Transport, base: str, run_id: str | None, timeout_s: float) -> list[str]:
    argv = ["sh", "-c", _STOP, "sh", str(int(timeout_s * 10)), base, *([run_id] if run_id else [])]
    return transport.run(argv, timeout_s=timeout_s + 60).stdout.split()


def stop(release: Release, *, timeout_s: float = 30.0) -> bool:
    """Stop the server's whole process group (TERM, then KILL); True if something was running."""
    return bool(_stop(release.transport, release.base, release.run_id, timeout_s))


def stop_running(transport: Transport, root: str, profile: str, *, timeout_s: float = 30.0) -> list[str]:
    """Stop every server of the profile (current or not: a broken deploy may leave one); their run ids."""
    return _stop(transport, f"{root}/{profile}", None, timeout_s)


def log_tail(release: Release, lines: int = 20) -> list[str]:
    done = release.transport.run(["tail", "-n", str(lines), release.path(LOG)], check=False)
    return done.stdout.splitlines() if done.rc == 0 else []


# One round trip for a start-up poll: whether the process group lives (first line), then the log tail.
_OBSERVE = 'if kill -0 "-$1" 2>/dev/null; then echo alive; else echo gone; fi; tail -n "$2" "$3" 2>/dev/null; true'


def observe(release: Release, process_group: int, lines: int = 200) -> tuple[bool, list[str]]:
    """Whether the server's process group is alive, and the last lines of its log."""
    done = release.transport.run(["sh", "-c", _OBSERVE, "sh", str(process_group), str(lines), release.path(LOG)])
    first, *rest = done.stdout.splitlines() or ["gone"]
    return first == "alive", rest
