"""Loading a specctl YAML document: apiVersion/kind, `extends:` overlays, schema errors with positions.

This is the one place where YAML becomes a validated model; every problem it reports names the
file, line, column and field, and says how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from specctl.errors import DocumentError, DocumentProblem
from specctl.profile._files import MAX_DOCUMENT_BYTES, refusal
from specctl.profile._yaml import (
    Path_,
    Position,
    YamlDocument,
    capped,
    field_name,
    load_yaml,
    printable,
    shorten,
    source_line,
)

API_VERSION = "specctl/v1"
YAML_SUFFIXES = (".yaml", ".yml")  # what `extends:` may name: another document, never any file
MAX_EXTENDS_DEPTH = 16  # files in one extends chain; real chains have two or three
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Loaded(Generic[M]):
    """A validated document: the model, where it came from, and the sha256 of its resolved content."""

    model: M
    path: Path
    sha256: str
    chain: tuple[Path, ...]  # the file and every file it extends, nearest first
    positions: dict[Path_, Position]
    lines: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)  # each file's source lines

    def file_of(self, *field: str | int) -> Path:
        """The file that wrote `field` (relative paths in a profile are relative to that file)."""
        position = self.positions.get(tuple(field))
        return Path(position.file) if position else self.path

    def problem(self, field: Path_, message: str, fix: str) -> DocumentProblem:
        """A problem found after validation, located at `field` as the schema's own problems are."""
        pos = _nearest(self.positions, field)
        line = pos.line if pos else None
        return DocumentProblem(
            pos.file if pos else str(self.path),
            line,
            pos.column if pos else None,
            field_name(field),
            message,
            fix,
            source_line(self.lines.get(pos.file, ()) if pos else (), line),
        )


def content_sha256(model: BaseModel) -> str:
    """Stable digest of a model's resolved content: canonical JSON, sorted keys, no whitespace."""
    canonical = json.dumps(model.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def load_document(path: Path | str, model: type[M], kind: str) -> Loaded[M]:
    """Load, resolve `extends:` and validate one document of `kind` against `model`."""
    path = Path(path)
    data, positions, lines, chain = _resolve(path, kind, ())
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        raise DocumentError(capped(_problems(exc, model, positions, lines, str(path)))) from None
    return Loaded(validated, path, content_sha256(validated), chain, positions, lines)


def _resolve(
    path: Path, kind: str, seen: tuple[Path, ...]
) -> tuple[dict[str, Any], dict[Path_, Position], dict[str, tuple[str, ...]], tuple[Path, ...]]:
    """Read `path` and merge it over the documents it extends, keeping every value's position."""
    doc = load_yaml(path)  # first: it refuses what `resolve` cannot handle, such as a symlink loop
    real = path.resolve()
    if real in seen:
        cycle = " -> ".join(str(p) for p in (*seen, real))
        raise DocumentError(
            [
                DocumentProblem(
                    str(path), None, None, "extends", f"extends cycle: {cycle}", "remove one of the extends links"
                )
            ]
        )
    data = _header(doc, kind)
    lines = {doc.file: doc.lines}
    extends = data.pop("extends", None)
    if extends is None:
        return data, doc.positions, lines, (path,)
    if not isinstance(extends, str) or not extends:
        raise DocumentError(
            [
                _at(
                    doc,
                    ("extends",),
                    "extends must be a path to another profile",
                    "write `extends: base.yaml` (relative to this file)",
                )
            ]
        )
    if len(seen) + 1 >= MAX_EXTENDS_DEPTH:
        raise DocumentError(
            [
                _at(
                    doc,
                    ("extends",),
                    f"extends chains are limited to {MAX_EXTENDS_DEPTH} files",
                    "extend a profile that extends fewer others",
                )
            ]
        )
    base_path = path.parent / extends
    found = refusal(base_path, MAX_DOCUMENT_BYTES)
    if found is not None:
        raise DocumentError(
            [
                _at(
                    doc,
                    ("extends",),
                    f"extends target {extends!r} ({printable(str(base_path))}): {found.message}",
                    f"{found.fix}; the path is relative to this file",
                )
            ]
        )
    _parent(doc, extends, base_path, kind)
    base, base_positions, base_lines, chain = _resolve(base_path, kind, (*seen, real))
    merged = _merge(base, data)
    positions = {p: pos for p, pos in base_positions.items() if not _replaced(p, data)}
    positions.update(doc.positions)
    return merged, positions, {**base_lines, **lines}, (path, *chain)


def _parent(doc: YamlDocument, extends: str, base_path: Path, kind: str) -> None:
    """Refuse an `extends:` target that is not a YAML document of `kind`, by its name (.yaml or .yml)
    and by its content (a YAML mapping with this apiVersion and kind), before it is merged. The error
    never quotes the refused file: `extends: /etc/shadow` must not print a line of it."""
    where = f"extends target {extends!r} ({printable(str(base_path))})"
    fix = (
        f"name a {kind} file (.yaml or .yml, `apiVersion: {API_VERSION}`, `kind: {kind}`);"
        " the path is relative to this file"
    )
    if base_path.suffix.lower() not in YAML_SUFFIXES:
        raise DocumentError(
            [_at(doc, ("extends",), f"{where} is not a YAML file (its name ends neither in .yaml nor .yml)", fix)]
        )
    try:
        data = load_yaml(base_path).data
    except DocumentError:
        why = "it is not readable UTF-8 YAML"
    else:
        if not isinstance(data, dict):
            why = "it is not a YAML mapping"
        elif data.get("apiVersion") != API_VERSION or data.get("kind") != kind:
            why = f"it is not a {kind} (apiVersion {API_VERSION}, kind {kind})"
        else:
            return
    raise DocumentError([_at(doc, ("extends",), f"{where} is refused: {why}; its content is not shown", fix)])


def _header(doc: YamlDocument, kind: str) -> dict[str, Any]:
    data = doc.data
    if not isinstance(data, dict):
        raise DocumentError(
            [
                _at(
                    doc,
                    (),
                    f"a {kind} must be a YAML mapping",
                    f"start the file with `apiVersion: {API_VERSION}` and `kind: {kind}`",
                )
            ]
        )
    api = data.get("apiVersion")
    if api != API_VERSION:
        raise DocumentError(
            [
                _at(
                    doc,
                    ("apiVersion",),
                    f"apiVersion is {api!r}, expected {API_VERSION!r}",
                    f"set `apiVersion: {API_VERSION}`",
                )
            ]
        )
    if data.get("kind") != kind:
        raise DocumentError(
            [
                _at(
                    doc,
                    ("kind",),
                    f"kind is {data.get('kind')!r}, expected {kind!r}",
                    f"set `kind: {kind}` or pass this file to the command for its kind",
                )
            ]
        )
    return dict(data)


def _at(doc: YamlDocument, path: Path_, message: str, fix: str) -> DocumentProblem:
    pos = doc.position(path)
    line = pos.line if pos else None
    return DocumentProblem(
        doc.file, line, pos.column if pos else None, field_name(path), message, fix, source_line(doc.lines, line)
    )


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; any other value (lists included) in `override` replaces the base's."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _replaced(path: Path_, override: dict[str, Any]) -> bool:
    """Whether the override document replaces the value at `path` (so the base's position is stale)."""
    node: Any = override
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
        if not isinstance(node, dict):
            return True
    return False


def _problems(
    exc: ValidationError,
    model: type[BaseModel],
    positions: dict[Path_, Position],
    lines: dict[str, tuple[str, ...]],
    file: str,
) -> list[DocumentProblem]:
    problems = []
    for error in exc.errors(include_url=False):
        raw = tuple(error["loc"])
        at = (error.get("ctx") or {}).get("at")
        if at:  # model-level validators name the field they are about; field validators a path inside theirs
            raw = (*raw, *(at if isinstance(at, tuple) else str(at).split(".")))
        if error["type"] == "union_tag_invalid":  # the tag's own line
            raw = (*raw, str((error.get("ctx") or {}).get("discriminator", "kind")).strip("'"))
        loc = _untagged(raw, positions)
        pos = _nearest(positions, loc)
        where = pos.file if pos else file
        source = source_line(lines.get(pos.file, ()), pos.line) if pos else None
        message, fix = _explain(error, model, raw)
        problems.append(
            DocumentProblem(
                where, pos.line if pos else None, pos.column if pos else None, field_name(loc), message, fix, source
            )
        )
    return problems


def _untagged(loc: Path_, positions: dict[Path_, Position]) -> Path_:
    """The path without the tags pydantic inserts for a discriminated union (`clusters.a.slurm.root`
    is `clusters.a.root` in the file): an element the document lacks, whose next element it has."""
    out: tuple[Any, ...] = ()
    for i, element in enumerate(loc):
        if (out + (element,)) not in positions and i + 1 < len(loc) and (out + (loc[i + 1],)) in positions:
            continue
        out += (element,)
    return out


def _nearest(positions: dict[Path_, Position], loc: Path_) -> Position | None:
    while True:
        if loc in positions:
            return positions[loc]
        if not loc:
            return None
        loc = loc[:-1]


def _explain(error: Any, model: type[BaseModel], loc: Path_) -> tuple[str, str]:
    """One message and one fix per pydantic error type; custom errors carry their own fix in ctx."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = _fields_at(model, loc[:-1])
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"remove it; allowed keys here: {', '.join(sorted(allowed))}"
        return f"unknown key {key!r}", hint
    if kind == "missing":
        field = _field_info(model, loc)
        what = f" ({field.description})" if field is not None and field.description else ""
        return "required field is missing" + what, f"add `{loc[-1]}:` here"
    if "fix" in ctx:
        return str(error["msg"]), str(ctx["fix"])
    value = error.get("input")
    shown = repr(value) if not isinstance(value, dict) else "a mapping"
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return f"expected a whole number, got {shown}", "write an integer without quotes, e.g. `8`"
    if kind in {"float_type", "float_parsing"}:
        return f"expected a number, got {shown}", "write a number without quotes, e.g. `0.85`"
    if kind in {"string_type"}:
        return f"expected text, got {shown}", f'quote the value, e.g. `{loc[-1]}: "{value}"`'
    if kind in {"bool_type", "bool_parsing"}:
        return f"expected true or false, got {shown}", "write `true` or `false`"
    if kind in {"literal_error", "enum"}:
        return f"{shown} is not allowed: {error['msg']}", f"use one of {ctx.get('expected', 'the allowed values')}"
    if kind in {"list_type"}:
        return f"expected a list, got {shown}", "write a YAML list, e.g. `[1, 2]`"
    if kind in {"dict_type", "model_type", "model_attributes_type"}:
        return f"expected a mapping, got {shown}", "write nested `key: value` lines under this key"
    if kind.startswith(("greater_than", "less_than")):
        return f"{shown}: {error['msg']}", "use a value within the stated bound"
    if kind in {"string_too_long", "string_too_short"}:
        return f"{shorten(shown)}: {error['msg']}", "use a value within the stated length"
    if kind == "string_pattern_mismatch":
        return (
            f"{shown} does not match the required form {ctx.get('pattern')!r}",
            "use lowercase letters, digits, '.', '_' and '-'",
        )
    return str(error["msg"]), "correct the value as the message says"


def _model_at(model: Any, loc: Path_) -> Any:
    """The pydantic model class that owns the keys at `loc` (None if `loc` leaves the models)."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        tagged = _tagged_member(current, part)
        if tagged is not None:  # a discriminated union's tag (pydantic puts it in the path): that member
            current = tagged
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            if not isinstance(part, str) or part not in current.model_fields:
                return None
            current = current.model_fields[part].annotation
        elif typing.get_origin(current) in (list, tuple, dict):
            args = typing.get_args(current)
            current = args[-1] if args else None
        else:
            return None
    return _unwrap(current)


def _unwrap(annotation: Any) -> Any:
    """Optional[X] -> X and Annotated[X, ...] -> X, so lookups see through nullable and annotated
    fields; a union of several models stays a union (`_tagged_member` picks one by its tag)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if len(models) > 1:
            return annotation
        return models[0] if models else (args[0] if len(args) == 1 else annotation)
    return annotation


def _tagged_member(annotation: Any, tag: Any) -> Any:
    """The model of a union whose `kind` is the literal `tag`, else None."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return None
    for member in typing.get_args(annotation):
        kind = member.model_fields.get("kind") if isinstance(member, type) and issubclass(member, BaseModel) else None
        if kind is not None and tag in typing.get_args(kind.annotation):
            return member
    return None


def _fields_at(model: type[BaseModel], loc: Path_) -> list[str]:
    owner = _model_at(model, loc)
    if isinstance(owner, type) and issubclass(owner, BaseModel):
        return [f.alias or name for name, f in owner.model_fields.items()]
    return []


def _field_info(model: type[BaseModel], loc: Path_) -> Any:
    owner = _model_at(model, loc[:-1])
    if isinstance(owner, type) and issubclass(owner, BaseModel) and isinstance(loc[-1], str):
        return owner.model_fields.get(loc[-1])
    return None
