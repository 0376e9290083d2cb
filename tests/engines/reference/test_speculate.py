"""The reference engine really speculates: acceptance with the right and wrong layers, exact greedy output.

All numbers come from the FinishedRequest counters (sglang 0.5.23 meta_info meanings) over the shipped
chat-small workload with the shipped checkpoints; greedy decoding in float64 makes them deterministic.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from specctl.engines.reference.speculate import FinishedRequest, SpeculativeDecoder, resolve_capture
from specctl.engines.reference.tokenizer import EOS_ID, apply_chat_template, encode

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama"
DRAFTER = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama-eagle3"
WORKLOAD = ROOT / "specctl" / "verdict" / "workloads" / "chat-small.jsonl"
MAX_NEW = 64


def workload_prompts() -> list[list[int]]:
    lines = WORKLOAD.read_text(encoding="utf-8").splitlines()
    return [encode(apply_chat_template(json.loads(line)["messages"])) for line in lines if line.strip()]


def random_prompts(count: int, seed: int = 7) -> list[list[int]]:
    """Prompts off the workload: chat questions the corpus never asks, and raw byte noise."""
    rng = random.Random(seed)
    words = ["what", "is", "the", "capital", "count", "list", "blue", "River", "7", "?", "please", "zebra", "Mars"]
    prompts = []
    for i in range(count):
        if i % 2:
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 12)))
            prompts.append(encode(apply_chat_template([{"role": "user", "content": text}])))
        else:
            prompts.append(encode(bytes(rng.randrange(32, 127) for _ in range(rng.randrange(1, 40))).decode()))
    return prompts


def wrong_layers_drafter(tmp_path: Path, ids: list[int]) -> Path:
    """The shipped drafter with other ids in its config: same width, other layers (a manifest mismatch)."""
    overlay = tmp_path / "drafter-wrong-ids"
    overlay.mkdir()
    config = json.loads((DRAFTER / "config.json").read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = ids
    (overlay / "config.json").write_text(json.dumps(config))
    (overlay / "model.safetensors").symlink_to(DRAFTER / "model.safetensors")
    return overlay


def accept_length(generations: list[FinishedRequest]) -> float:
    return sum(g.completion_tokens for g in generations) / sum(g.spec_verify_ct for g in generations)


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return workload_prompts()


@pytest.fixture(scope="module")
def baseline(prompts: list[list[int]]) -> list[FinishedRequest]:
    engine = SpeculativeDecoder(TARGET)
    return [engine.generate(p, MAX_NEW) for p in prompts + random_prompts(24)]


@pytest.fixture(scope="module")
def correct(prompts: list[list[int]]) -> list[FinishedRequest]:
    engine = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, topk=1, num_draft_tokens=4)
    return [engine.generate(p, MAX_NEW) for p in prompts + random_prompts(24)]


@pytest.fixture(scope="module")
def wrong(prompts: list[list[int]], tmp_path_factory: pytest.TempPathFactory) -> list[FinishedRequest]:
    # ids [-1, 1, 3] capture positions [0, 2, 4] under sglang 0.5.23 Llama: the embedding and the
    # outputs of layers 1 and 3, where the drafter was trained on the outputs of layers 1, 3 and 4
    drafter = wrong_layers_drafter(tmp_path_factory.mktemp("overlay"), [-1, 1, 3])
    engine = SpeculativeDecoder(TARGET, drafter, num_steps=3, topk=1, num_draft_tokens=4)
    assert engine.capture_positions == (0, 2, 4)
    return [engine.generate(p, MAX_NEW) for p in prompts]


def test_workload_is_the_built_in_chat_set(prompts: list[list[int]]) -> None:
    assert len(prompts) == 32


def test_correct_layers_accept_at_least_two_tokens_per_verify(
    correct: list[FinishedRequest], prompts: list[list[int]]
) -> None:
    on_workload = correct[: len(prompts)]
    assert accept_length(on_workload) >= 2.0


def test_wrong_layers_lose_at_least_30_percent(
    correct: list[FinishedRequest], wrong: list[FinishedRequest], prompts: list[list[int]]
) -> None:
    right = accept_length(correct[: len(prompts)])
    assert accept_length(wrong) <= 0.7 * right


def test_speculation_keeps_greedy_output_exact(
    baseline: list[FinishedRequest], correct: list[FinishedRequest], wrong: list[FinishedRequest]
) -> None:
    assert [g.output_ids for g in correct] == [g.output_ids for g in baseline]
    assert [g.output_ids for g in wrong] == [g.output_ids for g in baseline[: len(wrong)]]
    assert [g.finish_reason for g in correct] == [g.finish_reason for g in baseline]


def test_counters_mean_what_sglang_means(correct: list[FinishedRequest], baseline: list[FinishedRequest]) -> None:
    for g in correct:
        h = g.spec_correct_drafts_histogram
        assert len(h) == 4 and sum(h) == g.spec_verify_ct
        assert sum(k * n for k, n in enumerate(h)) == g.spec_num_correct_drafts
        assert g.spec_num_proposed_drafts == 3 * g.spec_verify_ct
        # the first token is prefill's; each verify adds accepted drafts + the bonus (fewer at a stop)
        assert g.completion_tokens <= 1 + g.spec_verify_ct + g.spec_num_correct_drafts
        assert g.completion_tokens == len(g.output_ids) <= MAX_NEW
        assert g.finish_reason == ("stop" if g.output_ids[-1] == EOS_ID else "length")
        assert g.spec_meta_info()["spec_accept_length"] == g.completion_tokens / g.spec_verify_ct
        assert 0 < g.first_token_s <= g.e2e_s
    assert all(g.spec_verify_ct == 0 and g.spec_meta_info() == {} for g in baseline)


def test_a_stop_id_ends_the_output_inclusively() -> None:
    engine = SpeculativeDecoder(TARGET)
    prompt = workload_prompts()[0]
    free = engine.generate(prompt, 8, stop_ids=())
    stopped = engine.generate(prompt, 8, stop_ids=(free.output_ids[2],))
    assert stopped.finish_reason == "stop"
    assert stopped.output_ids == free.output_ids[: free.output_ids.index(free.output_ids[2]) + 1]


def test_width_mismatch_fails_at_the_first_forward() -> None:
    engine = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, capture_positions=[2, 4])
    with pytest.raises(RuntimeError, match=r"fc expects 384 input features .* supplied 256 \(2 captures\)"):
        engine.warmup()


def test_capture_follows_sglang_0_5_23_llama(tmp_path: Path) -> None:
    assert resolve_capture(DRAFTER, 6).captured == (2, 4, 5)
    # the last layer's output (id 5 -> position 6) is silently not captured: 2 of 3, a width error
    outcome = resolve_capture(wrong_layers_drafter(tmp_path, [1, 3, 5]), 6)
    assert outcome.captured == (2, 4) and outcome.dropped
    engine = SpeculativeDecoder(TARGET, tmp_path / "drafter-wrong-ids")
    with pytest.raises(RuntimeError, match="fc expects 384"):
        engine.warmup()


def test_only_chain_drafting_and_num_draft_tokens_forced() -> None:
    with pytest.raises(ValueError, match="topk"):
        SpeculativeDecoder(TARGET, DRAFTER, topk=4, num_steps=3, num_draft_tokens=8)
    engine = SpeculativeDecoder(TARGET, DRAFTER, num_steps=2, num_draft_tokens=8)
    assert engine.num_draft_tokens == 3
    assert len(engine.generate(workload_prompts()[1], 16).spec_correct_drafts_histogram) == 3


def test_verify_steps_replayed_from_a_cuda_graph_feed_the_drafter_the_graph_layers(
    correct: list[FinishedRequest], prompts: list[list[int]]
) -> None:
    """sglang 0.4.9-0.5.10.post1 captured its verify graphs before applying the drafter's ids: prefill
    captures the drafter's layers, every verify step a graph covers captures the graph's."""
    right = accept_length(correct[: len(prompts)])
    graphed = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, graph_positions=(0, 2, 4))
    assert accept_length([graphed.generate(p, MAX_NEW) for p in prompts]) <= 0.8 * right
    # batches larger than the graphs run eagerly, on the drafter's layers: exactly the right acceptance
    eager = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, graph_positions=(0, 2, 4), graph_max_bs=0)
    assert accept_length([eager.generate(p, MAX_NEW) for p in prompts]) == right


def test_an_emulated_release_that_graphs_the_default_layers_fails_or_runs_as_it_would() -> None:
    """On the 6-layer tiny target sglang 0.5.10's default positions are [2, 3, 3]: two distinct layers, so
    the graphs feed the drafter two blocks where its fc takes three, and the first verify step fails."""
    from specctl.engines.reference.runtime import load
    from specctl.engines.reference.server import build_parser, resolved_args

    base = ["--model-path", str(TARGET), "--speculative-algorithm", "EAGLE3"]
    base += ["--speculative-draft-model-path", str(DRAFTER), "--emulate-sglang-version", "0.5.10"]
    said: list[str] = []
    args = build_parser().parse_args(base)
    with pytest.raises(RuntimeError, match="fc expects 384"):
        load(args, resolved_args(args), said.append)
    assert any("CUDA graphs captured with capture positions [2, 3]" in line for line in said)
    args = build_parser().parse_args([*base, "--disable-cuda-graph"])
    assert load(args, resolved_args(args), said.append).engine.graph_positions is None
    args = build_parser().parse_args([*base[:-1], "0.5.11"])  # the ids are applied before the graphs
    assert load(args, resolved_args(args), said.append).engine.graph_positions is None
