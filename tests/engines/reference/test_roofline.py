"""The roofline stand-in for a GPU's time per forward: parsed with errors that say how to fix the
setting, memory-bound below the knee and compute-bound past it, and without effect on output."""

from __future__ import annotations

import pytest

from specctl.engines.reference.roofline import Roofline

torch = pytest.importorskip("torch")

from specctl.engines.reference.speculate import SpeculativeDecoder
from tests.engines.reference.test_speculate import DRAFTER, TARGET, workload_prompts


def test_parse_reads_every_key_and_refuses_what_it_cannot_read() -> None:
    roofline = Roofline.parse("floor_ms=10, knee_tokens=32, token_ms=0.5")
    assert roofline == Roofline(0.010, 32, 0.0005)
    for bad, says in [
        ("floor_ms=10,knee_tokens=32", "missing token_ms"),
        ("floor_ms=x,knee_tokens=1,token_ms=1", "not a number"),
        ("floor=10", "'floor=10' is not one of"),
        ("floor_ms=-1,knee_tokens=1,token_ms=1", "must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=says):
            Roofline.parse(bad)


def test_a_forward_is_flat_below_the_knee_and_grows_per_token_past_it() -> None:
    roofline = Roofline(0.010, 32, 0.001)
    assert [roofline.seconds(n) for n in (1, 32)] == [0.010, 0.010]
    assert roofline.seconds(176) == pytest.approx(0.010 + 144 * 0.001)


def test_pad_sleeps_only_what_the_forward_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clock is the test's: pad asks for the forward's time less what it already took, never less than 0."""
    from specctl.engines.reference import roofline as module

    slept: list[float] = []
    monkeypatch.setattr(module.time, "perf_counter", lambda: 100.0)
    monkeypatch.setattr(module.time, "sleep", slept.append)
    roofline = Roofline(0.05, 1, 0.0)
    roofline.pad(100.0 - 0.02, 1)  # began 20 ms ago: 30 ms are left
    roofline.pad(100.0 - 1.0, 1)  # a forward that already took a second is not padded
    assert slept == [pytest.approx(0.03)]


def test_output_is_the_same_with_and_without_it() -> None:
    prompts = workload_prompts()[:4]
    plain = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, max_running_requests=4)
    padded = SpeculativeDecoder(
        TARGET, DRAFTER, num_steps=3, max_running_requests=4, roofline=Roofline(0.001, 8, 0.0001)
    )
    assert [g.output_ids for g in plain.generate_batch(prompts, 24)] == [
        g.output_ids for g in padded.generate_batch(prompts, 24)
    ]
