"""The proof of a release before anything serving stops: the release run on its host as it will
start, its launch script with the final `exec` replaced by the checks, in one bounded command.

What the command proves: the interpreter runs; the engine imports at the pinned version and its
own launch parser accepts the flags (the engine's `prove_script`); the paths the engine reads exist
(`inputs`: the local target and drafter models, the drafter overlay, the release's files the plan
names; never a path the engine writes, such as a download or log directory); the port binds as the
server will bind it (unless a server of the profile holds it: the stop frees it); the state root has
room (ROOM_MARGIN_MIB); and which compute processes hold the GPUs. The caller adds what needs no
host: every name in `secrets:` set in the operator's environment. Weights and GPU memory only a
start proves: that is the undo's work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.constants import RELEASE_DIR_VAR
from specctl.engines.base import Engine
from specctl.facts import host as host_facts
from specctl.hosts.transport import Transport
from specctl.plan.findings import Severity
from specctl.plan.host_checks import check_host
from specctl.profile.profile import Profile, is_local_path

ROOM_MARGIN_MIB = 16  # free space the state root must keep past the release: its server log and records
ENGINE_LIMIT_S = 120  # the engine's import and parse (an engine may import much of itself to parse: seconds)

# $1 the release directory (it need not exist: a dry run), $2 the launch script's text ("": the
# release's own launch.sh), $3 the engine's prove source, $4 the pinned version, $5 the engine's time
# limit, $6 the state root, $7 the port to try ("": not tried), $8 engine.host, $9 the port check's
# source; then the paths the engine reads. Prints `key=value` lines: fail, disk_free_kib, gpu_process,
# path, python, port_free, engine (the engine's answer: the last JSON line of its stdout), engine_rc,
# said (its last words, stderr apart: read only when it gave no answer), done.
_PROVE = (
    r"""
dir=$1; launch=$2; check=$3; pin=$4; limit_s=$5; root=$6; port=$7; addr=$8; port_check=$9; shift 9
"""
    + host_facts.ROOM_SH.lstrip("\n")
    + r"""if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>/dev/null | while IFS=, read -r pid name; do
    pg=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f3)
    echo "gpu_process=$pid ${pg:--} $name"
  done
fi
for q do
  if [ ! -d "$dir" ]; then case $q in "$dir"/*) continue ;; esac; fi  # a dry run: not written yet
  [ -e "$q" ] || echo "path=$q"
done
if [ -z "$launch" ]; then
  launch=$(cat "$dir/launch.sh" 2>/dev/null) || { echo "fail=$dir/launch.sh cannot be read"; exit 0; }
fi
printf '%s\n' "$launch" | grep -q '^exec ' || { echo "fail=the launch script has no final exec line"; exit 0; }
prelude='
p_check=$1; p_pin=$2; p_limit=$3; p_port=$4; p_addr=$5; p_port_check=$6
specctl_prove() {
  py=$1; shift
  case $py in */*) [ -x "$py" ] ;; *) command -v "$py" >/dev/null 2>&1 ;; esac || { echo "python=missing"; exit 0; }
  t=""; command -v timeout >/dev/null 2>&1 && t="timeout $p_limit"
  [ -z "$p_port" ] || $t "$py" -c "$p_port_check" "$p_port" "$p_addr" 2>/dev/null | grep "^port_free=" || :
  err=$(mktemp 2>/dev/null) || err=/dev/null
  if out=$($t "$py" -c "$p_check" "$p_pin" "$@" 2>"$err"); then :; else echo "engine_rc=$?"; fi
  printf "%s\n" "$out" | grep "^{" | tail -n 1 | sed "s/^/engine=/"
  printf "%s\n" "$out" | grep -v "^{" | tail -n 2 | sed "s/^/said=/"
  if [ "$err" != /dev/null ]; then tail -n 3 "$err" | sed "s/^/said=/"; rm -f "$err"; fi
  echo "done=1"
}
'
body=$(printf '%s\n' "$launch" | sed 's/^exec /specctl_prove /')
SPECCTL_RELEASE_DIR=$dir sh -c "$prelude$body" "$dir/launch.sh" "$check" "$pin" "$limit_s" "$port" "$addr" "$port_check"
"""
)


def inputs(plan: Mapping[str, Any], profile: Profile) -> list[str]:
    """The paths the engine reads at start, from the release's documents (its plan, as `Plan.to_dict`
    writes it, and its profile): the target model and the drafter where they are local directories
    (a Hub repo is the staging's to prove), the drafter overlay, the files the plan puts in the
    release. Paths inside the release keep its directory's variable (`run` fills it in)."""
    found = [profile.target.model] if is_local_path(profile.target.model) else []
    if profile.drafter is not None and not plan.get("baseline"):
        overlay = plan.get("overlay")
        if isinstance(overlay, Mapping) and overlay.get("directory"):
            found.append(str(overlay["directory"]))
        elif is_local_path(profile.drafter.model):
            found.append(profile.drafter.model)
    found += [f"${{{RELEASE_DIR_VAR}}}/{name}" for name in plan.get("files") or {}]
    return found


@dataclass(frozen=True)
class Problem:
    """One check that failed: its name, what was seen, and what to do."""

    check: str
    message: str
    fix: str


@dataclass
class Proof:
    """What the proof command saw on one host."""

    host: str
    failure: str | None = None  # the command could not run the launch script at all
    python_missing: bool = False
    engine: dict[str, Any] | None = None  # the engine's answer, or None
    engine_said: str = ""  # its last lines (stderr's among them), when it gave no answer
    engine_rc: int | None = None  # its exit status, when not 0 (124: it ran past ENGINE_LIMIT_S)
    paths: list[str] = field(default_factory=list)  # paths the engine reads that do not exist
    gpu_processes: list[tuple[int, int | None, str]] = field(default_factory=list)  # pid, process group, name
    room_kib: int | None = None
    port_free: bool | None = None  # None: not tried (a server of the profile holds it), or no answer
    port_error: str | None = None  # why it would not bind (an errno name)
    done: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "paths_missing": self.paths,
            "gpu_processes": [{"pid": p, "process_group": g, "name": n} for p, g, n in self.gpu_processes],
            "room_mib": None if self.room_kib is None else self.room_kib // 1024,
            "port_free": self.port_free,
            "seconds": round(self.seconds, 2),
        }


def command(
    engine: Engine,
    *,
    release_dir: str,
    root: str,
    pinned: str,
    reads: Sequence[str] = (),
    port: int | None = None,
    address: str = "",
    launch: str = "",
    limit_s: int = ENGINE_LIMIT_S,
) -> list[str]:
    """The proof as one host command. `reads`: the paths the engine reads (`inputs`); `port`: the port
    to try binding on `address` (None: not tried); `launch`: a launch script's text not yet on the
    host (a dry run)."""
    source = engine.prove_script().read_text(encoding="utf-8")
    paths = [path.replace(f"${{{RELEASE_DIR_VAR}}}", release_dir) for path in reads]
    return [
        "sh",
        "-c",
        _PROVE,
        "sh",
        release_dir,
        launch,
        source,
        pinned,
        str(limit_s),
        root,
        "" if port is None else str(port),
        address,
        host_facts.PORT_PY,
        *paths,
    ]


def run(
    transport: Transport,
    engine: Engine,
    *,
    release_dir: str,
    root: str,
    pinned: str,
    reads: Sequence[str] = (),
    port: int | None = None,
    address: str = "",
    launch: str = "",
) -> Proof:
    began = time.monotonic()
    done = transport.run(
        command(
            engine,
            release_dir=release_dir,
            root=root,
            pinned=pinned,
            reads=reads,
            port=port,
            address=address,
            launch=launch,
        ),
        check=False,
        timeout_s=ENGINE_LIMIT_S + 30,
    )
    proof = read(transport.name, done.stdout)
    proof.seconds = time.monotonic() - began
    if not proof.done and proof.failure is None and not proof.python_missing:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-2:])
        proof.failure = f"the proof did not finish (exit {done.rc}{': ' + tail if tail else ''})"
    return proof


def read(host: str, stdout: str) -> Proof:
    proof = Proof(host)
    said: list[str] = []
    for line in stdout.splitlines():
        key, _, value = line.partition("=")
        if key == "fail":
            proof.failure = value
        elif key == "python":
            proof.python_missing = True
        elif key == "path":
            proof.paths.append(value)
        elif key == "disk_free_kib" and value.isdigit():
            proof.room_kib = int(value)
        elif key == "gpu_process":
            pid, group, name = (value.split(None, 2) + ["", ""])[:3]
            if pid.strip().isdigit():
                proof.gpu_processes.append(
                    (int(pid), int(group) if group.strip().isdigit() else None, name.strip() or "?")
                )
        elif key == "port_free":
            free, _, error = value.partition(" ")
            proof.port_free = {"yes": True, "no": False}.get(free)
            proof.port_error = error.strip() or None
        elif key == "engine":
            try:
                answer = json.loads(value)
            except ValueError:
                continue
            if isinstance(answer, dict) and "check" in answer:
                proof.engine = answer
        elif key == "said":
            said.append(value)
        elif key == "engine_rc" and value.isdigit():
            proof.engine_rc = int(value)
        elif key == "done":
            proof.done = True
    if proof.engine is None:
        proof.engine_said = " | ".join(s for s in said if s.strip())
    return proof


def problems(
    proof: Proof,
    *,
    python: str,
    engine_name: str,
    port: int = 0,
    address: str = "",
    margin_mib: int = ROOM_MARGIN_MIB,
) -> list[Problem]:
    """The proof's errors, each naming its check (empty: the release is proven as far as a host can
    prove it without starting it)."""
    found: list[Problem] = []
    if proof.failure is not None:
        return [Problem("launch", proof.failure, "deploy the profile again: the release on the host is not whole")]
    if proof.python_missing:
        return [
            Problem(
                "engine-python",
                f"{python} does not run",
                "set engine.python to the interpreter the engine is installed in",
            )
        ]
    answer = proof.engine
    if answer is None:
        ended = {None: "", 124: f" (it ran past {ENGINE_LIMIT_S} s)"}.get(proof.engine_rc, f" (exit {proof.engine_rc})")
        found.append(
            Problem(
                "engine-import",
                f"{python} gave no answer about {engine_name}{ended}: {proof.engine_said or 'nothing'}",
                f"install {engine_name} in {python}, or set engine.python to the interpreter that has it",
            )
        )
    elif answer.get("check"):
        check, error = str(answer["check"]), str(answer.get("error"))
        fixes = {
            "engine-import": f"install {engine_name} in {python}, or set engine.python to the interpreter that has it",
            "engine-version": f"install the pinned {engine_name} version in {python}, or set engine.version to "
            "what is installed (and re-check)",
            "engine-parse": "fix engine.args (specctl check shows which flag), or the engine version",
        }
        found.append(Problem(check, f"{engine_name} at {python}: {error}", fixes.get(check, "see the engine's error")))
    for path in proof.paths:
        found.append(
            Problem(
                "launch-path",
                f"the engine reads {path}, which does not exist on the host",
                "stage the model (specctl stage) or fix the path in the profile",
            )
        )
    if proof.port_free is False:
        said, fix = host_facts.port_refusal(port, address, proof.port_error)
        found.append(Problem("port", said, fix))
    if proof.room_kib is not None and proof.room_kib < margin_mib * 1024:
        found.append(
            Problem(
                "root-room",
                f"the state root has {proof.room_kib // 1024} MiB free, under the {margin_mib} MiB a release keeps",
                "free space on the state root's filesystem",
            )
        )
    return found


def strangers_on_gpus(proof: Proof, ours: Collection[int]) -> list[str]:
    """Compute processes on the GPUs that are not in the process group of a server of the profile."""
    return [f"{name} (pid {pid})" for pid, group, name in proof.gpu_processes if group is None or group not in ours]


def unset_secrets(names: Sequence[str], env: Mapping[str, str]) -> list[Problem]:
    """Each name in `secrets:` that the operator's environment does not set."""
    return [
        Problem(
            "secret",
            f"{name} is named in secrets: but not set in this environment",
            f"set {name} (export {name}=...), or drop it from secrets: if the model is public",
        )
        for name in names
        if name not in env
    ]


def prove_host(
    transport: Transport,
    *,
    engine: Engine,
    profile: Profile,
    plan: Mapping[str, Any],
    release_dir: str,
    root: str,
    secrets_env: Mapping[str, str],
    on_host: bool,
    prove_start: Callable[[], Sequence[str]],
    port_held: bool = False,
    facts: host_facts.HostFacts | None = None,
    launch: str = "",
) -> tuple[Proof | None, list[Problem]]:
    """The one proof of a release on one host, for a deploy's and a rollback's `prove` step and for
    `deploy --dry-run` alike: the secrets set; `facts` judged against the profile where the caller
    has not judged them already (plan/host_checks.py); on a host that runs the server itself, the
    proof command (`run`: the release's own launch, or `launch`'s text for a release not yet written;
    the port tried unless `port_held`: a server of the profile holds it, and the stop frees it);
    whatever places the server asked as it will be asked (`prove_start`: a scheduler's dry run of the
    job). The proof is None where no command ran; the problems are empty when the release is proven."""
    found = unset_secrets(profile.secrets, secrets_env)
    if facts is not None:
        found += [
            Problem(f.code, f.message.removeprefix(transport.name + ": "), f.fix)
            for f in check_host(profile, facts.to_dict(), engine)
            if f.severity is Severity.ERROR
        ]
    proof = None
    if on_host:
        pinned = profile.engine.version if engine.pins_installed_version() else ""
        port, address = profile.engine.port, profile.engine.host
        proof = run(
            transport,
            engine,
            release_dir=release_dir,
            root=root,
            pinned=pinned,
            reads=inputs(plan, profile),
            port=None if port_held else port,
            address=address,
            launch=launch,
        )
        found += problems(proof, python=profile.engine.python, engine_name=engine.name, port=port, address=address)
    found += [
        Problem("start", said, f"fix what {transport.name}'s inventory entry asks for (the refusal names it)")
        for said in prove_start()
    ]
    return proof, found
