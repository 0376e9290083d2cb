"""Profiles, drafter manifests and inventories: the file formats, validated strictly."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from specctl.errors import DocumentError, DocumentProblem
from specctl.profile._yaml import load_yaml
from specctl.profile.document import Loaded, content_sha256, load_document
from specctl.profile.manifest import DrafterManifest
from specctl.profile.profile import Profile

__all__ = [
    "DrafterManifest",
    "Loaded",
    "Profile",
    "content_sha256",
    "load_document",
    "load_manifest",
    "load_profile",
    "model_for",
    "validate_file",
]

KINDS = ("Profile", "DrafterManifest", "Inventory")


def model_for(kind: str) -> type[BaseModel]:
    """The schema of a document kind (the inventory model loads only when asked for)."""
    if kind == "Inventory":
        from specctl.profile.inventory import Inventory

        return Inventory
    models: dict[str, type[BaseModel]] = {"Profile": Profile, "DrafterManifest": DrafterManifest}
    return models[kind]


def load_profile(path: Path | str, *, check_files: bool = True) -> Loaded[Profile]:
    """Load and validate a Profile file (with its `extends:` chain) and, unless `check_files` is off
    (commands that only name a deployed profile, like stop), the files it names that a deploy reads."""
    loaded = load_document(path, Profile, "Profile")
    if check_files:
        from specctl.profile.references import check_references

        check_references(loaded)
    return loaded


def load_manifest(path: Path | str) -> Loaded[DrafterManifest]:
    """Load and validate a DrafterManifest file."""
    return load_document(path, DrafterManifest, "DrafterManifest")


def validate_file(path: Path | str) -> tuple[str, str]:
    """Validate a file of whichever kind it declares; returns (kind, sha256 of the resolved content)."""
    doc = load_yaml(Path(path))
    kind = doc.data.get("kind") if isinstance(doc.data, dict) else None
    if kind not in KINDS:
        pos = doc.position(("kind",))
        raise DocumentError(
            [
                DocumentProblem(
                    str(path),
                    pos.line if pos else None,
                    pos.column if pos else None,
                    "kind",
                    f"unknown kind {kind!r}",
                    f"set `kind:` to one of {', '.join(KINDS)}",
                )
            ]
        )
    if kind == "Profile":
        return kind, load_profile(path).sha256
    loaded: Loaded[BaseModel] = load_document(path, model_for(kind), kind)
    return kind, loaded.sha256
