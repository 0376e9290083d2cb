"""The launch rules of engines/sglang/serving.py against the code of the sampled releases: each wheel of
scripts/sglang-cpu/wheels.lock is read by the generator's own detectors (scripts/gen_sglang_serving.py),
and the shipped data must say what that release's code shows. The sample holds releases on both sides of
each boundary: CUDA graphs before the ids (0.4.6 | 0.4.9 ... 0.5.10 | 0.5.11), the autotune call
(0.5.5.post1 | 0.5.6 ... 0.5.10 | 0.5.11), the marking setter (0.5.2 | 0.5.4.post2), the DeepSeek cut
(0.5.2 | 0.5.4.post2), the Qwen-MoE skip (0.4.6 | 0.4.9), pipeline parallel (0.4.6 | 0.4.9)."""

from __future__ import annotations

import pytest

from specctl.engines.sglang import serving
from tests.engines.sglang.conftest import Wheels, script

BOUNDARIES = {
    "graph_default_before_ids": ("0.4.6", "0.4.9", "0.5.10", "0.5.11"),
    "autotune_default": ("0.5.5.post1", "0.5.6", "0.5.10", "0.5.11"),
    "flag_setter": ("0.5.2", "0.5.4.post2"),
    "tbo_dense_cut": ("0.5.2", "0.5.4.post2"),
    "tbo_skips_capture": ("0.4.6", "0.4.9"),
    "pp_refuses_speculative": ("0.4.6", "0.4.9"),
}


@pytest.mark.conformance
def test_every_sampled_release_shows_what_the_shipped_rules_say(cached_wheels: Wheels) -> None:
    gen = script("gen_sglang_serving")
    for version in cached_wheels.releases:
        shown = gen.behaviours(cached_wheels.wheel(version))
        for behaviour in gen.BEHAVIOURS:
            assert serving.shows(behaviour, version) == shown[behaviour], (version, behaviour)
        assert serving.tbo_layers(version) == frozenset(shown["tbo_layers"]), version


@pytest.mark.conformance
def test_the_sample_holds_both_sides_of_every_boundary(cached_wheels: Wheels) -> None:
    """A rule is only checked where the sample changes under it: each boundary's two sides are in the lock."""
    for behaviour, versions in BOUNDARIES.items():
        assert set(versions) <= set(cached_wheels.releases), behaviour
        sides = [serving.shows(behaviour, v) for v in versions]
        assert sides[0] != sides[1], (behaviour, versions)
