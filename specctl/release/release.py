"""One release on one host: `<root>/<profile>/releases/<run-id>/` with the launch
script, environment, resolved inputs, drafter overlay and its record (release/record.py); a
`current` symlink that is switched with a rename; a detached server whose process group is its pid."""

from __future__ import annotations

import io
import json
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from specctl.constants import OVERLAY_DIR, RELEASE_DIR_VAR, SERVER_MARK_VAR
from specctl.errors import HostError
from specctl.facts.host import PROCESS_SH, PROCESS_TABLE_SH
from specctl.hosts.transport import Completed, Transport
from specctl.plan.plan import NodePlan, Plan
from specctl.plan.render import quote, render_sh
from specctl.release import record as records
from specctl.release import whole

LOG = "server.log"
PID = "server.pid"
SUMMARY_FILE = "release.json"  # profile name, version, sha256 and workload of the release, one line
WORKLOAD_FILE = "workload.jsonl"  # the pinned workload verify sends
RUNS_DIR = "runs"  # a copy of every ledger run that touched this release
STARTUP_FILE = "startup.json"  # how long this release took to answer its first generation


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

    def record(self, *, current: bool = False) -> records.ReleaseRecord:
        """The host's record of this release (`current`: whether a legacy release is the serving one)."""
        return records.read(self.transport, self.dir, self.run_id, current=current)

    def update_record(
        self, *, life: records.Life | None = None, verification: records.Verification | None = None
    ) -> records.ReleaseRecord:
        return records.update(self.transport, self.dir, self.run_id, life=life, verification=verification)


# The default root of inventory host $1: ~/.specctl/hosts/$1; or ~/.specctl itself when it holds releases
# from before per-host roots and is this host's: claimed once, with one atomic symlink (`adopted-by`), by
# the first host name on the machine that wrote it (its host-identity, or none yet), so every other
# name, and every other machine on a shared home, gets a root of its own.
_DEFAULT_ROOT = r"""
old="$HOME/.specctl"; new="$old/hosts/$1"
by=$(readlink "$old/adopted-by" 2>/dev/null)
if [ -z "$by" ] && [ ! -d "$new" ] && ls -d "$old"/*/releases >/dev/null 2>&1; then
  id=$(cat /etc/machine-id 2>/dev/null); me="${id:-$(uname -n)}"
  seen=$(head -n 1 "$old/host-identity" 2>/dev/null)
  if [ -z "$seen" ] || [ "${seen%% *}" = "$me" ]; then
    ln -s "$1" "$old/adopted-by" 2>/dev/null; by=$(readlink "$old/adopted-by" 2>/dev/null)
  fi
fi
if [ "$by" = "$1" ]; then printf '%s
' "$old"; else printf '%s
' "$new"; fi
"""


def host_root(transport: Transport, root: str | None, host: str) -> str:
    """The absolute state directory on the host (`~` means that host's home). The default (`root`
    None) is one per inventory host, `~/.specctl/hosts/<host>`, so hosts that share a home never
    share state. An installation from before (releases right under `~/.specctl`) is adopted in place
    by the first inventory host on the machine that wrote it to use it: moving it would move running
    servers' release directories, which their environment names as proof that specctl started them."""
    if root is None:
        return transport.run(["sh", "-c", _DEFAULT_ROOT, "sh", host], retry=True).stdout.strip()
    if root == "~" or root.startswith("~/"):
        home = transport.run(["sh", "-c", 'printf %s "$HOME"']).stdout
        return home + root[1:]
    return root


# Unpack a tar from stdin beside the release directory, then rename it into place: a release
# directory either does not exist or is whole, and a failed unpack leaves nothing behind; a full disk
# is said as whole.SH says it (exit 28, where and how much is free). $1 = release directory.
_UNPACK = (
    whole.SH
    + r"""
tmp="$1.part.$$"; made "$tmp" || exit 1
e=$(LC_ALL=C tar -x -f - -C "$tmp" 2>&1) || { rm -rf "$tmp"; full "$1" "$e"; exit 1; }
e=$(LC_ALL=C mv -T "$tmp" "$1" 2>&1) || { rm -rf "$tmp"; full "$1" "$e"; exit 1; }
"""
)
WHOLE = ("launch.sh", "profile.json", "plan.json", SUMMARY_FILE, WORKLOAD_FILE)  # what restarting and verifying need


def env_file(env: dict[str, str]) -> bytes:
    """`KEY='value'` lines an operator may source with sh: single quotes expand nothing (control
    characters are spelled out through printf, so the file stays printable)."""
    return "".join(f"{k}={quote(v)}\n" for k, v in sorted(env.items())).encode()


def release_files(
    plan: Plan, node: NodePlan, documents: dict[str, Any], overlay_sources: dict[str, str] | None = None
) -> dict[str, tuple[bytes, int] | str]:
    """Every file of a release: name -> (content, mode), or name -> symlink target."""
    files: dict[str, tuple[bytes, int] | str] = {
        "launch.sh": (render_sh(plan, node).encode(), 0o755),
        "env": (env_file(dict(node.env)), 0o644),
    }
    for name, data in {**documents, **plan.files}.items():
        text = data if isinstance(data, str) else json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
        files[name] = (text.encode(), 0o644)
    if plan.overlay is not None:
        files[f"{OVERLAY_DIR}/config.json"] = ((json.dumps(plan.overlay.config, indent=2) + "\n").encode(), 0o644)
        for name in plan.overlay.links:
            source = (overlay_sources or {}).get(name)
            if source is None:
                raise HostError(
                    f"no source for drafter file {name}",
                    host="-",
                    fix="the drafter must be present on the host (a local path, or downloaded into its HF cache)",
                )
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
    """Write the release directory in one transfer; it appears whole or not at all (a full disk: "no
    space left on HOST at PATH (N MB free)")."""
    done = release.transport.run(["sh", "-c", _UNPACK, "sh", release.dir], stdin=archive(files), check=False)
    if done.rc != 0:
        whole.raise_for(release.transport, done, f"write release {release.run_id} to {release.dir}")


def missing_files(release: Release) -> list[str]:
    """What a release lacks of what restarting and verifying it need (empty: it is whole)."""
    done = release.transport.run(
        [
            "sh",
            "-c",
            'cd "$1" 2>/dev/null || { echo .; exit 0; }; shift; for f; do [ -f "$f" ] || echo "$f"; done',
            "sh",
            release.dir,
            *WHOLE,
        ],
        retry=True,
    )
    return ["the release directory" if line == "." else line for line in done.stdout.splitlines()]


# $1 link target, $2 temporary link, $3 the link; $4 (optional) a start-up time to record first, whole, $5 where.
_SWITCH = (
    whole.SH
    + r"""
if [ -n "${4:-}" ]; then printf '{"startup_s": %s}\n' "$4" | whole "$5" move || exit; fi
ln -sfn "$1" "$2" && mv -Tf "$2" "$3"
"""
)


def switch(release: Release, link: str = "current", *, startup_s: float | None = None) -> None:
    """Point `<base>/<link>` at this release with one rename: readers never see it missing. With
    `startup_s`, the release's start-up time is recorded first, in the same round trip."""
    tmp = f"{release.base}/.{link}.{secrets.token_hex(4)}"
    record = [f"{startup_s:.2f}", release.path(STARTUP_FILE)] if startup_s is not None else []
    argv = ["sh", "-c", _SWITCH, "sh", f"releases/{release.run_id}", tmp, f"{release.base}/{link}", *record]
    done = release.transport.run(argv, retry=True, check=False)
    if done.rc != 0:
        whole.raise_for(release.transport, done, f"point {link} at release {release.run_id}")


def unlink(transport: Transport, base: str, link: str = "current") -> None:
    transport.run(["rm", "-f", f"{base}/{link}"], retry=True)


def linked(transport: Transport, root: str, profile: str, link: str = "current") -> str | None:
    """The run id a link points at, or None."""
    done = transport.run(["readlink", f"{root}/{profile}/{link}"], check=False, retry=True)
    target = done.stdout.strip()
    return target.rsplit("/", 1)[-1] if done.rc == 0 and target else None


def mark(table: str, release_dir: str) -> str:
    """What a server's environment carries (SPECCTL_SERVER): the process table it runs in (boot id and
    pid namespace, as the host reads them: `PROCESS_TABLE_SH`) and its release directory. Not the
    inventory name: one machine reached under two names is one process table, whose servers are
    proven ours through either name; hosts that share a home but not a process table never match."""
    return f"{table} {release_dir}"


# Start the launch script detached in its own session (its pid is its process group), record its pid
# and start time, then its watchdog: "commit confirmed" on the host. Unless `current` names this
# release by the deadline, the watchdog stops the server, so a deploy that lost its host for good
# leaves no untracked server. $1 release dir, $2 profile dir, $3 run id, $4 seconds until the
# deadline, $5 the host's name for messages, $6 the watchdog. The server's mark (SPECCTL_SERVER, in its
# environment) is the host's process table (`mark`) and the release directory.
_START = (
    whole.SH
    + PROCESS_SH
    + f'mark="{mark(PROCESS_TABLE_SH, "$1")}"; export {SERVER_MARK_VAR}="$mark"\n'
    + r"""
dir=$1; base=$2; id=$3; confirm_s=$4; watchdog=$6
cd "$dir" || exit 1
setsid sh launch.sh >>server.log 2>&1 </dev/null &
pid=$!
# what proves the server ours and bounds its life, written whole; unwritten (a full disk), it is stopped
untracked() { r=$?; kill -TERM "-$pid" 2>/dev/null; exit $r; }
start_of "$pid" | whole "$dir/server.start" move || untracked
printf '%s\n' "$pid" | whole "$dir/server.pid" move || untracked
until=$(( $(date +%s) + confirm_s ))
printf '%s\n' "$until" | whole "$dir/confirm-by" move || untracked
env -u SPECCTL_RELEASE_DIR -u SPECCTL_SERVER setsid sh -c "$watchdog" sh "$base" "$id" "$pid" "$until" "$mark" \
  >/dev/null 2>&1 </dev/null &
printf '%s\n' "$pid"
"""
)
# The watchdog: each second, whether `current` names the release (then its work is done) or the
# group is gone; at the deadline it stops the group, but only once a live member of it carries the
# server's mark (a group id reused by another process once the server is gone is left alone).
_WATCHDOG = r"""
base=$1; id=$2; pg=$3; until=$4; mark=$5
owned() {
  for t in $(cat /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null \
      | awk -v g="$pg" '{ t = $1; sub(/.*\) /, ""); if ($3 == g && $1 != "Z") print t }'); do
    tr '\0' '\n' <"/proc/$t/environ" 2>/dev/null | grep -qxF -- "SPECCTL_SERVER=$mark" && return 0
  done
  return 1
}
while kill -0 "-$pg" 2>/dev/null; do
  case $(readlink "$base/current" 2>/dev/null) in */"$id") exit 0;; esac
  if [ "$(date +%s)" -ge "$until" ]; then
    owned || exit 0
    echo "specctl: release $id was not made current by its deadline: stopping its server" \
      >>"$base/releases/$id/server.log"
    kill -TERM "-$pg" 2>/dev/null; i=0
    while kill -0 "-$pg" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
    owned && kill -KILL "-$pg" 2>/dev/null; exit 0
  fi
  sleep 1
done
"""


def start(release: Release, *, confirm_within_s: float, env: dict[str, str] | None = None) -> int:
    """Start the release's server detached; returns its process group. Secrets travel only in
    `env`, to this process. Unless `current` names the release within `confirm_within_s`, the
    host stops the server by itself."""
    done = release.transport.run(
        [
            "sh",
            "-c",
            _START,
            "sh",
            release.dir,
            release.base,
            release.run_id,
            str(int(confirm_within_s)),
            release.transport.name,
            _WATCHDOG,
        ],
        env={**(env or {}), RELEASE_DIR_VAR: release.dir},
        check=False,
    )
    if done.rc != 0:
        whole.raise_for(release.transport, done, f"start release {release.run_id}")
    return int(done.stdout.strip().splitlines()[-1])


def port(release: Release) -> int | None:
    """The port a release serves on, from its own resolved profile (a previous release may differ)."""
    raw = release.transport.read(release.path("profile.json"))
    try:
        return int(json.loads(raw)["engine"]["port"]) if raw else None
    except (ValueError, KeyError, TypeError):
        return None


def startup_budget(release: Release, default_s: float) -> float:
    """What restarting a release may take: its own recorded start-up time with a wide margin, else
    the default. Restoring an old release must not inherit a new release's (maybe tiny) budget."""
    raw = release.transport.read(release.path(STARTUP_FILE))
    try:
        seconds = float(json.loads(raw)["startup_s"]) if raw else None
    except (ValueError, KeyError, TypeError):
        seconds = None
    return default_s if seconds is None else min(default_s, max(60.0, 3 * seconds + 30))


# Whether a process group still has a live thread. A group whose processes have all exited but
# wait to be reaped (zombies: a container's init reaps late, or never) is gone; `kill -0` alone
# would call it alive. Threads, not processes: a process whose main thread has exited shows as a
# zombie while its other threads (a server's listening socket among them) still run. The stat
# files are read by `cat`, which goes on past a thread that ended between the glob and the read
# (awk given them as files would stop there with an error, and a stopped server would look alive);
# awk exits 1 when no live member is found, 2 on an error of its own (then: alive).
_ALIVE = r"""
alive_group() {
  kill -0 "-$1" 2>/dev/null || return 1
  cat /proc/[0-9]*/task/[0-9]*/stat 2>/dev/null \
    | awk -v g="$1" '{ sub(/.*\) /, ""); if ($3 == g && $1 != "Z") { found = 1; exit } } END { exit !found }'
  [ $? -ne 1 ]
}
"""

# Every server of a profile that specctl started on this host, one "run-id process-group" line each:
# the processes whose environment carries the mark `start` gave them (SPECCTL_SERVER: this process
# table and a release directory of the profile; from before process tables, the host's inventory
# name instead), so a server whose release directory or pid file was
# deleted is still found, and nothing else is: a pid file alone proves nothing (the pid may have been
# recycled, or the file written by another host on a shared home). A server started before the mark
# existed carries only SPECCTL_RELEASE_DIR and is taken as this host's. Then, "! run-id pid" for each
# pid file naming a live process that is not this host's server of that release: left alone, and
# said. $1 = the profile's directory, $2 = the host's name.
_FIND = (
    _ALIVE
    + PROCESS_SH
    + f'table="{PROCESS_TABLE_SH}"\n'
    + r"""
# Whether live pid $1, which release directory $2's pid file names, is the server host $3 started
# there: its start time is the one recorded and its environment carries the mark (a server started
# before the mark existed: no start time recorded, and its environment names the directory).
started_here() {
  env=$(tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null) || return 1
  if [ -f "$2/server.start" ]; then
    running "$1" "$(cat "$2/server.start" 2>/dev/null)" || return 1
    printf '%s\n' "$env" | grep -qxF -e "SPECCTL_SERVER=$table $2" -e "SPECCTL_SERVER=$3 $2"
  else
    printf '%s\n' "$env" | grep -q '^SPECCTL_SERVER=' && return 1
    printf '%s\n' "$env" | grep -qxF -- "SPECCTL_RELEASE_DIR=$2"
  fi
}
find_servers() {
  mark="SPECCTL_SERVER=$table $1/releases/"; named="SPECCTL_SERVER=$2 $1/releases/"
  legacy="SPECCTL_RELEASE_DIR=$1/releases/"
  for e in $(grep -lzF -e "$mark" -e "$named" -e "$legacy" /proc/[0-9]*/environ 2>/dev/null); do
    p=${e#/proc/}; p=${p%/environ}
    v=$(tr '\0' '\n' <"$e" 2>/dev/null | grep -m 1 '^SPECCTL_SERVER=')
    case $v in
      "$mark"*) id=${v#"$mark"} ;;
      "$named"*) id=${v#"$named"} ;;
      "") v=$(tr '\0' '\n' <"$e" 2>/dev/null | grep -m 1 '^SPECCTL_RELEASE_DIR=')
          case $v in "$legacy"*) id=${v#"$legacy"} ;; *) continue ;; esac ;;
      *) continue ;;
    esac
    id=${id%%/*}
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }; g=$(echo "$s" | cut -d' ' -f3)
    [ -n "$g" ] && [ -n "$id" ] && alive_group "$g" && echo "$id $g"
  done
  for f in "$1"/releases/*/server.pid; do
    p=$(cat "$f" 2>/dev/null) || continue
    case $p in ""|*[!0-9]*) continue;; esac
    s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    s=${s##*) }; [ "${s%% *}" = Z ] && continue
    d=${f%/server.pid}
    started_here "$p" "$d" "$2" && continue
    echo "! ${d##*/} $p"
  done
}
"""
)
# What runs of a profile, read only: `current`'s target, then the servers and the strangers.
# $1 = the profile's directory, $2 = the host's name.
_LOOK = _FIND + 'readlink "$1/current" 2>/dev/null || echo; find_servers "$1" "$2" | sort -u'
# Stop this host's servers by process group, waiting on the host (no round trip per poll): TERM, up to
# $1 tenths of seconds of grace, then KILL, then until the group is gone (30 s at most: a process may
# finish a call in the kernel first). $2 = the profile's directory, $3 = the host's name, $4 = one run
# id (else every server). Prints the run ids that were running, and "left run-id group" for a group
# still alive after all that.
_STOP = (
    _FIND
    + r"""
limit=$1; base=$2; host=$3; only=${4:-}
stop_round() {
  find_servers "$base" "$host" | sort -u | while read -r id g; do
    [ "$id" = "!" ] && continue
    [ -n "$only" ] && [ "$id" != "$only" ] && continue
    kill -TERM "-$g" 2>/dev/null
    i=0; while alive_group "$g" && [ $i -lt "$limit" ]; do sleep 0.1; i=$((i+1)); done
    if alive_group "$g"; then
      kill -KILL "-$g" 2>/dev/null
      i=0; while alive_group "$g" && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
    fi
    echo "$id"
    alive_group "$g" && echo "left $id $g"
  done
}
# Until a look finds nothing (at most three rounds): a server that outlived its round is stopped again.
round=0
while [ $round -lt 3 ]; do
  stopped=$(stop_round)
  [ -n "$stopped" ] || break
  printf '%s\n' "$stopped"
  case $stopped in *left*) break;; esac  # KILL did not end it: looking again would not either
  round=$((round + 1))
done
true
"""
)


@dataclass(frozen=True)
class Server:
    """A running server of a profile: its release and handle (process group, or a scheduler's job id)."""

    release: str
    handle: int
    note: str | None = None  # what its platform adds (a job's state and time left)


@dataclass(frozen=True)
class Stranger:
    """A live process that a release's pid file names but that is not the server specctl started
    there on this host (a recycled pid, or another host's file on a shared home): never signalled."""

    release: str
    pid: int

    def describe(self, host: str) -> str:
        return (
            f"pid {self.pid} (in release {self.release}'s pid file) is not the server specctl started on {host}; "
            "left alone"
        )


def servers(transport: Transport, base: str) -> list[Server]:
    """Every running server of the profile whose directory is `base` that specctl started on this host."""
    return look(transport, base).servers


def look(transport: Transport, base: str) -> Survey:
    """What runs of the profile on this host, read only: `current`, the servers, the strangers."""
    return read_survey(transport.run(["sh", "-c", _LOOK, "sh", base, transport.name], retry=True))


def _servers_in(lines: list[str]) -> list[Server]:
    """The "run-id handle [note]" lines a platform's listing prints (`find_servers`: no note)."""
    found = []
    for line in lines:
        run_id, _, rest = line.partition(" ")
        handle, _, note = rest.partition(" ")
        if run_id != "!" and handle.isdigit():
            found.append(Server(run_id, int(handle), note.strip() or None))
    return found


def _strangers_in(lines: list[str]) -> list[Stranger]:
    """The "! run-id pid" lines of `find_servers`."""
    found = []
    for line in lines:
        mark, _, rest = line.partition(" ")
        run_id, _, pid = rest.partition(" ")
        if mark == "!" and pid.strip().isdigit():
            found.append(Stranger(run_id, int(pid)))
    return found


# A preflight's look at a profile's directory in one round trip: the half-written release directories
# of interrupted transfers removed, then what `current` names, then every running server.
_SURVEY = (
    _FIND
    + r"""
for d in "$1"/releases/*.part.*; do [ -d "$d" ] && rm -rf "$d"; done
readlink "$1/current" 2>/dev/null || echo
find_servers "$1" "$2" | sort -u
"""
)


@dataclass(frozen=True)
class Survey:
    """What a profile's directory on a host holds before anything changes."""

    current: str | None
    servers: list[Server]
    strangers: list[Stranger] = field(default_factory=list)


def survey_command(base: str, host: str) -> list[str]:
    """Sweep half-written releases, and read `current` and the running servers, in one command."""
    return ["sh", "-c", _SURVEY, "sh", base, host]


def read_survey(done: Completed) -> Survey:
    link, *lines = done.stdout.split("\n")
    current = link.strip().rsplit("/", 1)[-1] if link.strip() else None
    return Survey(current, _servers_in(lines), _strangers_in(lines))


def _stop(transport: Transport, base: str, run_id: str | None, timeout_s: float) -> list[str]:
    """Stop, then look again a moment later and stop what still answers (at most three times); returns
    once what was stopped is gone. A group that outlives SIGKILL (a process stuck in the kernel) is a
    HostError naming it: the command never says stopped of what it saw still running."""
    argv = ["sh", "-c", _STOP, "sh", str(int(timeout_s * 10)), base, transport.name, *([run_id] if run_id else [])]
    stopped: set[str] = set()
    for _ in range(3):
        lines = transport.run(argv, timeout_s=3 * timeout_s + 60, retry=True).stdout.splitlines()
        left = [line.split()[1:] for line in lines if line.startswith("left ")]
        if left:
            raise HostError(
                f"{transport.name}: "
                + ", ".join(f"release {r}'s process group {g}" for r, g in left)
                + " still runs after SIGTERM and SIGKILL",
                host=transport.name,
                fix="a process that ignores SIGKILL is stuck in the kernel (a GPU driver call, a hung "
                "mount): look at it with `ps -o pid,stat,wchan -g GROUP` on the host",
            )
        found = {line for line in lines if line.strip()}
        stopped |= found
        if not found:
            break
        time.sleep(0.3)
    return sorted(stopped)


def stop(release: Release, *, timeout_s: float = 30.0) -> bool:
    """Stop the release's server (its whole process group: TERM, then KILL); True if one was running."""
    return bool(_stop(release.transport, release.base, release.run_id, timeout_s))


def stop_running(transport: Transport, root: str, profile: str, *, timeout_s: float = 30.0) -> list[str]:
    """Stop every server of the profile (current or not: a broken deploy may leave one); their run ids."""
    return _stop(transport, f"{root}/{profile}", None, timeout_s)


def log_tail(release: Release, lines: int = 20) -> list[str]:
    done = release.transport.run(["tail", "-n", str(lines), release.path(LOG)], check=False, retry=True)
    return done.stdout.splitlines() if done.rc == 0 else []


# One round trip for a start-up poll: whether the process group lives (first line), then the log tail.
_OBSERVE = _ALIVE + 'if alive_group "$1"; then echo alive; else echo gone; fi; tail -n "$2" "$3" 2>/dev/null; true'


def observe(release: Release, process_group: int, lines: int = 200) -> tuple[bool, list[str]]:
    """Whether the server's process group is alive, and the last lines of its log."""
    done = release.transport.run(
        ["sh", "-c", _OBSERVE, "sh", str(process_group), str(lines), release.path(LOG)], retry=True
    )
    first, *rest = done.stdout.splitlines() or ["gone"]
    return first == "alive", rest
