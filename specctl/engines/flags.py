"""An engine's launch-flag catalogs (argparse-shaped data generated from the real parser of every
release) and the validation and rendering of a profile's `engine.args` against them.

Standard library only: scripts/gen_sglang_flags.py loads this file directly (under the sglang venv,
without specctl installed) to write and read the store with the same code.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Flag:
    """One argparse argument: its option strings and how values are parsed."""

    flags: tuple[str, ...]
    dest: str
    action: str
    type: str | None
    nargs: str | int | None
    default: Any
    choices: tuple[Any, ...] | None
    required: bool

    @property
    def primary(self) -> str:
        return self.flags[0]

    @property
    def is_switch(self) -> bool:
        """A flag that takes no value (store_true, or --x/--no-x pairs)."""
        return self.nargs == 0 or self.action in {"store_true", "store_false", "store_const", "count"}

    @property
    def takes_list(self) -> bool:
        return self.nargs in ("+", "*")


@dataclass(frozen=True)
class FlagProblem:
    """A profile `engine.args` entry that the engine's parser would reject."""

    key: str
    kind: str  # unknown | type | choice | reserved
    message: str
    fix: str


# argparse `type` callables in the catalog, mapped to the Python values a profile may give for them
_NUMERIC = {"int": (int,), "float": (int, float), "human_readable_int": (int, str)}


@dataclass(frozen=True)
class FlagCatalog:
    """All flags of one engine version, looked up by any of their option strings."""

    engine: str
    version: str
    flags: tuple[Flag, ...]
    index: dict[str, Flag] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        self.index.update({f.lstrip("-"): flag for flag in self.flags for f in flag.flags})

    def lookup(self, key: str) -> Flag | None:
        """Find a flag by `--name`, `name` or `name_with_underscores` (no prefix abbreviations)."""
        return self.index.get(_normal(key))

    def suggest(self, key: str) -> str | None:
        close = difflib.get_close_matches(_normal(key), list(self.index), n=1, cutoff=0.75)
        return close[0] if close else None

    def validate(self, args: Mapping[str, Any], reserved: Mapping[str, str]) -> list[FlagProblem]:
        """Problems the real parser (or specctl's ownership of a flag) would raise for these args."""
        problems = []
        for key, value in args.items():
            flag = self.lookup(key)
            if flag is None:
                close = self.suggest(key)
                fix = (
                    f"did you mean {close!r}?" if close else f"remove it; {self.engine} {self.version} has no such flag"
                )
                problems.append(
                    FlagProblem(key, "unknown", f"--{_normal(key)} is not a flag of {self.engine} {self.version}", fix)
                )
                continue
            owner = next((field for name, field in reserved.items() if self.lookup(name) == flag), None)
            if owner is not None:
                problems.append(
                    FlagProblem(
                        key,
                        "reserved",
                        f"{flag.primary} is rendered by specctl from the profile",
                        f"set `{owner}` in the profile instead",
                    )
                )
                continue
            problem = _value_problem(flag, key, value)
            if problem:
                problems.append(problem)
        return problems

    def render(self, args: Mapping[str, Any]) -> list[str]:
        """argv fragments in the profile's order; switches with false are left out.

        A flag the catalog does not know is passed through as written, so the engine's own parser
        (and `check`) can say what is wrong with it.
        """
        argv: list[str] = []
        for key, value in args.items():
            flag = self.lookup(key)
            if flag is None:
                argv.append(f"--{_normal(key)}")
                if value is not True:
                    argv.extend(_text(v) for v in (value if isinstance(value, list) else [value]))
                continue
            name = next((f for f in flag.flags if f.lstrip("-") == _normal(key)), flag.primary)
            if flag.is_switch:
                negative = next((f for f in flag.flags if f.startswith("--no-")), None)
                if value is True:
                    argv.append(name if not name.startswith("--no-") else flag.primary)
                elif negative is not None and value is False:
                    argv.append(negative)
                continue
            argv.append(name)
            argv.extend(_text(v) for v in (value if isinstance(value, list) else [value]))
        return argv


def _normal(key: str) -> str:
    return key.lstrip("-").replace("_", "-")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _value_problem(flag: Flag, key: str, value: Any) -> FlagProblem | None:
    if flag.is_switch:
        if not isinstance(value, bool):
            return FlagProblem(
                key,
                "type",
                f"{flag.primary} is a switch and takes no value, got {value!r}",
                f"write `{key}: true` (or false to leave it out)",
            )
        if value is False and not any(f.startswith("--no-") for f in flag.flags) and flag.default not in (False, None):
            return FlagProblem(
                key, "type", f"{flag.primary} cannot be switched off from the command line", f"remove `{key}`"
            )
        return None
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not flag.takes_list:
        return FlagProblem(
            key, "type", f"{flag.primary} takes one value, got a list", f"write a single value for `{key}`"
        )
    if flag.takes_list and flag.nargs == "+" and not values:
        return FlagProblem(key, "type", f"{flag.primary} needs at least one value", f"give `{key}` a non-empty list")
    accepted = _NUMERIC.get(flag.type or "")
    for item in values:
        if isinstance(item, bool) or (accepted and not isinstance(item, accepted)):
            want = {
                "int": "an integer",
                "float": "a number",
                "human_readable_int": "an integer or a size like 128k",
            }.get(flag.type or "", "text")
            return FlagProblem(key, "type", f"{flag.primary} expects {want}, got {item!r}", f"write {want} for `{key}`")
        if flag.type == "int" and not isinstance(item, int):
            return FlagProblem(
                key, "type", f"{flag.primary} expects an integer, got {item!r}", f"write an integer for `{key}`"
            )
        if flag.choices is not None and item not in flag.choices:
            close = difflib.get_close_matches(str(item), [str(c) for c in flag.choices], n=1, cutoff=0.6)
            fix = f"did you mean {close[0]!r}?" if close else "use one of: " + ", ".join(map(str, flag.choices))
            return FlagProblem(key, "choice", f"{item!r} is not a valid choice for {flag.primary}", fix)
    return None


# --- the shipped store: every release's catalog in one file ------------------------------------------
#
# Releases share most of their arguments, so the store keeps each distinct argument once, as a row of
# FIELDS values ("records", numbered in order of first appearance, newest release first), and each
# release as the edit of the next newer release that gives its rows in the order its parser registered
# them: ["keep", position, count] takes `count` rows of the newer release from `position`, ["rows",
# first, count] takes records first..first+count-1.  The newest release is one run, an older one a few
# dozen, and the newest (the one most profiles pin) decodes without replaying any edit.  The generator
# writes one release per line and the records last, one row per line, so that a reader parses only the
# lines the asked-for release needs: a CLI's cold start stays cheap.

FIELDS = ("flags", "dest", "action", "type", "nargs", "default", "choices", "required", "help")
_RELEASES_KEY = b'\n "releases": {\n'
_RECORDS_KEY = b'\n },\n "records": [\n'


class StoreError(LookupError):
    """The store has no catalog for a version; `failure` is the generator's reason when it tried and
    could not build that release's parser (None: the version is outside the store)."""

    def __init__(self, version: str, failure: str | None) -> None:
        super().__init__(f"{version}: {failure or 'not in the store'}")
        self.version = version
        self.failure = failure


@dataclass(frozen=True)
class _Store:
    engine: str
    unavailable: dict[str, str]
    releases: dict[str, bytes]  # version -> its line of the "releases" object, still JSON
    data: bytes  # the whole file: record n is line first_record + n
    first_record: int

    def release(self, version: str) -> dict[str, Any]:
        if version not in self.releases:
            raise StoreError(version, self.unavailable.get(version))
        entry: dict[str, Any] = json.loads(b"{" + self.releases[version].rstrip(b",") + b"}")[version]
        return entry

    def numbers_of(self, version: str) -> list[int]:
        """The record numbers of a release's arguments, replaying the edits from the newest release."""
        self.release(version)  # raises for a version the store does not have
        numbers: list[int] = []
        for name in reversed(self.releases):
            numbers = _apply(numbers, self.release(name)["arguments"])
            if name == version:
                break
        return numbers

    def rows(self, numbers: Sequence[int]) -> list[list[Any]]:
        """Records by number, parsed in one go; the lines past the last one asked for stay unsplit."""
        first = self.first_record
        lines = self.data.split(b"\n", first + max(numbers, default=0) + 1)
        rows: list[list[Any]] = json.loads(b"[" + b",".join(lines[first + i].rstrip(b",") for i in numbers) + b"]")
        return rows


@cache
def _store(path: Path) -> _Store:
    data = path.read_bytes()
    releases_at = data.find(_RELEASES_KEY)
    records_at = data.find(_RECORDS_KEY, releases_at)
    if releases_at < 0 or records_at < 0:
        raise ValueError(f"{path}: not laid out as scripts/gen_sglang_flags.py writes it")
    header = json.loads(data[:releases_at].rstrip().rstrip(b",") + b"}")
    releases = data[releases_at + len(_RELEASES_KEY) : records_at].split(b"\n")
    lines = {line.split(b'"', 2)[1].decode(): line for line in releases if line}
    first_record = data.count(b"\n", 0, records_at + len(_RECORDS_KEY))
    return _Store(header["engine"], header["unavailable"], lines, data, first_record)


def _apply(newer: list[int], edit: Iterable[Sequence[Any]]) -> list[int]:
    numbers: list[int] = []
    for source, first, count in edit:
        numbers.extend(newer[first : first + count] if source == "keep" else range(first, first + count))
    return numbers


def shipped_versions(path: Path) -> tuple[str, ...]:
    """The versions with a catalog in the store, oldest first."""
    return tuple(_store(path).releases)


def unavailable_versions(path: Path) -> dict[str, str]:
    """Versions the generator was asked for but could not build a parser for, with the reason."""
    return dict(_store(path).unavailable)


def release_entry(path: Path, version: str) -> dict[str, Any]:
    """One release as the generator produced it: `arguments` (dicts in FIELDS order) plus its metadata."""
    store = _store(path)
    rows = store.rows(store.numbers_of(version))
    metadata = {key: value for key, value in store.release(version).items() if key != "arguments"}
    return {"arguments": [dict(zip(FIELDS, row, strict=True)) for row in rows], **metadata}


@cache
def load_catalog(path: Path, version: str) -> FlagCatalog:
    """The catalog of one release (StoreError when the store has none for it)."""
    store = _store(path)
    return FlagCatalog(store.engine, version, tuple(_flag(row) for row in store.rows(store.numbers_of(version))))


def _flag(row: Sequence[Any]) -> Flag:
    flags, dest, action, type_, nargs, default, choices, required = row[:8]
    return Flag(
        tuple(flags),
        dest,
        action,
        type_,
        nargs,
        default,
        tuple(choices) if choices is not None else None,
        bool(required),
    )


def encode_store(
    engine: str, releases: Mapping[str, Mapping[str, Any]], unavailable: Mapping[str, str], meta: Mapping[str, Any]
) -> str:
    """The store's text for `releases` (version -> {"arguments": [dicts], other metadata}, oldest
    first) and the versions that have no catalog, with why."""
    numbers: dict[str, int] = {}
    edits: dict[str, list[list[Any]]] = {}
    newer: list[int] = []
    for version in reversed(list(releases)):
        rows = [numbers.setdefault(_row_text(argument), len(numbers)) for argument in releases[version]["arguments"]]
        edits[version], newer = _edit(newer, rows), rows
    encoded = {
        version: {"arguments": edits[version], **{k: v for k, v in entry.items() if k != "arguments"}}
        for version, entry in releases.items()
    }
    out = ["{"]
    out += [f" {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}," for key, value in meta.items()]
    out.append(f' "engine": {json.dumps(engine)},')
    out.append(f' "fields": {json.dumps(list(FIELDS))},')
    out.append(
        ' "unavailable": {'
        + "".join(
            f"\n  {json.dumps(v)}: {json.dumps(why, ensure_ascii=False)}," for v, why in unavailable.items()
        ).rstrip(",")
        + ("\n " if unavailable else "")
        + "},"
    )
    out.append(' "releases": {')
    out.append(",\n".join(f"  {json.dumps(v)}: {json.dumps(e, ensure_ascii=False)}" for v, e in encoded.items()))
    out.append(" },")
    out.append(' "records": [')
    out.append(",\n".join(numbers))
    out.append(" ]")
    out.append("}")
    return "\n".join(out) + "\n"


def _edit(newer: list[int], rows: list[int]) -> list[list[Any]]:
    """The runs that turn the newer release's rows into these (as few as difflib finds)."""
    runs: list[list[Any]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, newer, rows, autojunk=False).get_opcodes():
        if tag == "equal":
            runs.append(["keep", i1, i2 - i1])
            continue
        for row in rows[j1:j2]:  # replaced or inserted (nothing for a deletion)
            if runs and runs[-1][0] == "rows" and runs[-1][1] + runs[-1][2] == row:
                runs[-1][2] += 1
            else:
                runs.append(["rows", row, 1])
    return runs


def _row_text(argument: Mapping[str, Any]) -> str:
    return json.dumps([argument.get(name) for name in FIELDS], ensure_ascii=False)
