"""An engine's launch-flag catalog (argparse-shaped data generated from the real parser) and the
validation and rendering of a profile's `engine.args` against it."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
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

    @classmethod
    def from_json(cls, path: Path) -> FlagCatalog:
        return _load(path)

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
                fix = f"did you mean {close!r}?" if close else f"remove it; {self.engine} {self.version} has no such flag"
                problems.append(FlagProblem(key, "unknown", f"--{_normal(key)} is not a flag of {self.engine} {self.version}", fix))
                continue
            owner = next((field for name, field in reserved.items() if self.lookup(name) == flag), None)
            if owner is not None:
                problems.append(FlagProblem(key, "reserved", f"{flag.primary} is rendered by specctl from the profile",
                                            f"set `{owner}` in the profile instead"))
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
            return FlagProblem(key, "type", f"{flag.primary} is a switch and takes no value, got {value!r}",
                               f"write `{key}: true` (or false to leave it out)")
        if value is False and not any(f.startswith("--no-") for f in flag.flags) and flag.default not in (False, None):
            return FlagProblem(key, "type", f"{flag.primary} cannot be switched off from the command line", f"remove `{key}`")
        return None
    values = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not flag.takes_list:
        return FlagProblem(key, "type", f"{flag.primary} takes one value, got a list", f"write a single value for `{key}`")
    if flag.takes_list and flag.nargs == "+" and not values:
        return FlagProblem(key, "type", f"{flag.primary} needs at least one value", f"give `{key}` a non-empty list")
    accepted = _NUMERIC.get(flag.type or "")
    for item in values:
        if isinstance(item, bool) or (accepted and not isinstance(item, accepted)):
            want = {"int": "an integer", "float": "a number", "human_readable_int": "an integer or a size like 128k"}.get(flag.type or "", "text")
            return FlagProblem(key, "type", f"{flag.primary} expects {want}, got {item!r}", f"write {want} for `{key}`")
        if flag.type == "int" and not isinstance(item, int):
            return FlagProblem(key, "type", f"{flag.primary} expects an integer, got {item!r}", f"write an integer for `{key}`")
        if flag.choices is not None and item not in flag.choices:
            close = difflib.get_close_matches(str(item), [str(c) for c in flag.choices], n=1, cutoff=0.6)
            fix = f"did you mean {close[0]!r}?" if close else "use one of: " + ", ".join(map(str, flag.choices))
            return FlagProblem(key, "choice", f"{item!r} is not a valid choice for {flag.primary}", fix)
    return None


@cache
def _load(path: Path) -> FlagCatalog:
    data = json.loads(path.read_text())
    flags = tuple(
        Flag(tuple(a["flags"]), a["dest"], a["action"], a["type"], a["nargs"], a.get("default"),
             tuple(a["choices"]) if a.get("choices") is not None else None, bool(a.get("required")))
        for a in data["arguments"]
    )
    return FlagCatalog(data["engine"], data["version"], flags)
