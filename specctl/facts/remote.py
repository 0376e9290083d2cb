"""Checkpoint metadata read where the weights live: on a host, by `_meta_host.py` over its transport.

A model given as an absolute path is a path on the hosts. When the operator's machine cannot see
it (a laptop; the weights on the GPU hosts' local disks) the same facts `read_checkpoint` gives for
a local directory are read on a host instead: one round trip per host for every path at once, the
answer turned into the same `CheckpointMeta`, so every check works unchanged.

A deploy reads them on every host it deploys to, in parallel, and refuses before anything is
stopped when the hosts hold different checkpoints under the same path: the checks can vouch for
one checkpoint only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specctl.errors import CheckpointError, HostError
from specctl.facts.checkpoint import INDEX_FILE, MAX_CHECKPOINT_JSON_BYTES, MAX_HEADER_BYTES, CheckpointMeta, Tensor
from specctl.hosts.local import LOCAL
from specctl.hosts.transport import Completed, Transport
from specctl.profile.profile import is_local_path

if TYPE_CHECKING:
    from specctl.hosts.inventory import HostSpec
    from specctl.profile.profile import Profile

READ_TIMEOUT_S = 120.0  # headers only, but a checkpoint of 160 shards on a network file system takes a while
_SCRIPT = Path(__file__).with_name("_meta_host.py")  # read when a host is asked, not at import (check's start-up)
_SHOWN = 3  # differences named per kind before "and N more"

_FIXES = {
    "missing": (
        "copy the checkpoint to {path} on {host}, or fix the path "
        "(a model given as an absolute path is a directory on the hosts)"
    ),
    "not-directory": "point the model at the checkpoint directory",
    "no-config": "point the profile at a Hugging Face checkpoint directory (config.json + *.safetensors)",
    "shard-missing": "copy the complete checkpoint to {host}, or fix the index",
    "header": "copy the shard to {host} again; it is truncated or not a safetensors file",
    "bad-json": "copy the file to {host} again; it is not valid JSON",
    "unreadable": "make the checkpoint readable for the user specctl logs in as on {host}",
}


@dataclass(frozen=True)
class HostCheckpoint:
    """One checkpoint as one host has it: its facts and the shards they came from, or why it cannot be read."""

    host: str
    path: str
    revision: str | None = None
    meta: CheckpointMeta | None = None
    shards: tuple[str, ...] = ()
    kind: str | None = None  # why not, by the reader's kind (missing, header, ...)
    problem: str | None = None  # the reader's message, without the host

    @property
    def error(self) -> CheckpointError | None:
        if self.problem is None:
            return None
        fix = _FIXES.get(self.kind or "", "check the file on {host}").format(path=self.path, host=self.host)
        return CheckpointError(
            f"on host {self.host}: {self.problem}", source=self.path, revision=self.revision, fix=fix
        )

    @property
    def result(self) -> CheckpointMeta | CheckpointError:
        meta, error = self.meta, self.error
        if error is not None:
            return error
        assert meta is not None
        return meta


def command(python: str, paths: Sequence[str]) -> list[str]:
    request = {
        "paths": list(paths),
        "index_file": INDEX_FILE,
        "max_header_bytes": MAX_HEADER_BYTES,
        "max_json_bytes": MAX_CHECKPOINT_JSON_BYTES,
    }
    return [python, "-c", _SCRIPT.read_text(encoding="utf-8"), json.dumps(request, sort_keys=True)]


def read_all(
    transport: Transport, python: str, paths: Sequence[str], revisions: Mapping[str, str | None] | None = None
) -> dict[str, HostCheckpoint]:
    """Every path's checkpoint as the host has it, in one round trip. A host that cannot run the
    reader (unreachable, no such interpreter) raises HostError; a checkpoint it cannot read is an
    answer (`HostCheckpoint.error`)."""
    argv = command(python, paths)
    done = transport.run(argv, timeout_s=READ_TIMEOUT_S, check=False, retry=True)  # reads only: safe twice
    answers = _answer(transport.name, python, done)
    out: dict[str, HostCheckpoint] = {}
    for path in paths:
        entry = next((a for a in answers if isinstance(a, dict) and a.get("path") == path), None)
        if entry is None:
            raise HostError(
                f"{transport.name}: the checkpoint reader did not answer for {path}",
                host=transport.name,
                fix="run the check again; report it if it persists",
            )
        out[path] = _checkpoint(transport.name, entry, (revisions or {}).get(path))
    return out


def read_on_host(transport: Transport, python: str, path: str, revision: str | None = None) -> CheckpointMeta:
    """The metadata of checkpoint directory `path` on the host; CheckpointError when the host cannot read it."""
    result = read_all(transport, python, [path], {path: revision})[path].result
    if isinstance(result, CheckpointError):
        raise result
    return result


def _answer(host: str, python: str, done: Completed) -> list[Any]:
    """The reader's answer: the last stdout line that is its JSON object (a login shell may print before it)."""
    for line in reversed(done.stdout.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        found = value.get("checkpoints") if isinstance(value, dict) else None
        if isinstance(found, list):
            return found
    tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
    if done.rc == 127:
        raise HostError(
            f"{host}: cannot read checkpoint metadata: {python} not found ({tail})",
            host=host,
            fix="set engine.python in the profile to the engine's interpreter on the host",
        )
    raise HostError(
        f"{host}: the checkpoint reader exited {done.rc} without an answer: {tail}",
        host=host,
        fix=f"check that {python} (engine.python) runs on {host}",
    )


def _checkpoint(host: str, entry: Mapping[str, Any], revision: str | None) -> HostCheckpoint:
    path = str(entry["path"])
    error = entry.get("error")
    if isinstance(error, dict):
        return HostCheckpoint(host, path, revision, kind=str(error.get("kind")), problem=str(error.get("message")))
    try:
        config = entry["config"]
        assert isinstance(config, dict)
        tensors = {
            str(name): Tensor(str(dtype), tuple(int(d) for d in shape), int(nbytes))
            for name, (dtype, shape, nbytes) in entry["tensors"].items()
        }
        files = tuple(str(f) for f in entry["files"])
        shards = tuple(str(s) for s in entry["shards"])
    except (KeyError, TypeError, ValueError, AssertionError, AttributeError):
        raise HostError(
            f"{host}: the checkpoint reader's answer for {path} is malformed",
            host=host,
            fix="run the check again; report it if it persists",
        ) from None
    return HostCheckpoint(host, path, revision, CheckpointMeta(path, revision, config, files, tensors), shards)


@dataclass(frozen=True)
class HostRead:
    """Checkpoints read on hosts: each path's facts (or why not), the hosts that answered, and
    those that did not (with why)."""

    results: Mapping[str, CheckpointMeta | CheckpointError]
    hosts: tuple[str, ...]
    over_ssh: bool = True
    unanswered: Mapping[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        how = " over SSH" if self.over_ssh else ""
        text = (
            f"host {self.hosts[0]}{how}"
            if len(self.hosts) == 1
            else f"hosts {', '.join(self.hosts)}{how} (the same on each)"
        )
        if self.unanswered:
            text += "; not answering: " + "; ".join(f"{h}: {why}" for h, why in self.unanswered.items())
        return text


def read_on_first(
    hosts: Sequence[HostSpec],
    python: str,
    paths: Sequence[str],
    *,
    revisions: Mapping[str, str | None] | None = None,
    ssh_config: str | None = None,
    accept_new_host_key: bool = False,
) -> HostRead:
    """The checkpoints as the first host has them (a check's answer; the others are assumed to hold
    the same, which a deploy verifies). A host that does not answer is a HostError: trying the next
    ones could cost a connect timeout each, and `--on HOST` names another."""
    host = hosts[0]
    found = read_all(
        host.transport(ssh_config=ssh_config, accept_new_host_key=accept_new_host_key), python, paths, revisions
    )
    return HostRead({p: c.result for p, c in found.items()}, (host.name,), not _this_machine(host))


def read_on_hosts(
    hosts: Sequence[HostSpec],
    python: str,
    paths: Sequence[str],
    *,
    revisions: Mapping[str, str | None] | None = None,
    ssh_config: str | None = None,
    accept_new_host_key: bool = False,
) -> HostRead:
    """The checkpoints as every host has them, read in parallel (one round trip each), compared:
    CheckpointError naming the hosts and what differs when they are not the same. A host that
    cannot be reached is left out (the deploy fails it on its own); none answering is a HostError."""
    from specctl.hosts.group import run_group

    group = run_group(
        hosts,
        lambda h: read_all(
            h.transport(ssh_config=ssh_config, accept_new_host_key=accept_new_host_key), python, paths, revisions
        ),
    )
    answered = [h for h in hosts if h.name in group.results]
    if not answered:
        failure = next(iter(group.errors.values()))
        raise failure if isinstance(failure, HostError) else HostError(str(failure), host=hosts[0].name)
    unanswered = {name: getattr(exc, "message", str(exc)) for name, exc in group.errors.items()}
    problems = [text for path in paths if (text := differences([group.results[h.name][path] for h in answered]))]
    if problems:
        raise CheckpointError(
            "the hosts hold different checkpoints under the same path: " + "; ".join(problems),
            source=paths[0],
            fix="make the checkpoint identical on every host (copy it from one to the others), "
            "or deploy to the hosts that agree (--hosts); nothing was stopped",
        )
    first = group.results[answered[0].name]
    return HostRead(
        {p: first[p].result for p in paths},
        tuple(h.name for h in answered),
        not all(_this_machine(h) for h in answered),
        unanswered,
    )


def differences(copies: Sequence[HostCheckpoint]) -> str | None:
    """What differs between the hosts' copies of one checkpoint, the first host's copy as the
    reference, hosts with the same copy named together; None when all are the same."""
    groups: list[list[HostCheckpoint]] = []
    for copy in copies:
        same = next((g for g in groups if not _differ(g[0], copy)), None)
        if same is None:
            groups.append([copy])
        else:
            same.append(copy)
    if len(groups) < 2:
        return None
    reference = groups[0]
    parts = []
    for other in groups[1:]:
        parts.append(f"{_names(reference)} vs {_names(other)}: " + ", ".join(_differ(reference[0], other[0])))
    return f"{copies[0].path}: " + "; ".join(parts)


def _names(group: Sequence[HostCheckpoint]) -> str:
    return "+".join(c.host for c in group)


def _differ(a: HostCheckpoint, b: HostCheckpoint) -> list[str]:
    """The differences between two hosts' copies, each said with both hosts' values."""
    if a.meta is None or b.meta is None:
        if a.meta is None and b.meta is None:
            return [] if a.problem == b.problem else [f"on {a.host}: {a.problem}; on {b.host}: {b.problem}"]
        broken = a if a.meta is None else b
        return [f"on {broken.host}: {broken.problem}"]
    out = []
    only_a, only_b = sorted(set(a.shards) - set(b.shards)), sorted(set(b.shards) - set(a.shards))
    if only_a or only_b:
        out.append(
            "shard set: "
            + ", ".join(
                [f"only {a.host} has {_few(only_a)}"] * bool(only_a)
                + [f"only {b.host} has {_few(only_b)}"] * bool(only_b)
            )
        )
    keys = sorted(k for k in {*a.meta.config, *b.meta.config} if a.meta.config.get(k) != b.meta.config.get(k))
    if keys:
        out.append(
            "config.json "
            + ", ".join(
                f"{k}: {_short(a.meta.config.get(k))} on {a.host}, {_short(b.meta.config.get(k))} on {b.host}"
                for k in keys[:_SHOWN]
            )
            + (f" (and {len(keys) - _SHOWN} more keys)" if len(keys) > _SHOWN else "")
        )
    names = sorted(n for n in {*a.meta.tensors, *b.meta.tensors} if a.meta.tensors.get(n) != b.meta.tensors.get(n))
    if names:
        out.append(
            f"header tensors ({len(names)} differ): "
            + ", ".join(
                f"{n}: {_tensor(a.meta.tensors.get(n))} on {a.host}, {_tensor(b.meta.tensors.get(n))} on {b.host}"
                for n in names[:_SHOWN]
            )
        )
    return out


def _few(names: Sequence[str]) -> str:
    return ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _short(value: Any) -> str:
    """A config value as JSON, cut short: a nested block (text_config) can be long."""
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _tensor(t: Tensor | None) -> str:
    return "absent" if t is None else f"{t.dtype}{list(t.shape)}"


def _this_machine(host: HostSpec) -> bool:
    return host.name == LOCAL and host.ssh_alias is None


@dataclass(frozen=True)
class ReadOnHosts:
    """Where the static checks read the checkpoints a profile names as host paths, when this
    machine cannot see them (or, `forced`, always): on the first of `hosts`, or on `every` one
    of them, compared (a deploy's hosts)."""

    hosts: Callable[[Profile], Sequence[HostSpec]]  # resolved only when a path needs reading there
    ssh_config: str | None = None
    accept_new_host_key: bool = False
    every: bool = False
    forced: bool = False  # check --on HOST: read there even when this machine has the directory

    def wanted(self, model: str) -> bool:
        """Whether `model` is to be read on the hosts: a host path this machine lacks (or any, forced)."""
        return is_local_path(model) and (self.forced or not Path(model).is_dir())

    def read(self, profile: Profile, models: Mapping[str, str | None]) -> HostRead | None:
        """`models` (path -> revision) read on the hosts; None when there is no host to read them on."""
        hosts = [h for h in self.hosts(profile) if self.forced or self.every or not _this_machine(h)]
        if not hosts:
            return None
        read = read_on_hosts if self.every else read_on_first
        return read(
            hosts,
            profile.engine.python,
            list(models),
            revisions=models,
            ssh_config=self.ssh_config,
            accept_new_host_key=self.accept_new_host_key,
        )
