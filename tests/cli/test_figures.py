"""How every table writes a measured figure and its interval (specctl/cli/figures.py)."""

from __future__ import annotations

from specctl.cli.figures import figure, interval_figure


def test_a_symmetric_interval_is_written_as_plus_minus_at_the_digits_shown() -> None:
    assert figure(3.5556, 3.4556, 3.6556) == "3.56±0.10"
    assert figure(296.4, 290.1, 302.6) == "296±6"  # 6.2 above, 6.3 below: the same at 0 decimals
    assert figure(1.744, 1.694, 1.794, suffix="x") == "1.74±0.05x"


def test_an_asymmetric_interval_shows_both_bounds_at_the_estimates_digits() -> None:
    assert figure(0.954, 0.85, 0.98) == "0.95 [0.85, 0.98]"
    assert figure(0.0123, 0.0101, 0.0199) == "0.0123 [0.0101, 0.0199]"
    assert figure(1.5, 1.0, 2.5, suffix="x") == "1.50x [1.00, 2.50]"


def test_without_an_interval_the_estimate_alone_and_without_an_estimate_a_dash() -> None:
    assert figure(1.5) == "1.50" and figure(45.25) == "45.2" and figure(0) == "0.00" and figure(0.71) == "0.71"
    assert figure(None) == "-" and figure("3.1") == "-" and figure(True) == "-"
    assert figure(float("inf"), 1.0, 2.0) == "inf [1, 2]"


def test_an_interval_as_the_verdict_holds_it() -> None:
    assert interval_figure({"estimate": 0.95, "low": 0.85, "high": 0.98}) == "0.95 [0.85, 0.98]"
    assert interval_figure({"estimate": 1.5}) == "1.50" and interval_figure(None) == "-"
