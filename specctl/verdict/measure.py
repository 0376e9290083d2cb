"""Live measurement: run a workload against a server and aggregate what the server reports per request."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specctl.verdict.client import EngineClient, Generation
from specctl.verdict.workload import Workload


@dataclass(frozen=True)
class Measurement:
    """Aggregates over requests, never the server's lifetime average."""

    generations: tuple[Generation, ...]
    wall_s: float

    @property
    def completion_tokens(self) -> int:
        return sum(g.completion_tokens for g in self.generations)

    @property
    def mean_accept_length(self) -> float | None:
        """Σ completion_tokens / Σ spec_verify_ct, as sglang defines accept length."""
        verify = sum(g.spec_verify_ct or 0 for g in self.generations)
        return self.completion_tokens / verify if verify else None

    @property
    def acceptance_rate(self) -> float | None:
        proposed = sum(g.spec_num_proposed_drafts or 0 for g in self.generations)
        return sum(g.spec_num_correct_drafts or 0 for g in self.generations) / proposed if proposed else None

    @property
    def output_tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s else 0.0


def measure(client: EngineClient, workload: Workload, *, requests: int, max_new_tokens: int, temperature: float = 0.0,
            on_request: Callable[[int, Generation], None] = lambda i, g: None) -> Measurement:
    """Send `requests` requests of the workload one after another (cycling through it)."""
    generations: list[Generation] = []
    start = time.perf_counter()
    prompts: Sequence[tuple[dict[str, str], ...]] = workload.requests
    for i in range(requests):
        generation = client.chat(prompts[i % len(prompts)], max_new_tokens=max_new_tokens, temperature=temperature)
        generations.append(generation)
        on_request(i, generation)
    return Measurement(tuple(generations), time.perf_counter() - start)
