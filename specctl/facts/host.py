"""Host facts, recorded with every run: GPUs (nvidia-smi when present), CUDA, Python, engine version,
free disk, whether the port is free. One remote command gathers them all (latency matters)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from specctl.hosts.transport import Completed, Transport

# Whether the server could bind its port now, as it binds it (a name resolved, v6 as v6, SO_REUSEADDR:
# TIME_WAIT leftovers do not count): `PYTHON -c PORT_PY ... PORT ADDRESS` (the last two arguments;
# ADDRESS engine.host, "": every interface). Prints `port_free=yes`, or `port_free=no CAUSE` where CAUSE
# names the error: EADDRINUSE, EADDRNOTAVAIL (not an address of this host), EAI_* (does not resolve).
PORT_PY = r"""
import errno, socket, sys
port, addr = sys.argv[-2], sys.argv[-1] or "0.0.0.0"
try:
    family = socket.getaddrinfo(addr, None, 0, socket.SOCK_STREAM)[0][0]
    s = socket.socket(family)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, int(port)))
    s.close()
    print("port_free=yes")
except socket.gaierror as exc:
    names = {getattr(socket, n): n for n in dir(socket) if n.startswith("EAI_")}
    print("port_free=no " + names.get(exc.errno, "EAI"))
except OSError as exc:
    print("port_free=no " + errno.errorcode.get(exc.errno or 0, type(exc).__name__))
"""

# The free space of the filesystem that holds the state root ($root; it need not exist yet: its
# nearest existing parent), in KiB: `disk_free_kib=N`. Read by the facts and again by the proof.
ROOM_SH = r"""
p="$root"; while [ ! -e "$p" ]; do p=$(dirname "$p"); done
df -Pk "$p" | awk 'NR==2 {print "disk_free_kib=" $4}'
"""

# $1 python, $2 state root, $3 port, $4 engine distribution, $5 the address the server binds
# (engine.host; none: every interface). Prints one `key=value` line per fact.
_FACTS = (
    r"""
py="$1"; root="$2"; port="$3"; dist="$4"; addr="${5:-}"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits 2>/dev/null | sed 's/^/gpu=/'
  nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/cuda=\1/p' | head -n 1
fi
"""
    + ROOM_SH.lstrip("\n")
    + r"""limit=""; command -v timeout >/dev/null 2>&1 && limit="timeout 15"  # an interpreter that hangs: no answer
$limit "$py" - "$dist" "$port" "$addr" <<'PY' 2>/dev/null || echo "python=missing"
import os, sys
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
    print("engine=" + engine_version(sys.argv[1]))
except Exception:  # importlib.metadata.PackageNotFoundError, or metadata it cannot read
    print("engine=missing")
"""
    + PORT_PY
    + """PY
"""
)


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
    port_error: str | None = None  # why the port would not bind (an errno name, EAI_*: the address did not resolve)

    def to_dict(self) -> dict[str, Any]:
        facts = asdict(self)
        if self.port_error is None:  # a free port's record stays as it was
            del facts["port_error"]
        return facts

    @property
    def port_taken(self) -> bool:
        """The port is bound by another socket (not: the address is wrong); a host that said only
        `no` is taken at its word."""
        return self.port_free is False and self.port_error in (None, "EADDRINUSE")


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
    port_free, _, port_error = values.get("port_free", "").partition(" ")
    return HostFacts(
        host,
        tuple(gpus),
        values.get("cuda"),
        None if values.get("python") in (None, "missing") else values["python"],
        None if values.get("engine") in (None, "missing") else values["engine"],
        round(int(free) / 1024**2, 2) if free and free.isdigit() else None,
        port,
        {"yes": True, "no": False}.get(port_free),
        port_error.strip() or None,
    )


def port_refusal(port: int, address: str, error: str | None) -> tuple[str, str]:
    """What a port that would not bind means, and what to do: the address is not this host's, does
    not resolve, or the port is taken (`error`: the errno name the check printed)."""
    where = address or "0.0.0.0"
    if error == "EADDRNOTAVAIL":
        return (
            f"engine.host {address} is not an address of this host",
            "set engine.host to one of the host's addresses (or leave it out: every interface)",
        )
    if error is not None and error.startswith("EAI"):
        return (
            f"engine.host {address} does not resolve on this host ({error})",
            "set engine.host to an address, or a name the host resolves",
        )
    if error in (None, "EADDRINUSE"):
        return f"port {port} is in use on {where}", "free the port, or set engine.port (or engine.host) to another one"
    return (
        f"port {port} cannot be bound on {where} ({error})",
        "set engine.port to one the server's user may bind (1024 and up)",
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
