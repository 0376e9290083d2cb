"""`manifest import`: read a drafter (and its target, training state), build a manifest, write it atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from specctl.engines import get_engine
from specctl.errors import ManifestImportError
from specctl.facts.checkpoint import read_checkpoint
from specctl.plan.manifest_import import build_manifest
from specctl.profile import DrafterManifest

PIN_FIX = "name the repo at a commit, ORG/NAME@<40-hex commit>, or give the checkpoint's directory"


def split_ref(ref: str) -> tuple[str, str | None]:
    """`org/name@rev` or a path -> (model, revision). A directory that exists here, relative or under ~/,
    becomes its absolute path: the manifest names a local model by an absolute path (`drafter`
    relative to the current directory would read as a Hugging Face repo id)."""
    local = Path(ref).expanduser()
    if local.is_dir():
        return str(local.resolve()), None
    if "@" in ref and not local.exists():
        model, _, revision = ref.rpartition("@")
        return model, revision
    return ref, None


def read_training_state(path: Path) -> dict[str, Any]:
    """A SpecForge training_state.pt (its `args`), or a run config in JSON/YAML."""
    if path.suffix in (".pt", ".pth", ".bin"):
        import argparse

        import torch  # only here: manifest import of a .pt file is the one host-free path that needs it

        with torch.serialization.safe_globals([argparse.Namespace]):
            state = torch.load(path, map_location="cpu", weights_only=True)
        args = state.get("args") if isinstance(state, dict) else None
        return vars(args) if isinstance(args, argparse.Namespace) else dict(args or {})
    text = path.read_text(encoding="utf-8")
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ManifestImportError(f"{path} is not a mapping", fix="pass a SpecForge run config or training_state.pt")
    return data


def import_manifest(
    drafter_ref: str,
    *,
    target_ref: str,
    convention: str | None,
    training_state: Path | None,
    engine_version: str | None,
    name: str | None,
    offline: bool,
) -> dict[str, Any]:
    drafter_model, drafter_revision = split_ref(drafter_ref)
    target_model, target_revision = split_ref(target_ref)
    drafter = read_checkpoint(drafter_model, drafter_revision, offline=offline)
    target = read_checkpoint(target_model, target_revision, offline=offline)
    training = read_training_state(training_state) if training_state else None
    data = build_manifest(
        drafter,
        target,
        drafter_model=drafter_model,
        drafter_revision=drafter_revision,
        target_model=target_model,
        target_revision=target_revision,
        convention=convention,
        training=training,
        name=name or Path(drafter_model.rstrip("/")).name.lower(),
        engine=get_engine("sglang") if convention == "sglang" else None,
        engine_version=engine_version,
    )
    try:
        DrafterManifest.model_validate(data)  # what we write must load again
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ManifestImportError(
            f"the manifest would not load: {where}: {first['msg']}",
            fix=PIN_FIX
            if first["type"] == "revision_missing"
            else (first.get("ctx") or {}).get("fix") or "check the checkpoints named",
        ) from None
    return data


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and rename: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_yaml(data: dict[str, Any]) -> str:
    return (
        "# written by `specctl manifest import`; capture.layers are canonical (0-based decoder-layer outputs)\n"
        + yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
    )
