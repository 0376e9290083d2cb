"""The sglang capture-convention table: which positions a drafter's layer ids capture, per release.

An EAGLE-3 drafter names target layers in `eagle_config.eagle_aux_hidden_state_layer_ids` ("ids").
The target model's `set_eagle3_layers_to_capture` turns them into capture *positions* (position p is
the residual stream entering decoder layer p; 0 is the embedding output; canonical layer L is
position L + 1) and the forward pass captures some of them. Rules differ per release and per
architecture, so this module interprets a table (`data/conventions.json`) generated from the code of
every sglang release by `scripts/gen_sglang_conventions.py`, which imports the rule functions below
so that the table and specctl share one implementation.

Pure stdlib: this sits on the start-up path of `specctl check`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "EXPLICIT_RULES",
    "SGLANG_TABLE_PATH",
    "SglangCapture",
    "CaptureRule",
    "ConventionTable",
    "capture",
    "evaluate_formula",
    "ids_for",
    "load_table",
]

SGLANG_TABLE_PATH = Path(__file__).parent / "data" / "conventions.json"

# --- explicit rules: ids (never None here) -> positions, in setter order -----------------------------

ExplicitRule = Callable[[Sequence[int], int, Sequence[int]], list[int]]


def _plus_one(ids: Sequence[int], num_layers: int, default: Sequence[int]) -> list[int]:
    """id i is the output of layer i, i.e. position i + 1 (llama, qwen, ... and deepseek until #25454)."""
    return [i + 1 for i in ids]


def _plus_one_if_first_is_one(ids: Sequence[int], num_layers: int, default: Sequence[int]) -> list[int]:
    """deepseek_v2 after sglang PR #25454: +1 only when ids[0] == 1, else the ids are positions."""
    if ids and ids[0] == 1:
        return [i + 1 for i in ids]
    return list(ids)


def _plus_one_unless_max_is_n(ids: Sequence[int], num_layers: int, default: Sequence[int]) -> list[int]:
    """gpt_oss: ids reaching N are taken as positions already (N = final boundary), else +1."""
    if ids and max(ids) == num_layers:
        return list(ids)
    return [i + 1 for i in ids]


def _identity(ids: Sequence[int], num_layers: int, default: Sequence[int]) -> list[int]:
    """ids are positions already."""
    return list(ids)


def _ignores_ids(ids: Sequence[int], num_layers: int, default: Sequence[int]) -> list[int]:
    """Early setters took no argument: the drafter's ids are ignored and the default is captured."""
    return list(default)


EXPLICIT_RULES: dict[str, ExplicitRule] = {
    "plus_one": _plus_one,
    "plus_one_if_first_is_one": _plus_one_if_first_is_one,
    "plus_one_unless_max_is_n": _plus_one_unless_max_is_n,
    "identity": _identity,
    "ignores_ids": _ignores_ids,
}

# --- formulas over N ("2", "N//2", "N-3"): a tiny parser, never eval() -----------------------------

_TOKEN = re.compile(r"\s*(?:(\d+)|(N)|(//|[-+()]))")


def evaluate_formula(formula: str, num_layers: int) -> int:
    """Value of a formula made of integers, N, +, -, // and parentheses, with N = num_layers."""
    tokens: list[str] = []
    pos = 0
    text = formula.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"bad formula {formula!r} at {text[pos:]!r}")
        tokens.append(match.group(match.lastindex or 0))
        pos = match.end()
    index = 0

    def peek() -> str | None:
        return tokens[index] if index < len(tokens) else None

    def take() -> str:
        nonlocal index
        if index >= len(tokens):
            raise ValueError(f"bad formula {formula!r}: unexpected end")
        index += 1
        return tokens[index - 1]

    def atom() -> int:
        token = take()
        if token == "N":
            return num_layers
        if token == "-":
            return -atom()
        if token == "(":
            value = expr()
            if take() != ")":
                raise ValueError(f"bad formula {formula!r}: missing ')'")
            return value
        if token.isdigit():
            return int(token)
        raise ValueError(f"bad formula {formula!r}: unexpected {token!r}")

    def term() -> int:
        value = atom()
        while peek() == "//":
            take()
            value //= atom()
        return value

    def expr() -> int:
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    result = expr()
    if index != len(tokens):
        raise ValueError(f"bad formula {formula!r}: trailing {tokens[index:]!r}")
    return result


# --- the table -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaptureRule:
    """One table row: how releases `first`..`last` (inclusive) of sglang capture for one architecture.

    `supported` is False where the class or its `set_eagle3_layers_to_capture` is missing. `default`
    holds formulas over N for ids None; `explicit` names a function in EXPLICIT_RULES. Positions above
    `max_position` are silently `dropped` by the forward loop or make the setter raise (`error`).
    `negative` says whether negative positions never match (`dropped`) or index layers from the end
    (`wrap`, python list indexing in setters that mark layers). `embedding` says whether position 0
    is really captured (`captured`) or crashes the forward pass (`error`: `hidden_states + residual`
    with residual None before layer 0). `unmatched` is `error` where the forward preallocates one
    slot per requested position (sglang's AuxHiddenStatePacker, DeepSeek from 0.5.17) and fails
    unless each is filled: then a position that matches no layer, or one requested twice, stops the
    server at its first forward (CUDA-graph capture at start-up) instead of being dropped.
    `nothing_captured` is `error` where, when no requested position is captured, the inner forward
    returns no aux hidden states and the outer forward's `hidden_states, aux = ...` fails at start-up.
    `method` says how the row was derived: `executed` (the release's forward was run on stand-ins),
    with `; read: <fields>` for fields the executions could not decide, or `read: <why>`.
    """

    architecture: str
    first: str
    last: str
    source: str
    supported: bool
    default: tuple[str, ...] = ()
    explicit: str | None = None
    max_position: str | None = None
    beyond: str | None = None
    negative: str | None = None
    embedding: str | None = None
    capture_site: str = ""
    note: str = ""
    unmatched: str | None = None
    nothing_captured: str | None = None
    method: str = ""

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> CaptureRule:
        return cls(
            architecture=str(row["architecture"]),
            first=str(row["first"]),
            last=str(row["last"]),
            source=str(row.get("source", "")),
            supported=bool(row["supported"]),
            default=tuple(str(f) for f in row.get("default") or ()),
            explicit=row.get("explicit"),
            max_position=row.get("max_position"),
            beyond=row.get("beyond"),
            negative=row.get("negative"),
            embedding=row.get("embedding"),
            capture_site=str(row.get("capture_site", "")),
            note=str(row.get("note", "")),
            unmatched=row.get("unmatched"),
            nothing_captured=row.get("nothing_captured"),
            method=str(row.get("method", "")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "first": self.first,
            "last": self.last,
            "source": self.source,
            "supported": self.supported,
            "default": list(self.default),
            "explicit": self.explicit,
            "max_position": self.max_position,
            "beyond": self.beyond,
            "negative": self.negative,
            "embedding": self.embedding,
            "capture_site": self.capture_site,
            "note": self.note,
            **({"unmatched": self.unmatched} if self.unmatched else {}),
            **({"nothing_captured": self.nothing_captured} if self.nothing_captured else {}),
            **({"method": self.method} if self.method else {}),
        }


class ConventionTable:
    """The rows of one table with the ordered list of releases they were derived from."""

    def __init__(self, releases: Sequence[str], rows: Sequence[CaptureRule]) -> None:
        self.releases: tuple[str, ...] = tuple(releases)
        self.rows: tuple[CaptureRule, ...] = tuple(rows)
        self._index = {v: i for i, v in enumerate(self.releases)}
        for row in self.rows:
            if row.first not in self._index or row.last not in self._index:
                raise ValueError(f"row {row.architecture} {row.first}..{row.last} names an unlisted release")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConventionTable:
        return cls(data["releases"], [CaptureRule.from_json(r) for r in data["rows"]])

    def covers_version(self, version: str) -> bool:
        return _normalise(version) in self._index

    def architectures(self) -> tuple[str, ...]:
        return tuple(sorted({r.architecture for r in self.rows}))

    def rule_for(self, version: str, architecture: str) -> CaptureRule | None:
        """The row for that release and architecture; None when either is not in the table."""
        at = self._index.get(_normalise(version))
        if at is None:
            return None
        for row in self.rows:
            if row.architecture == architecture and self._index[row.first] <= at <= self._index[row.last]:
                return row
        return None

    def versions_supporting(self, architecture: str) -> tuple[str, ...]:
        """Releases (in order) whose row for `architecture` supports EAGLE-3 capture."""
        out: list[str] = []
        for version in self.releases:
            row = self.rule_for(version, architecture)
            if row is not None and row.supported:
                out.append(version)
        return tuple(out)


def _normalise(version: str) -> str:
    return version.strip().removeprefix("v")


@cache
def load_table(path: Path = SGLANG_TABLE_PATH) -> ConventionTable:
    """The shipped table (read once)."""
    with open(path, encoding="utf-8") as handle:
        return ConventionTable.from_json(json.load(handle))


# --- interpretation ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SglangCapture:
    """What the engine will capture for `ids` on an N-layer target (positions in the engine frame).

    `requested` is the setter's output in its order; `captured` the sorted unique positions really
    captured; `dropped` pairs each silently ignored requested position with a reason; `remapped`
    pairs a negative position with the layer it aliases (setters that index `layers[p]`); `error`
    is what the engine raises instead of starting (then nothing is captured).
    """

    ids: tuple[int, ...] | None
    requested: tuple[int, ...]
    captured: tuple[int, ...]
    dropped: tuple[tuple[int, str], ...] = ()
    remapped: tuple[tuple[int, int], ...] = ()
    error: str | None = None


def default_positions(rule: CaptureRule, num_layers: int) -> list[int]:
    return [evaluate_formula(f, num_layers) for f in rule.default]


def capture(rule: CaptureRule, ids: Sequence[int] | None, num_layers: int) -> SglangCapture:
    """Positions captured when the drafter config holds `ids` (None: key absent) under `rule`."""
    given = None if ids is None else tuple(int(i) for i in ids)
    if not rule.supported:
        return SglangCapture(
            given,
            (),
            (),
            error=f"{rule.architecture} has no set_eagle3_layers_to_capture "
            f"in sglang {rule.first}..{rule.last}: EAGLE-3 is not supported",
        )
    default = default_positions(rule, num_layers)
    if given is None:
        requested = default
    else:
        if rule.explicit not in EXPLICIT_RULES:
            raise ValueError(f"unknown explicit rule {rule.explicit!r}")
        requested = EXPLICIT_RULES[rule.explicit](given, num_layers, default)
    return bound(rule, given, requested, num_layers)


def bound(rule: CaptureRule, given: tuple[int, ...] | None, requested: Sequence[int], num_layers: int) -> SglangCapture:
    """Apply the forward loop's limits (last capturable position, negatives, position 0) to what a setter requested.

    Shared by the table and by answers from the engine probe, which report only the setter's output.
    """
    top = evaluate_formula(rule.max_position or "N-1", num_layers)
    captured: set[int] = set()
    dropped: list[tuple[int, str]] = []
    remapped: list[tuple[int, int]] = []
    error: str | None = None
    seen: set[int] = set()
    for p in requested:
        if p in seen:
            dropped.append(
                (
                    p,
                    "requested twice: the layer is captured once, so the drafter gets one block of "
                    "features fewer than it has ids",
                )
            )
            continue
        seen.add(p)
        if p < 0:
            if rule.negative == "wrap" and p >= -num_layers:
                remapped.append((p, p + num_layers))
                captured.add(p + num_layers)
            elif rule.negative == "wrap":
                error = error or f"IndexError: layer index {p} out of range for {num_layers} layers"
            else:
                dropped.append((p, "negative position never matches a layer index"))
        elif p > top:
            if rule.beyond == "error":
                error = error or f"IndexError: layer index {p} out of range for {num_layers} layers"
            else:
                dropped.append((p, f"beyond the last capturable position {top}"))
        else:
            captured.add(p)
    if error is None and 0 in captured and rule.embedding == "error":
        error = "TypeError at the first forward: position 0 adds a residual that is None before layer 0"
    if error is None and not captured and rule.nothing_captured == "error":
        error = (
            "no requested position is captured: the model's forward returns no aux hidden states and "
            "the outer forward fails unpacking them at its first forward (CUDA-graph capture at start-up)"
        )
    if error is None and dropped and rule.unmatched == "error":
        filled = len(requested) - len(dropped)
        error = (
            f"the forward preallocates {len(requested)} capture slots and fails when it fills {filled} "
            f"(captured {filled} of {len(requested)} aux hidden states) at its first forward, which is CUDA-graph "
            f"capture at start-up: position {dropped[0][0]} {_unmatched_reason(dropped[0][1])}"
        )
    if error is not None:
        return SglangCapture(given, tuple(requested), (), error=error)
    return SglangCapture(given, tuple(requested), tuple(sorted(captured)), tuple(dropped), tuple(remapped))


def _unmatched_reason(reason: str) -> str:
    return "is requested twice" if reason.startswith("requested twice") else f"matches no layer ({reason})"


def ids_for(rule: CaptureRule, positions: Sequence[int], num_layers: int) -> list[int] | None:
    """Drafter ids that capture exactly `positions` under `rule`, or None when no ids can.

    Candidates are tried in order of preference: output-of-layer style (position - 1) first, then
    raw positions, then mixes, then (for short lists) other orders, since some rules look at ids[0].
    """
    target = tuple(sorted(set(positions)))
    if not rule.supported:
        return None
    if 0 in target and rule.embedding != "captured":
        return None  # the embedding is only offered where the code was seen to capture it

    for ids in candidate_ids(target):
        out = capture(rule, ids, num_layers)
        if out.error is None and not out.dropped and not out.remapped and out.captured == target:
            return list(ids)
    return None


def candidate_ids(positions: Sequence[int]) -> list[tuple[int, ...]]:
    """Id lists worth trying for `positions`, most familiar first (output-of-layer style, raw, mixes, orders)."""
    target = tuple(sorted(set(positions)))
    choices = [(p - 1, p) for p in target]
    combos = list(itertools.product(*choices)) if len(target) <= 12 else [tuple(p - 1 for p in target), target]
    ordered = list(combos)
    if len(target) <= 6:
        ordered += [order for combo in combos for order in itertools.permutations(combo) if order != combo]
    return list(dict.fromkeys(ordered))  # unique, first occurrence kept
