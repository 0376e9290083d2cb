"""sglang's adaptive speculation, as the reference engine emulates it: per batch-size tier, an
exponential moving average of the drafts each verify accepted chooses num_steps among the tier's
candidates, after a warm-up and every few batches, probing one step up while drafts keep being
accepted and stepping down when they are not (`speculative/adaptive_spec_params.py`'s method,
written anew here). The tiers come from the emulated release (`SGLangEngine.adaptive_tiers`) or
the profile's config file, with sglang's defaults for the knobs a tier leaves out."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

KNOBS = {"ema_alpha": 0.2, "update_interval": 5, "warmup_batches": 10, "down_hysteresis": -0.25, "up_hysteresis": 0.0}


@dataclass
class Tier:
    """One batch-size tier: where its estimate of accepted drafts stands and the steps it chose."""

    candidates: list[int]
    steps: int
    knobs: dict[str, float]
    accepted_ema: float = 0.0
    batches: int = 0

    @classmethod
    def start(cls, settings: Mapping[str, Any], initial_steps: int) -> Tier:
        candidates = sorted(set(settings["candidate_steps"]))
        steps = initial_steps if initial_steps in candidates else candidates[len(candidates) // 2]
        knobs = {k: float(settings.get(k, default)) for k, default in KNOBS.items()}
        return cls(candidates, steps, knobs, accepted_ema=float(steps - 1))

    def observe(self, accepted: list[int]) -> None:
        """One verify's accepted drafts per sequence; every `update_interval` batches after the warm-up,
        move to the candidate the estimate points at."""
        if not accepted:
            return
        if self.steps > 0:
            alpha = self.knobs["ema_alpha"]
            self.accepted_ema = (1 - alpha) * self.accepted_ema + alpha * sum(accepted) / len(accepted)
        self.batches += 1
        warmup, interval = int(self.knobs["warmup_batches"]), int(self.knobs["update_interval"])
        if self.batches > warmup and (self.batches - warmup) % interval == 0:
            self.steps = self._next_steps()

    def _next_steps(self) -> int:
        at = self.candidates.index(self.steps)
        if self.steps == 0:  # no drafting: probe the next step up
            up = self.candidates[min(at + 1, len(self.candidates) - 1)]
            if up > 0 and self.accepted_ema < 0:
                self.accepted_ema = float(up - 1)
            return up
        start = at
        while at > 0:
            lower = self.candidates[at - 1]
            floor = (0.5 if lower == 0 else lower - 0.5) + self.knobs["down_hysteresis"]
            if self.accepted_ema > floor:
                break
            at -= 1
        if at == start:
            while (
                at < len(self.candidates) - 1
                and self.accepted_ema > self.candidates[at] - 0.5 + self.knobs["up_hysteresis"]
            ):
                at += 1
        return self.candidates[at]


@dataclass
class AdaptiveSteps:
    """The tiers by batch size; a batch uses the tier of the largest key not above its size."""

    tiers: dict[int, Tier]
    used: Counter[int] = field(default_factory=Counter)  # verify steps run at each num_steps

    @classmethod
    def start(cls, config: Mapping[str, Mapping[str, Any]], initial_steps: int) -> AdaptiveSteps:
        return cls(
            {int(bs): Tier.start(settings, initial_steps) for bs, settings in config.items() if str(bs).isdigit()}
        )

    def _tier(self, batch_size: int) -> Tier:
        sizes = sorted(self.tiers)
        return self.tiers[sizes[max(0, bisect.bisect_right(sizes, batch_size) - 1)]]

    def steps_for(self, batch_size: int) -> int:
        steps = self._tier(batch_size).steps
        self.used[steps] += 1
        return steps

    def observe(self, batch_size: int, accepted: list[int]) -> None:
        self._tier(batch_size).observe(accepted)

    @property
    def max_steps(self) -> int:
        return max(max(t.candidates) for t in self.tiers.values())
