"""Staging: the target and drafter checkpoints made present in a host's Hugging Face cache before
anything running is stopped, so a deploy switches in seconds instead of downloading during an outage.

The work happens on the host, by the engine's own Python (`_stage_host.py`), with the launch
environment's cache settings (HF_HOME, HF_HUB_CACHE, HF_ENDPOINT from `engine.env`) and the
profile's secrets (HF_TOKEN) sent over the transport's stdin channel, never in argv or a file. A
checkpoint already staged costs one round trip and no network; a missing one is sized against the
cache's free space first, and refused before any byte is fetched when it does not fit.

Without the Hub (`offline`, or the Hub not answering the host) a snapshot placed in the host's cache
by other means is staged when it is complete, "content unverified"; `verify` hashes every file
again against the Hub's checksums, whatever the hash cache says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specctl.errors import HostError
from specctl.hosts.transport import Completed, Transport
from specctl.profile.profile import is_local_path

if TYPE_CHECKING:
    from specctl.profile.profile import Profile

# What the engine loads: config and tokenizer files, the index and the safetensors shards, and the
# modelling code of trust-remote-code checkpoints; never .bin/.pt duplicates, GGUF or `original/`.
PATTERNS = ("*.json", "*.safetensors", "*.py", "*.model", "*.tiktoken", "*.txt", "*.jinja", "tokenizer*")
RESERVE_BYTES = 2 * 1024**3  # left free on the cache's file system after staging
STAGE_TIMEOUT_S = 24 * 3600.0
_SCRIPT = (Path(__file__).with_name("_stage_host.py")).read_text(encoding="utf-8")
OFFLINE_ENV = "HF_HUB_OFFLINE"
CHECKPOINTS_FILE = "checkpoints.json"  # in a release: the content ids of the staged files it served


@dataclass(frozen=True)
class Checkpoint:
    """A Hugging Face repo at a revision, to stage."""

    repo: str
    revision: str | None


@dataclass(frozen=True)
class Staged:
    """A checkpoint present on a host: where its snapshot is, what staging it fetched, and its files'
    content ids (`contents`: name -> (size, "sha256:<hex>" or "git:<blob id>" or None)), checked
    against the Hub's published ones unless `unverified` says why not."""

    repo: str
    commit: str
    snapshot: str
    bytes: int
    fetched: int
    unverified: str | None = None
    hashed: int = 0  # bytes read to hash in this stage
    contents: Mapping[str, tuple[int, str | None]] = field(default_factory=dict)
    # files that were in the cache at their size but not with the Hub's content (a shard corrupted in
    # place), fetched again by this stage, and their bytes: a fetch `fetched` (missing by size) omits
    refetched: tuple[str, ...] = ()
    refetched_bytes: int = 0

    @property
    def verified(self) -> bool:
        return self.unverified is None

    def to_dict(self) -> dict[str, Any]:
        """What the output and the ledger keep (the per-file ids go to the release's checkpoints.json)."""
        keep = ("repo", "commit", "snapshot", "bytes", "fetched", "unverified", "hashed", "refetched_bytes")
        return {**{k: getattr(self, k) for k in keep}, "refetched": list(self.refetched), "verified": self.verified}

    def refetch_text(self) -> str:
        """The re-fetch as a person reads it ("" when there was none)."""
        if not self.refetched:
            return ""
        n = len(self.refetched)
        return (
            f"re-fetched {n} file{'s' if n != 1 else ''} ({size_text(self.refetched_bytes)}) whose content "
            "did not match the Hub's checksum"
        )

    def state(self) -> str:
        """How a person reads it: its size, what was fetched (and fetched again because its content did
        not match), whether its content was checked."""
        fetched = f", fetched {size_text(self.fetched)}" if self.fetched else ""
        refetched = f", {self.refetch_text()}" if self.refetched else ""
        checked = ", content unverified" if self.unverified else ""
        return f"staged ({size_text(self.bytes)}{fetched}{refetched}){checked}"

    def checksums(self) -> dict[str, Any]:
        """The checkpoint's entry in a release's checkpoints.json."""
        return {
            "repo": self.repo,
            "commit": self.commit,
            "verified": self.verified,
            "unverified": self.unverified,
            "files": [
                {"name": name, "size": size, "id": cid, "verified": self.verified and cid is not None}
                for name, (size, cid) in sorted(self.contents.items())
            ],
        }


@dataclass(frozen=True)
class Planned:
    """What staging a missing checkpoint would fetch (a dry run's answer), and where it would be."""

    repo: str
    commit: str
    snapshot: str
    bytes: int
    fetch: int


@dataclass
class StageProgress:
    """One checkpoint's download as the host reports it, with a rate and an ETA from its reports."""

    repo: str
    done: int
    total: int
    rate: float | None = None  # bytes per second since the first report
    first: tuple[float, int] | None = None

    def update(self, done: int, total: int, now: float) -> None:
        if self.first is None:
            self.first = (now, done)
        elif now > self.first[0]:
            self.rate = (done - self.first[1]) / (now - self.first[0])
        self.done, self.total = done, total

    @property
    def eta_s(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate else None

    def text(self) -> str:
        share = f" ({100 * self.done / self.total:.0f} %)" if self.total else ""
        rate = f", {size_text(self.rate)}/s" if self.rate else ""
        eta = f", ETA {_duration(self.eta_s)}" if self.eta_s is not None else ""
        return f"staging {self.repo}: {size_text(self.done)} of {size_text(self.total)}{share}{rate}{eta}"

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "done": self.done, "total": self.total, "rate": self.rate, "eta_s": self.eta_s}


class StageFailed(HostError):
    """Staging could not make a checkpoint present; nothing running was touched."""

    def __init__(self, message: str, *, host: str, kind: str, fix: str) -> None:
        super().__init__(message, host=host, fix=fix)
        self.kind = kind


def checkpoints_of(models: Sequence[tuple[str, str | None]]) -> tuple[Checkpoint, ...]:
    """The Hub repos among (model, revision) pairs; a path is on the host already and is not staged."""
    seen: dict[str, Checkpoint] = {}
    for model, revision in models:
        if not is_local_path(model) and model not in seen:
            seen[model] = Checkpoint(model, revision)
    return tuple(seen.values())


def profile_checkpoints(profile: Profile, *, baseline: bool) -> tuple[Checkpoint, ...]:
    """The Hub checkpoints a profile's launch loads: the target, and the drafter unless it is a baseline."""
    models = [(profile.target.model, profile.target.revision)]
    if profile.drafter is not None and not baseline:
        models.append((profile.drafter.model, profile.drafter.revision))
    return checkpoints_of(models)


def host_env(engine_env: Mapping[str, str], hf_home: str | None) -> dict[str, str]:
    """The launch environment on one host: the inventory's `hf_home` for that host, when it has
    one, in place of the profile's cache settings."""
    if hf_home is None:
        return dict(engine_env)
    return {**{k: v for k, v in engine_env.items() if k not in ("HF_HOME", "HF_HUB_CACHE")}, "HF_HOME": hf_home}


def staging_env(
    engine_env: Mapping[str, str], secrets_env: Mapping[str, str], hf_home: str | None = None, *, offline: bool = False
) -> dict[str, str]:
    """The launch environment's cache settings on that host and the secrets; online unless `offline`,
    whatever the launch or the host's own environment says (staging is the one step that is meant
    to fetch)."""
    # huggingface_hub's own progress bars would pile up on stderr for the whole download: the
    # script reports progress itself
    return {
        **host_env(engine_env, hf_home),
        **secrets_env,
        OFFLINE_ENV: "1" if offline else "0",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }


def command(
    python: str,
    root: str,
    checkpoints: Sequence[Checkpoint],
    mode: str,
    *,
    offline: bool = False,
    verify: bool = False,
) -> list[str]:
    request = {
        "mode": mode,
        "root": root,
        "patterns": list(PATTERNS),
        "reserve": RESERVE_BYTES,
        "checkpoints": [{"repo": c.repo, "revision": c.revision} for c in checkpoints],
        "offline": offline,
        "verify": verify,
    }
    return [python, "-c", _SCRIPT, json.dumps(request, sort_keys=True)]


def check(
    transport: Transport,
    *,
    python: str,
    root: str,
    checkpoints: Sequence[Checkpoint],
    env: Mapping[str, str],
    offline: bool = False,
) -> tuple[list[Staged], list[Checkpoint]]:
    """What is staged on the host already, from its disk alone: one round trip (a checkpoint staged
    "content unverified" counts only `offline`: otherwise the Hub is asked to check it)."""
    events = _events(transport, _run(transport, command(python, root, checkpoints, "check", offline=offline), env))
    staged = [_staged(e) for e in events if e["event"] == "staged"]
    have = {s.repo for s in staged}
    return staged, [c for c in checkpoints if c.repo not in have]


@dataclass(frozen=True)
class StagePlan:
    """A dry run's answer for one host: what is staged, what the rest would fetch, and the disk."""

    staged: list[Staged]
    planned: list[Planned]
    cache: str | None = None
    free: int | None = None
    need: int = 0

    @property
    def fits(self) -> bool:
        return self.free is None or self.need + RESERVE_BYTES <= self.free


def plan(
    transport: Transport,
    *,
    python: str,
    root: str,
    checkpoints: Sequence[Checkpoint],
    env: Mapping[str, str],
    offline: bool = False,
) -> StagePlan:
    """What is staged, and what the rest would fetch against the cache's free space (asks the Hub
    from the host unless `offline`; downloads nothing)."""
    events = _events(transport, _run(transport, command(python, root, checkpoints, "plan", offline=offline), env))
    disk = next((e for e in events if e["event"] == "disk"), None)
    return StagePlan(
        [_staged(e) for e in events if e["event"] == "staged"],
        [
            Planned(e["repo"], e["commit"], e["snapshot"], int(e["bytes"]), int(e["fetch"]))
            for e in events
            if e["event"] == "plan"
        ],
        disk["cache"] if disk else None,
        int(disk["free"]) if disk else None,
        int(disk["need"]) if disk else 0,
    )


def stage(
    transport: Transport,
    *,
    python: str,
    root: str,
    checkpoints: Sequence[Checkpoint],
    env: Mapping[str, str],
    on_progress: Callable[[StageProgress], None] = lambda p: None,
    slot: Callable[[], Any] | None = None,
    offline: bool = False,
    verify: bool = False,
) -> list[Staged]:
    """Make every checkpoint present on the host. Already staged: one round trip. Otherwise (in a
    `slot`, the fleet's cap on hosts downloading at once) size, check the disk, download. `offline`:
    the Hub is not asked (a complete snapshot in the cache is staged "content unverified");
    `verify`: every file is hashed again against the Hub's checksums."""
    staged: list[Staged] = []
    missing = list(checkpoints)
    if not verify:
        staged, missing = check(transport, python=python, root=root, checkpoints=checkpoints, env=env, offline=offline)
    if not missing:
        return staged
    progress: dict[str, StageProgress] = {}
    lines: list[str] = []

    def line(text: str) -> None:
        lines.append(text)
        event = _event(text)
        if event is not None and event["event"] == "progress":
            current = progress.setdefault(event["repo"], StageProgress(event["repo"], 0, int(event["total"])))
            current.update(int(event["done"]), int(event["total"]), time.monotonic())
            on_progress(current)

    argv = command(python, root, missing, "fetch", offline=offline, verify=verify)
    if slot is None:
        done = transport.stream(argv, line, timeout_s=STAGE_TIMEOUT_S, env=dict(env))
    else:
        with slot():
            done = transport.stream(argv, line, timeout_s=STAGE_TIMEOUT_S, env=dict(env))
    events = _events(transport, done)
    return staged + [_staged(e) for e in events if e["event"] == "staged"]


def _run(transport: Transport, argv: list[str], env: Mapping[str, str]) -> Completed:
    return transport.run(
        argv, env=dict(env) or None, timeout_s=300, check=False, retry=True
    )  # reads and sizes: safe twice


def _event(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "event" in value else None


def _events(transport: Transport, done: Completed) -> list[dict[str, Any]]:
    """The script's events; its error, as the StageFailed it is."""
    events = [e for e in map(_event, done.stdout.splitlines()) if e is not None]
    for e in events:
        if e["event"] == "error":
            raise StageFailed(
                f"{transport.name}: staging refused: {e['message']}",
                host=transport.name,
                kind=e["kind"],
                fix=_FIXES.get(e["kind"], "nothing running was stopped; run `specctl stage` again to resume"),
            )
    if done.rc != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise StageFailed(
            f"{transport.name}: staging exited {done.rc}: {' | '.join(tail)}",
            host=transport.name,
            kind="exit",
            fix="nothing running was stopped; run `specctl stage` again (a download resumes where it stopped)",
        )
    return events


_FIXES = {
    "no-hub": "install huggingface_hub in the engine's environment (it comes with sglang), or check engine.python",
    "gated": (
        "accept the repo's terms on the Hub, put a token in HF_TOKEN and list HF_TOKEN under the profile's secrets:"
    ),
    "repo": "check the repo id; a private repo needs HF_TOKEN under the profile's secrets:",
    "revision": "pin a revision the repo has (a 40-hex commit id from its history)",
    "network": (
        "nothing running was stopped; check the host's route to the Hub (or HF_ENDPOINT), then stage again: it resumes"
    ),
    "disk": "free space on the cache's file system, or point HF_HOME / HF_HUB_CACHE (engine.env) at a larger one",
    "incomplete": "run `specctl stage` again: the download resumes",
    "not-cached": (
        "put the snapshot in the host's cache in the Hugging Face layout (blobs/, snapshots/<commit>/, refs/), "
        "e.g. copied from `hf download REPO --revision COMMIT --cache-dir DIR` run where the Hub is reachable; "
        "or stage from a host that reaches the Hub"
    ),
    "incomplete-cache": (
        "copy the missing or short file into the snapshot again (the whole snapshot from a complete cache), "
        "or stage with the Hub reachable: it fetches only what is missing"
    ),
    "corrupt": (
        "the file the Hub served does not match the checksum the Hub publishes: check a mirror or proxy "
        "between the host and the Hub (HF_ENDPOINT), then stage again; nothing running was stopped"
    ),
}


def _staged(e: Mapping[str, Any]) -> Staged:
    return Staged(
        e["repo"],
        e["commit"],
        e["snapshot"],
        int(e["bytes"]),
        int(e.get("fetched", 0)),
        e.get("unverified"),
        int(e.get("hashed", 0)),
        {name: (int(size or 0), cid) for name, (size, cid) in (e.get("contents") or {}).items()},
        tuple(str(name) for name in e.get("refetched") or ()),
        int(e.get("refetched_bytes", 0)),
    )


def size_text(n: float | None) -> str:
    value = float(n or 0)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.2f} TB"


def _duration(seconds: float | None) -> str:
    s = int(seconds or 0)
    return f"{s} s" if s < 120 else f"{s // 60} min" if s < 7200 else f"{s // 3600} h {s % 3600 // 60} min"
