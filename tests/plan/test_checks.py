"""Every check code, with a case that passes it and a case that fails it, on real checkpoint directories."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specctl.flows import static
from specctl.plan.checks import CODES
from tests.factory import DELETE, Scenario, merge

Edit = Callable[[Scenario], None]


def codes(scenario: Scenario) -> dict[str, list[Any]]:
    report = static.check(scenario.write(), engine_python=scenario.engine_python)
    found: dict[str, list[Any]] = {}
    for f in report.findings:
        found.setdefault(f.code, []).append(f)
    return found


@pytest.fixture
def scenario(tmp_path: Path) -> Scenario:
    return Scenario(tmp_path)


def test_the_base_scenario_is_clean(scenario: Scenario) -> None:
    found = codes(scenario)
    assert not [c for c, fs in found.items() if any(f.severity.value == "error" for f in fs)], found


def profile(**override: Any) -> Edit:
    return lambda s: setattr(s, "profile", merge(s.profile, override))


def manifest(**override: Any) -> Edit:
    return lambda s: setattr(s, "manifest", merge(s.manifest, override))


def drafter(**override: Any) -> Edit:
    return lambda s: setattr(s, "drafter_config", merge(s.drafter_config, override))


def target(**override: Any) -> Edit:
    return lambda s: setattr(s, "target_config", merge(s.target_config, override))


def both(*edits: Edit) -> Edit:
    def apply(s: Scenario) -> None:
        for edit in edits:
            edit(s)

    return apply


def no_d2t(s: Scenario) -> None:
    from examples.hub import eagle3_tensors

    s.drafter_tensors = [t for t in eagle3_tensors(s.drafter_config, 256) if t[0] != "d2t"]


def short_d2t(s: Scenario) -> None:
    from examples.hub import eagle3_tensors

    s.drafter_tensors = [
        (n, d, (150,) if n == "d2t" else shape) for n, d, shape in eagle3_tensors(s.drafter_config, 256)
    ]


# a drafter trained on layers other than the engine's default ones ([2, N//2, N-3] = layers [1, 15, 28] at N = 32)
OFF_DEFAULT = both(
    drafter(eagle_config={"eagle_aux_hidden_state_layer_ids": [3, 17, 27]}), manifest(capture={"layers": [3, 17, 27]})
)
QWEN3_MOE = both(
    target(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe"),
    manifest(target={"architecture": "Qwen3MoeForCausalLM"}),
)


def DEEPSEEK(dense: int) -> Edit:
    """A DeepSeek-V3 target whose first `dense` layers are dense (two-batch overlap captures only there)."""
    return both(
        target(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", first_k_dense_replace=dense),
        manifest(target={"architecture": "DeepseekV3ForCausalLM"}),
    )


# code -> (an edit that triggers it, an edit under which it is absent though the topic is exercised)
CASES: dict[str, tuple[Edit, Edit]] = {
    "checkpoint-unreadable": (profile(target={"model": "/nonexistent/target"}), lambda s: None),
    "engine-version-unknown": (profile(engine={"version": "0.3.0"}), profile(engine={"version": "0.5.23"})),
    "capture-unsupported": (profile(engine={"version": "0.4.0"}), profile(engine={"version": "0.5.23"})),
    "capture-mismatch": (profile(drafter={"layer_ids": [-1, 2, 30]}), profile(drafter={"layer_ids": [1, 15, 28]})),
    "capture-inexpressible": (manifest(capture={"layers": [1, 15, 31]}), manifest(capture={"layers": [1, 15, 30]})),
    "capture-overlay": (drafter(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}), lambda s: None),
    "capture-default": (drafter(eagle_config=DELETE), lambda s: None),
    "capture-out-of-range": (profile(drafter={"layer_ids": [1, 15, 31]}), profile(drafter={"layer_ids": [1, 15, 30]})),
    "capture-width": (profile(drafter={"layer_ids": [1, 15]}), profile(drafter={"layer_ids": [1, 15, 28]})),
    "manifest-width": (lambda s: setattr(s, "captures", 4), lambda s: None),
    "manifest-order": (manifest(capture={"layers": [15, 1, 28]}), manifest(capture={"layers": [1, 15, 28]})),
    "manifest-layer-range": (manifest(capture={"layers": [1, 15, 40]}), manifest(capture={"layers": [1, 15, 30]})),
    "manifest-target": (manifest(target={"hidden_size": 512}, capture={"width": 1536}), lambda s: None),
    "manifest-drafter": (manifest(drafter={"model": "/elsewhere/drafter"}), lambda s: None),
    "drafter-hidden": (drafter(target_hidden_size=512), drafter(target_hidden_size=256)),
    "vocab-size": (drafter(vocab_size=1001), drafter(vocab_size=1000)),
    "d2t-length": (short_d2t, no_d2t),
    "draft-vocab-key": (drafter(draft_vocab_size=DELETE), drafter(draft_vocab_size=None)),
    "aux-disabled": (
        drafter(eagle_config={"use_aux_hidden_state": False}),
        drafter(eagle_config={"use_aux_hidden_state": True}),
    ),
    "ids-top-level": (
        drafter(eagle_aux_hidden_state_layer_ids=[2, 16, 29]),
        drafter(eagle_aux_hidden_state_layer_ids=[1, 15, 28]),
    ),
    "spec-adaptive": (
        profile(speculative={"adaptive": True, "eagle_topk": 4, "num_draft_tokens": 8}),
        profile(speculative={"adaptive": True}),
    ),
    "drafter-format": (drafter(architectures=["LlamaForCausalLM"]), drafter(architectures=["LlamaForCausalLMEagle3"])),
    "drafter-ids-type": (
        drafter(eagle_config={"eagle_aux_hidden_state_layer_ids": [True, 15, 28]}),
        drafter(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}),
    ),
    "algorithm-drafter": (profile(speculative={"algorithm": "EAGLE"}), profile(speculative={"algorithm": "EAGLE3"})),
    "tp-heads": (profile(parallel={"tp": 3}, hardware={"gpus_per_node": 8}), profile(parallel={"tp": 8})),
    "tp-gpus": (
        profile(parallel={"tp": 8}, hardware={"gpus_per_node": 4}),
        profile(parallel={"tp": 4}, hardware={"gpus_per_node": 4}),
    ),
    "parallel-hosts": (
        profile(parallel={"tp": 8, "nnodes": 2}, hardware={"gpus_per_node": 4}, hosts=[]),
        profile(parallel={"tp": 8, "nnodes": 2}, hardware={"gpus_per_node": 4}, hosts=["a", "b"]),
    ),
    "memory": (
        both(
            target(
                hidden_size=8192,
                intermediate_size=28672,
                num_attention_heads=64,
                num_key_value_heads=8,
                num_hidden_layers=80,
                vocab_size=128256,
            ),
            manifest(
                target={"hidden_size": 8192, "num_hidden_layers": 80, "vocab_size": 128256}, capture={"width": 24576}
            ),
            drafter(
                hidden_size=8192,
                vocab_size=128256,
                num_attention_heads=64,
                num_key_value_heads=8,
                intermediate_size=28672,
            ),
        ),
        both(
            target(
                hidden_size=8192,
                intermediate_size=28672,
                num_attention_heads=64,
                num_key_value_heads=8,
                num_hidden_layers=80,
                vocab_size=128256,
            ),
            manifest(
                target={"hidden_size": 8192, "num_hidden_layers": 80, "vocab_size": 128256}, capture={"width": 24576}
            ),
            drafter(
                hidden_size=8192,
                vocab_size=128256,
                num_attention_heads=64,
                num_key_value_heads=8,
                intermediate_size=28672,
            ),
            profile(parallel={"tp": 4}),
        ),
    ),
    "unpinned-revision": (
        profile(target={"model": "org/model", "allow_unpinned": True}),
        profile(target={"model": "org/model", "revision": "a" * 40}),
    ),
    "spec-rewrite": (profile(speculative={"num_draft_tokens": 8}), profile(speculative={"num_draft_tokens": 4})),
    "spec-auto": (
        profile(speculative={"num_steps": None, "eagle_topk": None, "num_draft_tokens": None}),
        lambda s: None,
    ),
    "spec-rejected": (
        profile(speculative={"num_steps": 3, "eagle_topk": None, "num_draft_tokens": None}),
        lambda s: None,
    ),
    "flag-unknown": (
        profile(engine={"args": {"cuda-graph-max-bs": 8}}),
        profile(engine={"args": {"cuda-graph-max-bs-decode": 8}}),
    ),
    "flag-type": (
        profile(engine={"args": {"max-running-requests": "many"}}),
        profile(engine={"args": {"max-running-requests": 8}}),
    ),
    "flag-choice": (
        profile(engine={"args": {"attention-backend": "flashinfr"}}),
        profile(engine={"args": {"attention-backend": "flashinfer"}}),
    ),
    "flag-reserved": (profile(engine={"args": {"tp-size": 2}}), profile(engine={"args": {"enable-metrics": True}})),
    "flag-catalog-missing": (
        profile(engine={"version": "0.6.0", "args": {"enable-metrics": True}}),
        profile(engine={"version": "0.5.14", "args": {"enable-metrics": True}}),
    ),
    "probe-failed": (lambda s: setattr(s, "engine_python", "/nonexistent/python"), lambda s: None),
    "capture-duplicate": (profile(drafter={"layer_ids": [1, 1, 28]}), profile(drafter={"layer_ids": [1, 15, 28]})),
    "capture-cuda-graph": (
        both(OFF_DEFAULT, profile(engine={"version": "0.5.10"})),
        both(OFF_DEFAULT, profile(engine={"version": "0.5.10", "args": {"disable-cuda-graph": True}})),
    ),
    "capture-union": (
        both(OFF_DEFAULT, QWEN3_MOE, profile(engine={"version": "0.5.10"})),
        both(OFF_DEFAULT, QWEN3_MOE, profile(engine={"version": "0.5.10", "args": {"disable-cuda-graph": True}})),
    ),
    "capture-tbo": (
        both(DEEPSEEK(3), profile(engine={"args": {"enable-two-batch-overlap": True}})),
        both(DEEPSEEK(30), profile(engine={"args": {"enable-two-batch-overlap": True}})),
    ),
    "model-override": (
        profile(engine={"args": {"json-model-override-args": '{"num_hidden_layers": 2}'}}),
        profile(engine={"args": {"json-model-override-args": '{"max_position_embeddings": 4096}'}}),
    ),
    "pp-speculative": (profile(engine={"args": {"pp-size": 2}}), profile(engine={"args": {"pp-size": 1}})),
}

# codes that need a real engine to answer the probe: covered (failing and passing) by
# tests/engines/sglang/test_probe_conformance.py
CONFORMANCE_CODES = {"probe-version", "probe-disagrees", "probe-parse", "probe-agrees"}


def test_every_code_has_cases() -> None:
    assert set(CASES) | CONFORMANCE_CODES == set(CODES)
    from tests.engines.sglang.test_probe_conformance import COVERED

    assert COVERED == CONFORMANCE_CODES


@pytest.mark.parametrize("code", sorted(CASES))
def test_check_fails(code: str, scenario: Scenario) -> None:
    CASES[code][0](scenario)
    found = codes(scenario)
    assert code in found, f"{code} not reported; got {sorted(found)}"
    finding = found[code][0]
    assert finding.message and finding.fix


@pytest.mark.parametrize("code", sorted(CASES))
def test_check_passes(code: str, scenario: Scenario) -> None:
    CASES[code][1](scenario)
    assert code not in codes(scenario)
