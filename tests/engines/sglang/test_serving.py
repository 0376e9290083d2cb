"""The launch rules of engines/sglang/serving.py, case by case (their release ranges are checked against the
code of the sampled releases in test_serving_conformance.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specctl.engines.sglang import capture as table
from specctl.engines.sglang import serving
from specctl.flows import static
from tests.factory import Scenario, merge

N = 32
DEFAULT = [2, 16, 29]  # [2, N//2, N-3]


def problems(
    version: str,
    ids: Sequence[int] | None,
    *,
    architecture: str = "LlamaForCausalLM",
    settings: Mapping[str, Any] | None = None,
    algorithm: str = "EAGLE3",
    sm: str = "9.0",
    target: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    rule = table.load_table().rule_for(version, architecture)
    assert rule is not None
    outcome = table.capture(rule, ids, N)
    launch = serving.Launch(version, architecture, algorithm, settings or {}, outcome, DEFAULT, N, target or {}, sm)
    return {p.code: p.message + " | " + p.fix for p in serving.serving_problems(launch)}


def test_cuda_graphs_before_the_ids_only_where_the_served_layers_are_not_the_defaults() -> None:
    assert "capture-cuda-graph" in problems("0.5.10", [3, 17, 27])
    assert "capture-cuda-graph" in problems("0.4.9", [3, 17, 27])  # the first release that applies the ids
    assert not problems("0.5.10", [1, 15, 28])  # +1: the default positions themselves
    assert not problems("0.5.10", None)  # no ids: the default everywhere
    assert not problems("0.5.11", [3, 17, 27])  # the ids are applied before the graphs
    assert not problems("0.4.8", [3, 17, 27])  # the ids are ignored everywhere (the capture table says so)
    assert not problems("0.5.10", [3, 17, 27], settings={"disable_cuda_graph": True})


def test_the_marking_setter_captures_the_union_and_autotune_keeps_it_without_graphs() -> None:
    qwen = {"architecture": "Qwen3MoeForCausalLM"}
    found = problems("0.5.10", [3, 17, 27], **qwen)
    assert set(found) == {"capture-union"} and "[2, 4, 16, 18, 28, 29]" in found["capture-union"]
    assert not problems("0.5.10", [3, 17, 27], settings={"disable_cuda_graph": True}, **qwen)  # H100: no autotune
    # on a B200 sglang picks the flashinfer_trtllm MoE runner by itself, and its autotune run sets the defaults
    b200 = problems("0.5.8", [3, 17, 27], settings={"disable_cuda_graph": True}, sm="10.0", **qwen)
    assert "disable-flashinfer-autotune: true" in b200["capture-union"]
    quiet = {"disable_cuda_graph": True, "disable_flashinfer_autotune": True}
    assert not problems("0.5.8", [3, 17, 27], settings=quiet, sm="10.0", **qwen)
    # 0.5.6: autotune only when asked for, and keyed on the attention backend
    asked = {"disable_cuda_graph": True, "enable_flashinfer_autotune": True, "attention_backend": "flashinfer"}
    assert "capture-union" in problems("0.5.6", [3, 17, 27], settings=asked, **qwen)
    assert not problems("0.5.6", [3, 17, 27], settings={"disable_cuda_graph": True}, **qwen)
    # before the marking setter (0.5.4.post1: it replaced the list) the graphs alone are the problem
    assert set(problems("0.5.4.post1", [3, 17, 27], **qwen)) == {"capture-cuda-graph"}


def test_two_batch_overlap_by_architecture_and_release() -> None:
    tbo = {"enable_two_batch_overlap": True}
    deepseek = {"architecture": "DeepseekV3ForCausalLM", "settings": tbo}
    packer = problems("0.5.23", [2, 16, 29], target={"first_k_dense_replace": 3}, **deepseek)["capture-tbo"]
    assert "captured 1 of 3 aux hidden states" in packer
    listed = problems("0.5.16", [2, 16, 29], target={"first_k_dense_replace": 3}, **deepseek)["capture-tbo"]
    assert "1 blocks of features where its fc takes 3" in listed
    assert not problems("0.5.23", [2, 10, 20], target={"first_k_dense_replace": 30}, **deepseek)
    skipped = problems("0.5.23", [1, 15, 28], architecture="Qwen3MoeForCausalLM", settings=tbo)["capture-tbo"]
    assert "without capturing" in skipped
    assert (
        "NotImplementedError"
        in problems("0.5.23", [1, 15, 28], architecture="Qwen2MoeForCausalLM", settings=tbo)["capture-tbo"]
    )
    assert not problems("0.5.23", [3, 17, 27], settings=tbo)  # Llama has no overlap path


def test_pipeline_parallel_is_refused_with_speculation_as_each_release_does() -> None:
    pp = {"pp_size": 2}
    assert "pp-speculative" in problems("0.5.23", [1, 15, 28], settings=pp)
    assert "pp-speculative" in problems("0.5.20", [1, 15, 28], settings=pp, algorithm="EAGLE")
    assert not problems("0.5.23", [1, 15, 28], settings=pp, algorithm="EAGLE")  # plain EAGLE from 0.5.21
    assert not problems("0.5.23", [1, 15, 28], settings={"pp_size": 1})


def scenario(tmp_path: Path, **profile: Any) -> dict[str, list[Any]]:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, profile)
    found: dict[str, list[Any]] = {}
    for f in static.check(s.write()).findings:
        found.setdefault(f.code, []).append(f)
    return found


def test_an_override_of_the_drafter_ids_decides_them_and_names_the_flag(tmp_path: Path) -> None:
    wrong = '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [3, 17, 27]}}'
    found = scenario(tmp_path / "a", engine={"args": {"json-model-override-args": wrong}})
    [mismatch] = found["capture-mismatch"]
    assert mismatch.field == "engine.args" and "--json-model-override-args" in mismatch.fix
    assert "[1, 15, 28]" in mismatch.fix  # the ids that would capture the manifest's layers
    # an override that names the manifest's layers passes, and no overlay could change what it decides
    right = '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}}'
    assert "capture-mismatch" not in scenario(tmp_path / "b", engine={"args": {"json-model-override-args": right}})
    # an override that touches neither the ids nor the layer count changes nothing
    other = scenario(tmp_path / "c", engine={"args": {"json-model-override-args": '{"rope_theta": 10000}'}})
    assert not {"capture-mismatch", "model-override"} & set(other)


def test_pipeline_stages_count_in_the_gpu_check(tmp_path: Path) -> None:
    found = scenario(tmp_path, parallel={"tp": 8}, engine={"args": {"pp-size": 2}})
    assert "tp 8 x pp 2 needs 16 GPUs" in found["tp-gpus"][0].message
