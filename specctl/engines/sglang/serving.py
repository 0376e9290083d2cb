"""How the way sglang is launched changes what its target captures, beyond the setter's answer.

The capture table (capture.py) answers "which positions do these drafter ids make the setter
request". The running server's answer also depends on its launch flags: whether verify steps
replay CUDA graphs captured before the drafter's ids were applied, whether a config override
replaces the ids, whether batches are split for two-batch overlap, whether pipeline parallelism is
on. Each rule here holds for the releases whose code shows it (`data/serving.json`, written by
scripts/gen_sglang_serving.py from every release's code and checked against the sampled wheels by
the conformance tier); docs/capture.md lists them with their sources.

Pure stdlib: this sits on the start-up path of `specctl check`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from specctl.engines.base import CaptureOutcome, ConfigOverride, EngineProblem
from specctl.engines.capture_frame import layers_of, show_layers, show_positions
from specctl.engines.flags import FlagCatalog
from specctl.engines.sglang import capture as table

SERVING_PATH = Path(__file__).parent / "data" / "serving.json"
OVERRIDE_FLAG = "--json-model-override-args"
IDS_KEY_PATH = "eagle_config.eagle_aux_hidden_state_layer_ids"

# architectures whose model-level setter marks layers and never clears the marks (Qwen3-MoE delegates to
# Qwen2-MoE's model; Qwen3-Next has the same setter from its first EAGLE-3 release)
FLAG_SETTER = frozenset({"Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM"})
# what two-batch overlap runs for each architecture with a TBO branch in its forward: the decoder-layer class
TBO_LAYER = {
    "DeepseekV2ForCausalLM": "DeepseekV2DecoderLayer",
    "DeepseekV3ForCausalLM": "DeepseekV2DecoderLayer",
    "DeepseekV32ForCausalLM": "DeepseekV2DecoderLayer",
    "KimiK25ForConditionalGeneration": "DeepseekV2DecoderLayer",
    "Qwen3MoeForCausalLM": "Qwen3MoeDecoderLayer",
    "Qwen2MoeForCausalLM": "Qwen2MoeDecoderLayer",
    "MiniMaxM2ForCausalLM": "MiniMaxM2DecoderLayer",
    "Glm4MoeForCausalLM": "Glm4MoeDecoderLayer",
}
DENSE_CUT = frozenset(a for a, layer in TBO_LAYER.items() if layer == "DeepseekV2DecoderLayer")
# the autotune dummy run's own conditions (model_runner `_should_run_flashinfer_autotune`)
AUTOTUNE_ATTENTION = frozenset({"flashinfer", "trtllm_mla", "trtllm_mha"})  # 0.5.6.x, with --enable-flashinfer-autotune
AUTOTUNE_MOE = frozenset({"flashinfer_trtllm", "flashinfer_mxfp4"})  # 0.5.7 on, unless --disable-flashinfer-autotune
AUTO_TRTLLM_MOE = frozenset({"Qwen3MoeForCausalLM", "Qwen3NextForCausalLM"})  # picked by itself on SM100
GRAPH_WHY = (
    "verify steps replayed from a CUDA graph (every verify batch up to cuda-graph-max-bs requests: all of "
    "them with EAGLE's default of 48 running requests) capture the default positions"
)
SLOWER = "decode then runs without CUDA graphs: slower, most at small batches"


@cache
def _data() -> dict[str, Any]:
    with open(SERVING_PATH, encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)["ranges"]
    return data


def _index(version: str) -> int:
    """Where a release stands among those read; one newer than all of them is taken as the newest."""
    releases = table.load_table().releases
    return releases.index(version) if version in releases else len(releases) - 1


def _since(version: str, first: str) -> bool:
    return _index(version) >= _index(first)


def shows(behaviour: str, version: str) -> bool:
    """Whether the code of sglang `version` shows `behaviour` (a key of data/serving.json)."""
    at = _index(version)
    return any(_index(first) <= at <= _index(last) for first, last in _data()[behaviour])


def tbo_layers(version: str) -> frozenset[str]:
    at = _index(version)
    for first, last, layers in _data()["tbo_layers"]:
        if _index(first) <= at <= _index(last):
            return frozenset(layers)
    return frozenset()


def launch_settings(catalog: FlagCatalog, args: Mapping[str, Any]) -> dict[str, Any]:
    """The profile's engine.args by the release's own destination names (aliases and spellings resolved)."""
    settings = {}
    for key, value in args.items():
        flag = catalog.lookup(key)
        settings[flag.dest if flag is not None else key.lstrip("-").replace("-", "_")] = value
    return settings


def config_override(settings: Mapping[str, Any]) -> ConfigOverride | None:
    """`--json-model-override-args` as the server applies it: each key replaces the same key of the target's
    config and of the drafter's (a dict such as eagle_config is replaced whole, never merged)."""
    raw = settings.get("json_model_override_args")
    if raw is None or raw == "" or raw == {}:
        return None
    if isinstance(raw, Mapping):
        values: Any = dict(raw)
    else:
        try:
            values = json.loads(str(raw))
        except ValueError as exc:
            return ConfigOverride(OVERRIDE_FLAG, {}, IDS_KEY_PATH, error=f"not JSON: {exc}")
    if not isinstance(values, dict):
        return ConfigOverride(OVERRIDE_FLAG, {}, IDS_KEY_PATH, error="not a JSON object")
    if not values:
        return None
    return ConfigOverride(OVERRIDE_FLAG, values, IDS_KEY_PATH, decides_ids="eagle_config" in values)


@dataclass(frozen=True)
class Launch:
    """What the rules look at: the release, the target, the resolved launch flags and the capture."""

    version: str
    architecture: str
    algorithm: str
    settings: Mapping[str, Any]
    capture: CaptureOutcome
    default: Sequence[int]
    num_layers: int
    target_config: Mapping[str, Any]
    compute_capability: str | None

    def on(self, dest: str) -> bool:
        value = self.settings.get(dest)
        return value is True or (isinstance(value, str) and value.lower() in ("true", "1", "yes"))

    def number(self, dest: str, default: int) -> int:
        value = self.settings.get(dest, default)
        return int(value) if isinstance(value, (int, float, str)) and str(value).lstrip("-").isdigit() else default

    def target_value(self, key: str) -> Any:
        if key in self.target_config:
            return self.target_config[key]
        text = self.target_config.get("text_config")
        return text.get(key) if isinstance(text, Mapping) else None

    @property
    def sm(self) -> float:
        try:
            return float(self.compute_capability or 0)
        except ValueError:
            return 0.0


def serving_problems(launch: Launch) -> list[EngineProblem]:
    """Every way these launch flags make the server capture otherwise than the setter's answer, or refuse."""
    if launch.algorithm != "EAGLE3":
        return [*_pipeline(launch)]
    return [*_graphs(launch), *_override(launch), *_two_batch_overlap(launch), *_pipeline(launch)]


def _graphs(launch: Launch) -> list[EngineProblem]:
    """Graphs captured before the drafter's ids: the default positions on every replayed verify step."""
    c, version = launch.capture, launch.version
    if c.error or c.ids is None or not shows("graph_default_before_ids", version):
        return []
    requested, default = list(dict.fromkeys(c.requested)), list(launch.default)
    if sorted(requested) == sorted(default):
        return []
    graphs = not launch.on("disable_cuda_graph")
    autotune = launch.architecture in FLAG_SETTER and _autotune_runs(launch)
    fixed = first_release_after("graph_default_before_ids")
    if launch.architecture in FLAG_SETTER and shows("flag_setter", version) and (graphs or autotune):
        union = sorted(set(default) | set(requested))
        callers = " and ".join(
            w for w, on in (("the CUDA-graph runner", graphs), ("the FlashInfer autotune run", autotune)) if on
        ) + (" set" if graphs and autotune else " sets")
        flags = [
            *(["disable-cuda-graph: true"] if graphs else []),
            *(["disable-flashinfer-autotune: true"] if autotune else []),
        ]
        return [
            EngineProblem(
                "capture-union",
                True,
                f"sglang {version} {launch.architecture}: {callers} the default positions "
                f"{show_positions(default)} before the drafter's {show_positions(requested)}, and its setter marks "
                f"layers without clearing them: steps run eagerly capture the union {show_positions(union)} "
                f"({len(union)} blocks of features where the drafter's fc takes {len(requested)}: it fails at the "
                "first such step)" + (f", and {GRAPH_WHY} {show_positions(default)}" if graphs else ""),
                f"set engine.args {' and '.join(flags)} ({SLOWER}), or pin engine.version to {fixed} or later "
                "(then run check again: the ids may mean other layers there)",
            )
        ]
    if not graphs:
        return []
    graphed = sorted(set(default))  # captured once each, in layer order
    effect = (
        "acceptance falls without an error"
        if len(graphed) == len(requested)
        else f"the drafter is fed {len(graphed)} blocks of features where its fc takes {len(requested)}, "
        "and the first verify step fails"
    )
    return [
        EngineProblem(
            "capture-cuda-graph",
            True,
            f"sglang {version} captures the target's CUDA graphs before it applies the drafter's ids: {GRAPH_WHY} "
            f"{show_positions(graphed)} (the outputs of layers {show_layers(layers_of(graphed))}), and only prefill "
            f"captures {show_positions(requested)} (layers {show_layers(layers_of(sorted(requested)))}): {effect}",
            f"set engine.args disable-cuda-graph: true ({SLOWER}), or pin engine.version to {fixed} or later "
            "(then run check again: the ids may mean other layers there)",
        )
    ]


def first_release_after(behaviour: str) -> str:
    """The first release after the last run of `behaviour` (where it was fixed)."""
    releases = table.load_table().releases
    last = _index(_data()[behaviour][-1][1])
    return releases[last + 1] if last + 1 < len(releases) else "a newer release"


def _autotune_runs(launch: Launch) -> bool:
    """Whether FlashInfer's autotune dummy run (which sets the default positions) runs at start-up."""
    version = launch.version
    if not shows("autotune_default", version) or launch.sm < 9.0:
        return False
    if version.startswith("0.5.6"):  # opt-in, and keyed on the attention backend
        return (
            launch.on("enable_flashinfer_autotune") and launch.settings.get("attention_backend") in AUTOTUNE_ATTENTION
        )
    if launch.on("disable_flashinfer_autotune"):
        return False
    moe = launch.settings.get("moe_runner_backend") or "auto"
    if moe in AUTOTUNE_MOE:
        return True
    # on SM100 sglang picks flashinfer_trtllm by itself for these (0.5.7: fp8 and modelopt_fp4; later any)
    quantized = launch.settings.get("quantization") in ("fp8", "modelopt_fp4")
    return (
        moe == "auto"
        and launch.architecture in AUTO_TRTLLM_MOE
        and 10.0 <= launch.sm < 11.0
        and (quantized or version != "0.5.7")
    )


def _override(launch: Launch) -> list[EngineProblem]:
    override = config_override(launch.settings)
    if override is None:
        return []
    if override.error:
        return [
            EngineProblem(
                "model-override",
                True,
                f"{OVERRIDE_FLAG} is {override.error}: sglang fails at start-up reading it",
                f"write {OVERRIDE_FLAG} as a JSON object, e.g. '{{\"max_position_embeddings\": 32768}}'",
            )
        ]
    if "num_hidden_layers" not in override.values:
        return []
    layers = override.values["num_hidden_layers"]
    refuses = not _since(launch.version, "0.5.12")  # llama_eagle3.py: "only supports 1 layer" until then
    return [
        EngineProblem(
            "model-override",
            True,
            f"{OVERRIDE_FLAG} sets num_hidden_layers {layers} on the drafter too (sglang applies it to every config it "
            "loads): "
            + (
                "sglang refuses an EAGLE-3 drafter of more than 1 layer and does not start"
                if refuses and layers != 1
                else "the drafter is built with that many decoder layers, which its checkpoint does not have"
            ),
            f"remove num_hidden_layers from {OVERRIDE_FLAG}",
        )
    ]


def _two_batch_overlap(launch: Launch) -> list[EngineProblem]:
    if not launch.on("enable_two_batch_overlap"):
        return []
    arch, version, c = launch.architecture, launch.version, launch.capture
    layer = TBO_LAYER.get(arch)
    if layer is None or c.error:
        return []
    fix = "remove enable-two-batch-overlap from engine.args (it is not needed for speculative decoding)"
    if layer not in tbo_layers(version):
        return [
            EngineProblem(
                "capture-tbo",
                True,
                f"sglang {version} cannot run two-batch overlap on {layer}: the first batch it splits "
                "(CUDA-graph capture at start-up) raises NotImplementedError",
                fix,
            )
        ]
    captured = list(c.captured)
    if arch in DENSE_CUT and shows("tbo_dense_cut", version):
        dense = launch.target_value("first_k_dense_replace")
        if not isinstance(dense, int):
            kept, where = [], "the first_k_dense_replace dense layers (not in the target's config)"
        else:
            kept, where = [p for p in captured if p < dense], f"its first {dense} dense layers"
        if len(kept) == len(captured):
            return []
        packer = _since(version, "0.5.17")
        outcome = (
            "its forward cannot unpack the aux hidden states at start-up"
            if not kept
            else f"the packer fails with 'captured {len(kept)} of {len(captured)} aux hidden states' at start-up"
            if packer
            else f"the drafter is fed {len(kept)} blocks of features where its fc takes {len(captured)}"
        )
        return [
            EngineProblem(
                "capture-tbo",
                True,
                f"sglang {version}: on a batch split for two-batch overlap the target captures only inside {where}, "
                f"so of positions {show_positions(captured)} only {show_positions(kept) if kept else 'none'} "
                f"are captured: {outcome}",
                fix,
            )
        ]
    if shows("tbo_skips_capture", version) and layer == "Qwen3MoeDecoderLayer":
        return [
            EngineProblem(
                "capture-tbo",
                True,
                f"sglang {version}: a batch split for two-batch overlap runs every layer without capturing, and the "
                f"forward then fails to unpack the aux hidden states (start-up, at CUDA-graph capture)",
                fix,
            )
        ]
    return []


def _pipeline(launch: Launch) -> list[EngineProblem]:
    stages = launch.number("pp_size", 1)
    if stages <= 1 or not shows("pp_refuses_speculative", launch.version):
        return []
    version = launch.version
    if _since(version, "0.5.21") and launch.algorithm in ("EAGLE", "NEXTN"):
        return []
    return [
        EngineProblem(
            "pp-speculative",
            True,
            f"sglang {version} refuses pipeline parallelism (pp-size {stages}) with {launch.algorithm} speculative "
            "decoding: an assertion stops the server at start-up, before any weights load",
            "remove pp-size from engine.args and raise parallel.tp (or nnodes) instead",
        )
    ]
