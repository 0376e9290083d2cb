"""Adaptive speculation in the reference engine: num_steps chosen per batch-size tier from the
acceptance seen, output still exactly the target's greedy output, and the steps it ran visible in
the counters (proposed drafts per verify)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from specctl.engines import get_engine
from specctl.engines.reference.adaptive import AdaptiveSteps, Tier
from specctl.engines.reference.runtime import adaptive_tiers
from specctl.engines.reference.server import main
from specctl.engines.reference.speculate import SpeculativeDecoder
from tests.engines.reference.test_speculate import DRAFTER, TARGET, workload_prompts

MAX_NEW = 64


def test_a_tier_climbs_while_drafts_are_accepted_and_drops_when_they_are_not() -> None:
    tier = Tier.start({"candidate_steps": [1, 3, 5, 7], "warmup_batches": 2, "update_interval": 1}, initial_steps=3)
    for _ in range(12):
        tier.observe([4, 5, 4])  # long accepted runs: more steps pay
    assert tier.steps in (5, 7)
    for _ in range(30):
        tier.observe([0, 0, 0])  # nothing accepted: fewer steps
    assert tier.steps == 1


def test_a_batch_uses_the_tier_of_the_largest_size_not_above_it() -> None:
    steps = AdaptiveSteps.start({"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}, initial_steps=3)
    assert [steps.steps_for(n) for n in (1, 7, 8, 64)] == [3, 3, 1, 1]


def test_output_stays_exact_and_the_counters_show_the_steps_run() -> None:
    plain = SpeculativeDecoder(TARGET, max_running_requests=8)
    tiers = get_engine("sglang").adaptive_tiers("0.5.23")
    assert tiers is not None
    adaptive = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, max_running_requests=8, adaptive=tiers)
    prompts = workload_prompts()[:8]
    expected = [plain.generate(p, MAX_NEW).output_ids for p in prompts]
    alone = [adaptive.generate(p, MAX_NEW) for p in prompts]  # batch 1: the tier [1, 3, 5, 7]
    assert [g.output_ids for g in alone] == expected
    assert adaptive.adaptive is not None and len(adaptive.adaptive.used) > 1  # it moved off the initial 3 steps
    proposed = sum(g.spec_num_proposed_drafts for g in alone)
    verify = sum(g.spec_verify_ct for g in alone)
    assert proposed / verify != 3.0
    together = adaptive.generate_batch(prompts, MAX_NEW)  # batch 8: the tier [0, 1, 3]
    assert [g.output_ids for g in together] == expected


def test_a_tier_of_no_steps_decodes_without_drafting() -> None:
    engine = SpeculativeDecoder(
        TARGET, DRAFTER, num_steps=3, max_running_requests=4, adaptive={"1": {"candidate_steps": [0]}}
    )
    plain = SpeculativeDecoder(TARGET, max_running_requests=4)
    prompt = workload_prompts()[0]
    g = engine.generate(prompt, 32)
    assert g.output_ids == plain.generate(prompt, 32).output_ids
    assert g.spec_num_proposed_drafts == 0 and g.spec_verify_ct == g.completion_tokens - 1


def test_a_release_without_adaptive_refuses_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "--model-path",
                str(TARGET),
                "--speculative-algorithm",
                "EAGLE3",
                "--speculative-draft-model-path",
                str(DRAFTER),
                "--speculative-adaptive",
                "--emulate-sglang-version",
                "0.5.10",
            ]
        )
    assert exit_info.value.code == 2 and "unrecognized arguments: --speculative-adaptive" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("version", "config", "expected"),
    [
        ("0.5.12", {"candidate_steps": [1, 3]}, {"1": {"candidate_steps": [1, 3]}}),  # before tiers: one set of knobs
        ("0.5.23", {"8": {"candidate_steps": [0, 1]}}, {"8": {"candidate_steps": [0, 1]}}),
    ],
)
def test_the_config_file_is_read_as_the_emulated_release_reads_it(
    tmp_path: Path, version: str, config: dict[str, Any], expected: dict[str, Any]
) -> None:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(config))
    args = argparse.Namespace(emulate_sglang_version=version, speculative_adaptive_config=str(path))
    tiers = adaptive_tiers(args, {"speculative_adaptive": True})
    assert tiers is not None and {k: {n: v[n] for n in expected[k]} for k, v in tiers.items()} == expected


def test_a_tiered_release_refuses_a_file_without_batch_sizes(tmp_path: Path) -> None:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"candidate_steps": [1, 3]}))
    args = argparse.Namespace(emulate_sglang_version="0.5.23", speculative_adaptive_config=str(path))
    with pytest.raises(ValueError, match="integer-string BS key"):
        adaptive_tiers(args, {"speculative_adaptive": True})
