"""Workloads: pinned prompt sets, built in or from a file, identified by the sha256 of their bytes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from specctl.errors import InputError

BUILTIN = Path(__file__).parent / "workloads"


@dataclass(frozen=True)
class Workload:
    """Chat requests (OpenAI-style message lists) with where they came from and their digest."""

    name: str
    sha256: str
    requests: tuple[tuple[dict[str, str], ...], ...]
    raw: bytes = b""


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN.glob("*.jsonl"))


def load_workload(name_or_path: str, base: Path | None = None) -> Workload:
    """A built-in workload by name, or a JSONL file (one `{"messages": [...]}` per line)."""
    path = BUILTIN / f"{name_or_path}.jsonl"
    if not path.exists():
        path = (base / name_or_path) if base and not Path(name_or_path).is_absolute() else Path(name_or_path)
    if not path.exists():
        raise InputError(f"workload {name_or_path!r} is neither built in nor a file",
                         fix=f"use one of {', '.join(builtin_names())} or a JSONL file of {{\"messages\": [...]}} lines")
    return parse_workload(name_or_path, path.read_bytes(), str(path))


def parse_workload(name: str, raw: bytes, source: str | None = None) -> Workload:
    """A workload from its bytes (a file, or the copy a release directory keeps)."""
    requests = []
    for number, line in enumerate(raw.decode().splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
            requests.append(tuple({"role": str(m["role"]), "content": str(m["content"])} for m in messages))
        except (ValueError, KeyError, TypeError):
            raise InputError(f"{source or name}:{number}: not a {{\"messages\": [...]}} line", fix="one JSON object per line") from None
    if not requests:
        raise InputError(f"{source or name}: the workload has no requests", fix="add one {\"messages\": [...]} line per request")
    return Workload(name, hashlib.sha256(raw).hexdigest(), tuple(requests), raw)
