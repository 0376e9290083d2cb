"""Profiles for the fast tier: the demo's two versions (the shipped tiny models, `engine.name: reference`),
served by the engine double (`engine.python` is its stand-in interpreter) on a free port."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import yaml

from specctl.flows.demo import write_inputs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fast_inputs(
    workdir: Path, double: Any, port: int | None = None, *, gates: bool = False, requests: int = 8, **v1: Any
) -> tuple[Path, Path]:
    """v1 (the trained layers) and v2 (extends v1, same-width wrong layers); keyword arguments are laid
    over v1's top-level sections (`verify={...}`, `hosts=[...]`, `engine={...}`)."""
    first, second = write_inputs(workdir, port or free_port(), gates=gates, requests=requests)
    data = yaml.safe_load(first.read_text())
    data["engine"]["python"] = double.python
    for key, value in v1.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    first.write_text(yaml.safe_dump(data, sort_keys=False))
    return first, second


def write_profile(path: Path, extends: str, version: int, name: str = "tiny-llama-demo", **sections: Any) -> Path:
    """A profile that extends another with a few sections changed (a new version)."""
    data = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "extends": extends,
        "metadata": {"name": name, "version": version},
        **sections,
    }
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ordered_run_ids(monkeypatch: Any) -> None:
    """Run ids that sort in the order they were made. specctl's are the UTC second plus a random
    suffix, so two runs within one second (routine in the fast tier) sort by chance, and "the newest
    release" is one of them at random; a test of what is newest makes them ordered."""
    import itertools
    from datetime import UTC, datetime

    from specctl.release import release as rel

    counter = itertools.count(1)

    def new_run_id(now: datetime | None = None) -> str:
        return (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ") + f"-{next(counter):06x}"

    monkeypatch.setattr(rel, "new_run_id", new_run_id)
