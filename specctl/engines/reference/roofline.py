"""A GPU's time per target forward, for the reference engine on a CPU.

On a GPU a decode forward is memory-bound: reading the weights costs the same whether it carries one
token or a few dozen, which is why verifying k drafted tokens costs about as much as decoding one.
Past some number of tokens per forward it turns compute-bound and each further token costs time;
that is where speculation stops paying at high concurrency (16 sequences x 11 draft tokens is 176
tokens per verify). A tiny model on a CPU has neither regime cleanly, so its speedup barely moves
with concurrency. With `SPECCTL_REFERENCE_ROOFLINE` set (in a profile's `engine.env`) each target
forward takes at least `floor + max(0, tokens - knee) x per-token` of wall time: the engine sleeps
whatever the real computation left of that. Output tokens and counters do not change; only time does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["ENV", "Roofline"]

ENV = "SPECCTL_REFERENCE_ROOFLINE"
_KEYS = {"floor_ms", "knee_tokens", "token_ms"}


@dataclass(frozen=True)
class Roofline:
    """Wall time of one target forward of `tokens` real tokens (sglang batches ragged: padding is free)."""

    floor_s: float
    knee_tokens: int
    token_s: float

    @classmethod
    def parse(cls, text: str) -> Roofline:
        """`floor_ms=10,knee_tokens=32,token_ms=0.5` (every key required); ValueError naming the fix."""
        fields: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or key not in _KEYS:
                raise ValueError(f"{ENV}: {part!r} is not one of {', '.join(sorted(_KEYS))} = number")
            try:
                fields[key] = float(value)
            except ValueError:
                raise ValueError(f"{ENV}: {key}={value!r} is not a number") from None
            if fields[key] < 0:
                raise ValueError(f"{ENV}: {key} must be >= 0, got {value}")
        missing = _KEYS - set(fields)
        if missing:
            raise ValueError(
                f"{ENV}: missing {', '.join(sorted(missing))} (e.g. floor_ms=10,knee_tokens=32,token_ms=0.5)"
            )
        return cls(fields["floor_ms"] / 1000, int(fields["knee_tokens"]), fields["token_ms"] / 1000)

    def seconds(self, tokens: int) -> float:
        return self.floor_s + max(0, tokens - self.knee_tokens) * self.token_s

    def pad(self, started: float, tokens: int) -> None:
        """Sleep until a forward that began at `started` (perf_counter) has taken `seconds(tokens)`."""
        left = started + self.seconds(tokens) - time.perf_counter()
        if left > 0:
            time.sleep(left)
