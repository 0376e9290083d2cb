"""Simulated EAGLE-3 requests for the statistics tests and the benchmark: each request has its own
acceptance probability (Beta-distributed, as prompts differ), each verify step accepts a run of
drafts (a chain of `num_steps`), and a request ends at `max_new_tokens`, as sglang trims it."""

from __future__ import annotations

import numpy as np


def requests(
    rng: np.random.Generator,
    n: int,
    *,
    mean_accept: float = 0.6,
    concentration: float = 6.0,
    num_steps: int = 3,
    max_new_tokens: int = 64,
) -> tuple[np.ndarray, np.ndarray]:
    """(completion_tokens, spec_verify_ct) for n requests."""
    p = rng.beta(mean_accept * concentration, (1 - mean_accept) * concentration, size=n)
    steps_cap = max_new_tokens  # every step makes at least one token
    draws = rng.random((n, steps_cap, num_steps)) < p[:, None, None]
    accepted = np.cumprod(draws, axis=2).sum(axis=2)  # drafts accepted before the first rejection
    made = np.cumsum(accepted + 1, axis=1)
    verify = (made < max_new_tokens).sum(axis=1) + 1  # the step that reaches max_new_tokens ends it
    return np.full(n, float(max_new_tokens)), verify.astype(float)


def true_accept_length(**kwargs: float) -> float:
    """Σ tokens / Σ verify steps over a very large population (the value intervals should cover)."""
    rng = np.random.default_rng(12345)
    tokens, verify = requests(rng, 200_000, **kwargs)  # type: ignore[arg-type]
    return float(tokens.sum() / verify.sum())
