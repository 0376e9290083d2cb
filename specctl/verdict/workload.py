"""Workloads: pinned prompt sets, built in or from a file, identified by the sha256 of their bytes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from specctl.errors import InputError
from specctl.profile._files import MAX_WORKLOAD_BYTES, read_bounded, refusal
from specctl.profile._yaml import printable

BUILTIN = Path(__file__).parent / "workloads"
FORMAT_FIX = 'write one JSON object per line: {"messages": [{"role": "user", "content": "..."}]}'


@dataclass(frozen=True)
class Workload:
    """Chat requests (OpenAI-style message lists) with where they came from and their digest."""

    name: str
    sha256: str
    requests: tuple[tuple[dict[str, str], ...], ...]
    raw: bytes = b""


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN.glob("*.jsonl"))


def workload_path(name_or_path: str, base: Path | None = None) -> Path:
    """Where a workload is read from: the built-in set of that name, else a path relative to `base`."""
    if name_or_path in builtin_names():
        return BUILTIN / f"{name_or_path}.jsonl"
    path = Path(name_or_path)
    return base / path if base and not path.is_absolute() else path


def load_workload(name_or_path: str, base: Path | None = None) -> Workload:
    """A built-in workload by name, or a JSONL file (one `{"messages": [...]}` per line)."""
    path = workload_path(name_or_path, base)
    shown = printable(str(path))
    found = refusal(path, MAX_WORKLOAD_BYTES)
    if found is not None and found.missing:
        raise InputError(
            f"workload {name_or_path!r} is neither built in nor a file (looked at {shown})",
            fix=f'use one of {", ".join(builtin_names())} or a JSONL file of {{"messages": [...]}} lines',
        )
    if found is not None:
        raise InputError(f"workload {name_or_path!r}: {shown} {found.message}", fix=found.fix)
    return parse_workload(name_or_path, read_bounded(path, MAX_WORKLOAD_BYTES), str(path))


def parse_workload(name: str, raw: bytes, source: str | None = None) -> Workload:
    """A workload from its bytes (a file, or the copy a release directory keeps)."""
    where = printable(source or name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{where}: not UTF-8 text (byte {exc.start}): a workload is a JSONL text file", fix=FORMAT_FIX
        ) from None
    requests = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)["messages"]
            request = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in messages)
        except (ValueError, KeyError, TypeError, IndexError, RecursionError):
            raise InputError(f'{where}:{number}: not a {{"messages": [...]}} line', fix=FORMAT_FIX) from None
        if not request:
            raise InputError(f"{where}:{number}: a request without messages", fix=FORMAT_FIX)
        requests.append(request)
    if not requests:
        raise InputError(f"{where}: the workload has no requests", fix='add one {"messages": [...]} line per request')
    return Workload(name, hashlib.sha256(raw).hexdigest(), tuple(requests), raw)
