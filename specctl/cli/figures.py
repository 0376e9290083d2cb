"""A measured figure as people read it: its estimate to about three significant digits and its
interval to as many decimals. One way of writing a number and its interval for every table (the recap, `runs`,
`diff`), so that the same measurement reads the same wherever it is shown."""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["figure", "interval_figure"]


def _places(estimate: float) -> int:
    """Decimals to show: none from 100, one from 10, two from 0.1 (`0.71`, `3.56`, `45.2`, `296`), and
    below 0.1 three significant digits (a TTFT of `0.0123` s), at most four."""
    size = abs(estimate)
    if not math.isfinite(size) or size >= 0.1:
        return 0 if size >= 100 else 1 if size >= 10 else 2
    return min(4, 2 - math.floor(math.log10(size))) if size else 2


def figure(estimate: object, low: object = None, high: object = None, *, suffix: str = "") -> str:
    """`3.56±0.10` where the interval is symmetric at the digits shown (a ratio estimator ± its
    half-width: half the width of a bracket, saying the same), else `0.85 [0.81, 0.89]`; the
    estimate alone where no interval was measured, `-` where nothing was. `suffix` is the unit
    (`x` for a speedup), written after the whole figure so `1.74±0.05x` reads as one number."""
    if not isinstance(estimate, int | float) or isinstance(estimate, bool):
        return "-"
    places = _places(estimate)

    def num(x: float) -> str:
        return f"{x:.{places}f}"

    if not isinstance(low, int | float) or not isinstance(high, int | float):
        return f"{num(estimate)}{suffix}"
    above, below = num(high - estimate), num(estimate - low)
    if above == below:
        return f"{num(estimate)}±{above}{suffix}"
    return f"{num(estimate)}{suffix} [{num(low)}, {num(high)}]"


def interval_figure(value: object, *, suffix: str = "") -> str:
    """`figure` of an interval as the verdict data holds it: {"estimate", "low", "high", ...}."""
    if not isinstance(value, Mapping):
        return "-"
    return figure(value.get("estimate"), value.get("low"), value.get("high"), suffix=suffix)
