"""The candidates `specctl tune` measures: the profile's `tune:` grid of speculative settings, less
what the engine would rewrite, reject or not run, with the profile's own setting first (the
incumbent); each candidate is the profile with only `speculative` replaced. Pure: no hosts."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specctl.engines import Engine
from specctl.profile.profile import Profile, Speculative, Tune


@dataclass(frozen=True)
class Candidate:
    """One speculative setting to measure; `incumbent` is the profile's own."""

    speculative: Speculative
    incumbent: bool = False

    @property
    def key(self) -> str:
        s = self.speculative
        steps = "auto" if s.num_steps is None else s.num_steps
        topk = "auto" if s.eagle_topk is None else s.eagle_topk
        tokens = "auto" if s.num_draft_tokens is None else s.num_draft_tokens
        adaptive = " adaptive" if s.adaptive is True else " adaptive(tiers)" if s.adaptive else ""
        return f"steps={steps} topk={topk} draft={tokens}{adaptive}"

    def settings(self) -> dict[str, Any]:
        """The speculative section as a profile writes it."""
        return self.speculative.model_dump(mode="json")

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "incumbent": self.incumbent, "speculative": self.settings()}


@dataclass(frozen=True)
class Dropped:
    """A combination of the grid that is not measured, and why."""

    key: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "reason": self.reason}


def effective(engine: Engine, architecture: str, s: Speculative) -> tuple[int | None, int | None, int | None]:
    """(num_steps, eagle_topk, num_draft_tokens) as the engine will run them."""
    values: tuple[int | None, int | None, int | None] = (s.num_steps, s.eagle_topk, s.num_draft_tokens)
    for rewrite in engine.speculative_rewrites(architecture, s.algorithm, *values):
        if rewrite.rejected:
            continue
        if rewrite.field == "speculative" and isinstance(rewrite.effective, Mapping):
            e = rewrite.effective
            values = (e["num_steps"], e["eagle_topk"], e["num_draft_tokens"])
        elif rewrite.field == "speculative.num_draft_tokens" and isinstance(rewrite.effective, int):
            values = (values[0], values[1], rewrite.effective)
    return values


def grid(profile: Profile, engine: Engine, architecture: str) -> tuple[list[Candidate], list[Dropped]]:
    """Every candidate to measure (the incumbent first) and every combination left out, with why."""
    tune = profile.tune or Tune()
    base = profile.speculative
    incumbent = Candidate(base, incumbent=True)
    candidates, dropped = [], []
    rejected = [
        r
        for r in engine.speculative_rewrites(
            architecture, base.algorithm, base.num_steps, base.eagle_topk, base.num_draft_tokens
        )
        if r.rejected
    ]
    if rejected:
        dropped.append(Dropped(incumbent.key, f"the profile's own setting: {rejected[0].reason}"))
    else:
        candidates.append(incumbent)
    seen = {(effective(engine, architecture, base), _adaptive_on(base))} if not rejected else set()
    listed: list[int | None] = list(tune.num_draft_tokens) or [None]
    for steps, topk, tokens, adaptive in itertools.product(tune.num_steps, tune.eagle_topk, listed, tune.adaptive):
        s = base.model_copy(
            update={
                "num_steps": steps,
                "eagle_topk": topk,
                "adaptive": adaptive,
                "num_draft_tokens": steps + 1 if tokens is None and topk == 1 else tokens,
            }
        )
        key = Candidate(s).key
        why = _why_not(profile, engine, architecture, s, tokens_listed=tokens is not None)
        if why:
            dropped.append(Dropped(key, why))
            continue
        identity = (effective(engine, architecture, s), adaptive)
        if identity in seen:
            continue  # the incumbent, or the same setting listed twice
        seen.add(identity)
        candidates.append(Candidate(s))
    return candidates, dropped


def _adaptive_on(s: Speculative) -> bool | str:
    """Adaptive as it tells settings apart: off, the engine's tiers, or the profile's own."""
    return s.adaptive if isinstance(s.adaptive, bool) else "tiers"


def _why_not(profile: Profile, engine: Engine, architecture: str, s: Speculative, *, tokens_listed: bool) -> str | None:
    """Why the engine would not run this setting as written, or None."""
    if s.num_draft_tokens is None and not tokens_listed:
        return "eagle_topk above 1 needs num_draft_tokens: list them in tune.num_draft_tokens"
    for rewrite in engine.speculative_rewrites(
        architecture, s.algorithm, s.num_steps, s.eagle_topk, s.num_draft_tokens
    ):
        if rewrite.rejected:
            return f"the engine rejects it: {rewrite.reason}"
        return (
            "the engine would rewrite it "
            f"({rewrite.field} {rewrite.given} becomes {rewrite.effective}: {rewrite.reason})"
        )
    if s.adaptive:
        problems = engine.adaptive_problems(
            profile.engine.version, s.algorithm, s.eagle_topk, profile.engine.args, s.adaptive_config()
        )
        if problems:
            return f"adaptive speculation would not run: {problems[0].message}"
    return None


def candidate_profile(profile: Profile, candidate: Candidate, tune_run: str) -> Profile:
    """The profile with the candidate's speculative settings: same name and version, the tune run named."""
    metadata = profile.metadata.model_copy(
        update={"description": f"specctl tune run {tune_run}: candidate {candidate.key}"}
    )
    return profile.model_copy(update={"speculative": candidate.speculative, "metadata": metadata})


def heat_map(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The objective over num_steps (rows) and the other setting that varies with them (columns:
    eagle_topk, else adaptive, else num_draft_tokens; eagle_topk when none does); where more settings
    vary, a cell holds the best of them.
    `rows` are the tune's candidate rows (speculative settings and the measured estimate)."""

    def value(row: Mapping[str, Any], name: str) -> Any:
        return row["speculative"].get(name)

    def varies(name: str) -> bool:  # apart from num_steps (topk 1's draft tokens follow the steps)
        return any(
            len({str(value(r, name)) for r in rows if value(r, "num_steps") == steps}) > 1
            for steps in {value(r, "num_steps") for r in rows}
        )

    column = next((name for name in ("eagle_topk", "adaptive", "num_draft_tokens") if varies(name)), "eagle_topk")
    steps = sorted({value(r, "num_steps") for r in rows if value(r, "num_steps") is not None})
    columns = sorted({value(r, column) for r in rows if value(r, column) is not None}, key=str)
    cells: list[list[float | None]] = [[None] * len(columns) for _ in steps]
    for r in rows:
        estimate = r.get("estimate")
        if estimate is None or value(r, "num_steps") is None or value(r, column) is None:
            continue
        i, j = steps.index(value(r, "num_steps")), columns.index(value(r, column))
        cells[i][j] = estimate if cells[i][j] is None else max(estimate, cells[i][j] or 0.0)
    return {"rows": "num_steps", "columns": column, "row_values": steps, "column_values": columns, "cells": cells}
