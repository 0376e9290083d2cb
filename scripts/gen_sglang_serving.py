#!/usr/bin/env python3
"""Derive, from the code of every sglang release, how the way a server is launched changes what its
target captures for an EAGLE-3 drafter, beyond what the setter answers (that is the capture table's
job, gen_sglang_conventions.py). Writes `specctl/engines/sglang/data/serving.json`: for each
behaviour, the releases whose code shows it (first..last of each run of releases).

Each behaviour is read from the release's own files (the wheel as a zip, never installed):

- `graph_default_before_ids`: the CUDA-graph runner calls the target's `set_eagle3_layers_to_capture()`
  with no ids before capturing its graphs (model_executor/cuda_graph_runner.py), while the model
  runner applies the drafter's ids only afterwards (a setter call with an argument in
  model_executor/model_runner.py): every verify step replayed from a graph captures the default
  positions. Fixed when the runner applies the ids before the graphs (and the graph runner no
  longer calls the setter).
- `autotune_default`: the model runner's FlashInfer-autotune dummy run also calls the setter with
  no ids (before the drafter's ids), even with `--disable-cuda-graph`.
- `flag_setter`: Qwen2-MoE's model-level setter marks layers (`_is_layer_to_capture`) and never
  clears the marks, so a default call followed by the drafter's call captures both (Qwen3-MoE
  delegates to it; Qwen3-Next has the same setter).
- `override_reaches_draft`: `ModelConfig.from_server_args` hands `--json-model-override-args` to
  every ModelConfig, the draft's included (its `eagle_config`, where the ids live, is replaced whole).
- `tbo_layers`: the decoder-layer classes two-batch overlap can run (`OperationsStrategy.init_new_tbo`
  picks by class name and raises NotImplementedError for any other).
- `tbo_dense_cut`: DeepSeek's forward stops its capturing loop at `first_k_dense_replace` on a batch
  that can run two-batch overlap (the rest of the layers run in the overlap path, uncaptured).
- `tbo_skips_capture`: Qwen2-MoE's forward, which Qwen3-MoE's model inherits, sends a TBO batch
  through the overlap path without its capturing loop.
- `pp_refuses_speculative`: the server refuses `--pp-size` > 1 with speculative decoding at start-up.

    python scripts/gen_sglang_serving.py [--check] [--cache DIR]
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import release_data  # noqa: E402
from gen_sglang_conventions import DEFAULT_CACHE, list_releases_cached  # noqa: E402

OUT = REPO / "specctl" / "engines" / "sglang" / "data" / "serving.json"
SRT = "sglang/srt/"
BEHAVIOURS = (
    "graph_default_before_ids",
    "autotune_default",
    "flag_setter",
    "override_reaches_draft",
    "tbo_dense_cut",
    "tbo_skips_capture",
    "pp_refuses_speculative",
)
NO_ARGS_SETTER = re.compile(r"set_eagle3_layers_to_capture\(\s*\)")
ARGS_SETTER = re.compile(r"set_eagle3_layers_to_capture\(\s*[\w.]")


class Release:
    """The text of one wheel's sglang/srt files, read lazily."""

    def __init__(self, wheel: Path) -> None:
        self.zip = zipfile.ZipFile(wheel)
        self.names = [n for n in self.zip.namelist() if n.startswith(SRT) and n.endswith(".py")]

    def text(self, pattern: str) -> str:
        """Every file whose path (below sglang/srt/) matches `pattern`, concatenated."""
        return "\n".join(
            self.zip.read(n).decode("utf-8", "replace") for n in self.names if re.fullmatch(pattern, n[len(SRT) :])
        )


def behaviours(wheel: Path) -> dict[str, object]:
    """What one release's code shows, behaviour by behaviour."""
    r = Release(wheel)
    graph_runner = r.text(r"model_executor/cuda_graph_runner\.py")
    model_runner = r.text(r"model_executor/model_runner(_components/.*)?\.py")
    qwen2_moe = r.text(r"models/qwen2_moe\.py")
    deepseek = r.text(r"models/deepseek_v2\.py")
    strategy = r.text(r"(two_batch_overlap|operations_strategy|batch_overlap/.*)\.py")
    server_args = r.text(r"(server_args|arg_groups/.*)\.py")
    model_config = r.text(r"configs/model_config\.py")
    ids_applied = bool(ARGS_SETTER.search(model_runner))
    return {
        "graph_default_before_ids": bool(NO_ARGS_SETTER.search(graph_runner)) and ids_applied,
        "autotune_default": "_flashinfer_autotune" in model_runner
        and bool(re.search(r"def _dummy_run[\s\S]*?set_eagle3_layers_to_capture\(\s*\)", model_runner)),
        "flag_setter": '"_is_layer_to_capture", True' in qwen2_moe,
        "override_reaches_draft": bool(
            re.search(r"def from_server_args[\s\S]{0,2000}?json_model_override_args", model_config)
        ),
        "tbo_layers": sorted(set(re.findall(r'layer_name == "(\w+)"', strategy))),
        "tbo_dense_cut": bool(re.search(r"can_run_tbo[\s\S]{0,300}?first_k_dense_replace", deepseek))
        and "set_eagle3_layers_to_capture" in deepseek,
        "tbo_skips_capture": bool(
            re.search(
                r"if forward_batch\.can_run_tbo:\s*\n\s*hidden_states(, residual)? = model_forward_\w+\(", qwen2_moe
            )
        )
        and "layers_to_capture" in qwen2_moe,
        "pp_refuses_speculative": "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"
        in server_args
        or "Pipeline parallelism currently only supports EAGLE" in server_args,
    }


def _runs(releases: list[str], shown: list[bool]) -> list[list[str]]:
    """The [first, last] of each run of consecutive releases where a behaviour shows."""
    runs: list[list[str]] = []
    for version, on in zip(releases, shown, strict=True):
        if on and runs and runs[-1][1] == releases[releases.index(version) - 1]:
            runs[-1][1] = version
        elif on:
            runs.append([version, version])
    return runs


def generate(cache: Path) -> dict[str, object]:
    releases = list_releases_cached(cache)
    seen = {v: behaviours(next(iter(sorted(cache.glob(f"sglang-{v}-*.whl"))))) for v in releases}
    ranges = {name: _runs(releases, [bool(seen[v][name]) for v in releases]) for name in BEHAVIOURS}
    layer_sets: list[list[object]] = []
    for v in releases:
        layers = seen[v]["tbo_layers"]
        if layer_sets and layer_sets[-1][2] == layers:
            layer_sets[-1][1] = v
        else:
            layer_sets.append([v, v, layers])
    return {
        "generated_by": "scripts/gen_sglang_serving.py",
        "releases": [releases[0], releases[-1]],
        "ranges": {**ranges, "tbo_layers": layer_sets},
    }


def main() -> int:
    return release_data.run(__doc__ or "", OUT, "ranges", generate, DEFAULT_CACHE)


if __name__ == "__main__":
    sys.exit(main())
