"""The loaded engine behind the HTTP server: checkpoints, capture positions under the emulated
sglang version, the KV cache rows for `--max-running-requests`, tokenizer, and sglang-style start-up
log lines (specctl's progress display reads them)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specctl.engines.capture_frame import layers_of
from specctl.engines.reference import tokenizer
from specctl.engines.reference.roofline import ENV as ROOFLINE_ENV
from specctl.engines.reference.roofline import Roofline
from specctl.engines.reference.speculate import (
    TARGET_ARCHITECTURE,
    FinishedRequest,
    SpeculativeDecoder,
    resolve_capture,
)
from specctl.engines.sglang import capture as capture_table
from specctl.engines.sglang import serving


def finish_reason(g: FinishedRequest) -> dict[str, Any]:
    """sglang's finish_reason shape."""
    if g.finish_reason == "stop":
        return {"type": "stop", "matched": g.output_ids[-1] if g.output_ids else None}
    return {"type": "length", "length": g.completion_tokens}


class Runtime:
    def __init__(
        self, engine: SpeculativeDecoder, target_dir: str, version: str, drafter_ids: list[int] | None
    ) -> None:
        self.engine = engine
        self.target_dir = target_dir
        self.version = version
        self.drafter_ids = drafter_ids
        self.config = json.loads((Path(target_dir) / "config.json").read_text())

    def encode(self, text: str) -> list[int]:
        return tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return tokenizer.decode(ids)

    def chat_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        return tokenizer.apply_chat_template(messages)

    def describe(self) -> dict[str, Any]:
        positions = list(self.engine.capture_positions)
        return {
            "emulated_sglang_version": self.version,
            "drafter_ids": self.drafter_ids,
            "capture_positions": positions,
            "capture_layers": layers_of(positions),
            "num_draft_tokens": self.engine.num_draft_tokens,
        }

    def model_facts(self) -> dict[str, Any]:
        return {"model_type": self.config.get("model_type"), "architectures": self.config.get("architectures")}


def model_directory(model: str, revision: str | None) -> str:
    """A directory as it is; a Hugging Face repo id through the HF cache at its revision, as sglang
    resolves one (with HF_HUB_OFFLINE=1, the staged snapshot or an error, never a download)."""
    if Path(model).is_dir() or model.startswith("/"):
        return model
    from huggingface_hub import snapshot_download

    return str(snapshot_download(model, revision=revision))


def adaptive_tiers(args: argparse.Namespace, resolved: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tiers adaptive speculation runs with: the config file's, else the emulated release's
    built-in ones (None: adaptive is off). A release without tiers reads one set for every batch size."""
    if not resolved.get("speculative_adaptive"):
        return None
    from specctl.engines import get_engine

    sglang = get_engine("sglang")
    built_in = sglang.adaptive_tiers(args.emulate_sglang_version)
    if built_in is None:
        return None
    if not args.speculative_adaptive_config:
        return built_in
    config = json.loads(Path(args.speculative_adaptive_config).read_text())
    if not isinstance(config, dict):
        raise ValueError("speculative_adaptive_config must be a JSON object")
    if not sglang.adaptive_by_batch_size(args.emulate_sglang_version):  # before tiers: the file holds the knobs
        return {"1": {**built_in["1"], **config}}
    tiered = {k: v for k, v in config.items() if str(k).isdigit()}
    if not tiered:
        raise ValueError("speculative_adaptive_config must contain at least one integer-string BS key")
    return tiered


def replayed_positions(
    args: argparse.Namespace, ids: Sequence[int] | None, positions: Sequence[int], num_layers: int
) -> list[int] | None:
    """The positions the emulated release's CUDA graphs capture, where they differ from the drafter's (None)."""
    if (
        ids is None
        or args.disable_cuda_graph
        or not serving.shows("graph_default_before_ids", args.emulate_sglang_version)
    ):
        return None
    rule = capture_table.load_table().rule_for(args.emulate_sglang_version, TARGET_ARCHITECTURE)
    default = sorted(set(capture_table.default_positions(rule, num_layers))) if rule is not None else []
    return default if default and default != sorted(positions) else None


def graph_max_bs(args: argparse.Namespace, resolved: Mapping[str, Any]) -> int:
    """The largest batch a graph covers: sglang caps its graph sizes at the running-request limit."""
    limit = int(resolved["max_running_requests"])
    return min(args.cuda_graph_max_bs, limit) if args.cuda_graph_max_bs else limit


def load(args: argparse.Namespace, resolved: Mapping[str, Any], log: Callable[[str], None]) -> Runtime:
    """Load the checkpoints as sglang would for these flags, then warm up (a width mismatch fails here)."""
    log("Load weight begin. device=cpu")
    args.model_path = model_directory(args.model_path, args.revision)
    drafter = args.speculative_draft_model_path if resolved["speculative_algorithm"] else None
    if drafter:
        drafter = model_directory(drafter, args.speculative_draft_model_revision)
    positions: Sequence[int] | None = None
    ids = None
    if drafter:
        num_layers = json.loads((Path(args.model_path) / "config.json").read_text())["num_hidden_layers"]
        outcome = resolve_capture(drafter, num_layers, args.emulate_sglang_version)
        if outcome.error:
            raise RuntimeError(f"capture setup failed as sglang {args.emulate_sglang_version} would: {outcome.error}")
        for position, reason in outcome.dropped:
            log(f"capture position {position} is not captured: {reason}")
        positions, ids = outcome.captured, (list(outcome.ids) if outcome.ids is not None else None)
        log(
            f"EAGLE3 aux hidden state capture positions {list(positions)} "
            f"(ids {ids}, sglang {args.emulate_sglang_version} convention)"
        )
    graph = replayed_positions(args, ids, positions, num_layers) if drafter and positions is not None else None
    if graph is not None:
        log(
            f"CUDA graphs captured with capture positions {graph}: sglang {args.emulate_sglang_version} applies the "
            f"drafter's ids after capturing them, so verify steps of up to {graph_max_bs(args, resolved)} requests "
            "replay the default layers (--disable-cuda-graph avoids it)"
        )
    tiers = adaptive_tiers(args, resolved) if drafter else None
    if tiers is not None:
        log(f"AdaptiveSpeculativeParams initialized: tiers {tiers} (sglang {args.emulate_sglang_version})")
    roofline = Roofline.parse(os.environ[ROOFLINE_ENV]) if os.environ.get(ROOFLINE_ENV) else None
    if roofline is not None:
        log(
            f"{ROOFLINE_ENV}: a target forward takes at least {roofline.floor_s * 1000:g} ms, "
            f"+{roofline.token_s * 1000:g} ms per token past {roofline.knee_tokens}"
        )
    engine = SpeculativeDecoder(
        args.model_path,
        drafter,
        num_steps=resolved["speculative_num_steps"] or 3,
        topk=resolved["speculative_eagle_topk"] or 1,
        num_draft_tokens=resolved["speculative_num_draft_tokens"],
        capture_positions=positions,
        max_running_requests=resolved["max_running_requests"],
        adaptive=tiers,
        roofline=roofline,
        graph_positions=graph,
        graph_max_bs=graph_max_bs(args, resolved),
    )
    log("Load weight end. type=LlamaForCausalLM, dtype=float64, device=cpu")
    log("Capture cuda graph begin. (reference engine: a warmup generation instead)")
    engine.warmup()
    log(f"Capture cuda graph end. Time elapsed: 0.0 s (max_running_requests={engine.max_running_requests})")
    return Runtime(engine, args.model_path, args.emulate_sglang_version, ids)
