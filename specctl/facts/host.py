"""Host facts, recorded with every run: GPUs (nvidia-smi when present), CUDA, Python, engine version,
free disk, whether the port is free. One remote command gathers them all (latency matters)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from specctl.hosts.transport import Completed, Transport

# $1 python, $2 state root, $3 port, $4 engine distribution, $5 the address the server binds
# (engine.host; none: every interface). Prints one JSON object per fact line.
_FACTS = r"""
py="$1"; root="$2"; port="$3"; dist="$4"; addr="${5:-}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits 2>/dev/null | sed 's/^/gpu=/'
  nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/cuda=\1/p' | head -n 1
fi
p="$root"; while [ ! -e "$p" ]; do p=$(dirname "$p"); done
df -Pk "$p" | awk 'NR==2 {print "disk_free_kib=" $4}'
limit=""; command -v timeout >/dev/null 2>&1 && limit="timeout 15"  # an interpreter that hangs is no answer
$limit "$py" - "$port" "$dist" "$addr" <<'PY' 2>/dev/null || echo "python=missing"
import os, socket, sys
print("python=" + sys.version.split()[0])  # what platform.python_version() says, without importing it


def key(name):  # a distribution's name as packaging normalizes it (PEP 503), dashes as underscores
    name = name.lower().replace("-", "_").replace(".", "_")
    while "__" in name:
        name = name.replace("__", "_")
    return name


# The version importlib.metadata.version(dist) gives, found as it finds it (importing importlib.metadata
# costs 50 ms, most of this script's time): the first directory on sys.path holding a *.dist-info or
# *.egg-info of that name (in the directory's own order), its METADATA, else PKG-INFO, Version header.
# Anything else (an .egg on the path, metadata without a version) is asked of importlib.metadata itself.
def engine_version(dist):
    want = key(dist)
    for entry in sys.path:
        if entry.lower().endswith(".egg"):
            break
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        found = [n for n in names if n.lower().endswith((".dist-info", ".egg-info"))]
        found = [n for n in found if key(n.rpartition(".")[0].partition("-")[0]) == want]
        if not found:
            continue
        for meta in ("METADATA", "PKG-INFO"):
            try:
                with open(os.path.join(entry or ".", found[0], meta), encoding="utf-8") as f:
                    for line in f:
                        if line.lower().startswith("version:"):
                            return line.split(":", 1)[1].strip()
                        if not line.strip():
                            break
                break  # importlib reads the first of them that exists
            except OSError:
                continue
        break
    from importlib.metadata import version

    return version(dist)


try:
    print("engine=" + engine_version(sys.argv[2]))
except Exception:  # importlib.metadata.PackageNotFoundError, or metadata it cannot read
    print("engine=missing")
addr = sys.argv[3] if len(sys.argv) > 3 else ""
if not addr.strip("0."):  # the IPv4 wildcard (written once: a fast-tier host rewrites it to its own address)
    addr = "0.0.0.0"
try:  # the address the server will bind (engine.host), as it binds it: a name is resolved, v6 is v6
    family = socket.getaddrinfo(addr, None, 0, socket.SOCK_STREAM)[0][0]
    s = socket.socket(family)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT leftovers do not count
    s.bind((addr, int(sys.argv[1])))
    print("port_free=yes")
except OSError:
    print("port_free=no")
PY
"""


@dataclass(frozen=True)
class HostFacts:
    """What a host is, as data."""

    host: str
    gpus: tuple[dict[str, Any], ...]
    cuda: str | None
    python: str | None
    engine_version: str | None
    disk_free_gib: float | None
    port: int
    port_free: bool | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def command(*, python: str, root: str, port: int, distribution: str, address: str = "") -> list[str]:
    """The facts command; `address`: engine.host, where the port is tried (none: every interface)."""
    return ["sh", "-c", _FACTS, "sh", python, root, str(port), distribution, address]


def script() -> str:
    """The facts as a sh script of its own ($1 python, $2 root, $3 port, $4 distribution), for a
    machine specctl does not reach itself (a scheduler's compute node runs it in the job)."""
    return _FACTS.lstrip("\n")


def gather(
    transport: Transport, *, python: str, root: str, port: int, distribution: str, address: str = ""
) -> HostFacts:
    return read(
        transport.name,
        port,
        transport.run(
            command(python=python, root=root, port=port, distribution=distribution, address=address),
            check=False,
            timeout_s=60,
        ),
    )


def read(host: str, port: int, done: Completed) -> HostFacts:
    """The facts a `command` printed (whatever its exit status: a fact it could not read is None)."""
    gpus, values = [], {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key == "gpu":
            name, memory, driver = (part.strip() for part in (value.split(",") + ["", ""])[:3])
            gpus.append({"name": name, "memory_mib": int(memory) if memory.isdigit() else None, "driver": driver})
        else:
            values[key] = value.strip()
    free = values.get("disk_free_kib")
    return HostFacts(
        host,
        tuple(gpus),
        values.get("cuda"),
        None if values.get("python") in (None, "missing") else values["python"],
        None if values.get("engine") in (None, "missing") else values["engine"],
        round(int(free) / 1024**2, 2) if free and free.isdigit() else None,
        port,
        {"yes": True, "no": False}.get(values.get("port_free", "")),
    )


def to_json(facts: HostFacts) -> str:
    return json.dumps(facts.to_dict(), indent=2, sort_keys=True) + "\n"


# The process table's name in a shell (boot id and pid namespace: a pid means one process only under
# both): what a server's mark carries, and the identity's `boot` and `pidns`. The one place a host's
# process table is read (this machine's own, from Python: processes.process_table).
PROCESS_TABLE_SH = "$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)/$(readlink /proc/self/ns/pid 2>/dev/null)"
# A process of the host, in sh: `start_of PID` prints its start time (clock ticks since boot,
# /proc/PID/stat's 22nd field: with the pid, that very process); `running PID [START]` is true while it
# lives (a zombie does not) and, given START ("-": unknown), is the process that started then, not a
# later one given its pid (no /proc: `kill -0`). Uses the variable s.
PROCESS_SH = r"""
start_of() { s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; printf '%s\n' "$s" | cut -d' ' -f20; }
running() {
  s=$(cat "/proc/$1/stat" 2>/dev/null) || { [ -d /proc/self ] && return 1; kill -0 "$1" 2>/dev/null; return; }
  s=${s##*) }; [ "${s%% *}" != Z ] || return 1
  [ "${2:--}" = - ] || [ "$(printf '%s\n' "$s" | cut -d' ' -f20)" = "$2" ]
}
"""
# What a host is, beyond its inventory name, read in the shell of the command that first touches its
# state root: `mid` its machine-id (else its hostname), `node` its hostname, `boot` the boot id and
# `pidns` the pid namespace (its process table, PROCESS_TABLE_SH), `netns` the network namespace (its
# ports), `gpus` the GPUs' UUIDs, comma-separated (nvidia-smi, where present). Sets shell variables only.
IDENTITY_SH = (
    f'node=$(uname -n); mid=$(cat /etc/machine-id 2>/dev/null); mid=${{mid:-$node}}; table="{PROCESS_TABLE_SH}"\n'
    + r"""boot=${table%%/*}; pidns=${table#*/}
netns=$(readlink /proc/self/ns/net 2>/dev/null); gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
  limit=""; command -v timeout >/dev/null 2>&1 && limit="timeout 15"
  gpus=$($limit nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | tr -d ' ' | tr '\n' ',')
fi
"""
)


@dataclass(frozen=True)
class Identity:
    """A host as its resources know it: the state root's own id, the machine-id (a shared-home check,
    never proof alone: images and containers share one), the process table (boot id and pid
    namespace: what PROCESS_TABLE_SH reads), the ports (network namespace) and the GPUs (UUIDs)."""

    root_id: str
    machine_id: str
    boot_id: str
    pid_ns: str
    net_ns: str
    gpus: tuple[str, ...] = ()

    @classmethod
    def parse(cls, line: str) -> Identity | None:
        """The "identity ROOT-ID MACHINE-ID BOOT PIDNS NETNS GPUS" line a script prints (see `IDENTITY_LINE`)."""
        words = line.split(" ")
        if len(words) < 6 or words[0] != "identity":
            return None
        gpus = tuple(g for g in (words[6] if len(words) > 6 else "").split(",") if g)
        return cls(words[1], words[2], words[3], words[4], words[5], gpus)


# The line `Identity.parse` reads, once IDENTITY_SH ran and `rid` holds the root's id.
IDENTITY_LINE = 'printf "identity %s %s %s %s %s %s\\n" "$rid" "$mid" "$boot" "$pidns" "$netns" "$gpus"'
