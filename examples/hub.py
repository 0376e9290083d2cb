"""Build checkpoint directories whose metadata is real and whose weights are holes.

A checkpoint here is config.json plus safetensors shards with genuine headers; the data region
of each shard is a sparse hole (truncate), so a 1 TB checkpoint costs a few kilobytes of disk.
`make demo` and the tests use it to lay out the example models as a Hugging Face cache.

    python examples/hub.py DIR   # write every model of examples/models.json into DIR (HF cache layout)
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}

TensorSpec = tuple[str, str, Sequence[int]]


def write_shard(path: Path, tensors: Sequence[TensorSpec]) -> int:
    """One safetensors file with a real header and a sparse data region; returns the data size."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, dtype, shape in tensors:
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        handle.truncate(8 + len(raw) + offset)
    return offset


def write_checkpoint(directory: Path, config: dict[str, Any], tensors: Sequence[TensorSpec], shards: int = 1,
                     extra_files: dict[str, str] | None = None) -> Path:
    """config.json plus `shards` safetensors files (and an index when more than one)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name, text in (extra_files or {}).items():
        (directory / name).write_text(text)
    if shards == 1:
        write_shard(directory / "model.safetensors", tensors)
        return directory
    per = math.ceil(len(tensors) / shards)
    weight_map: dict[str, str] = {}
    total = 0
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = tensors[i * per:(i + 1) * per]
        total += write_shard(directory / name, part)
        weight_map |= {t[0]: name for t in part}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return directory


def hub_snapshot(cache: Path, repo: str, revision: str) -> Path:
    """The snapshot directory of `repo` at `revision` in a Hugging Face cache (HF_HUB_CACHE layout)."""
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(revision)
    return root / "snapshots" / revision


def llama_tensors(cfg: dict[str, Any], dtype: str = "BF16") -> list[TensorSpec]:
    """A Llama/Qwen-style decoder's tensor layout from its config."""
    h, n, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    out: list[TensorSpec] = [("model.embed_tokens.weight", dtype, (v, h))]
    for i in range(n):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", dtype, (heads * head_dim, h)), (p + "self_attn.k_proj.weight", dtype, (kv * head_dim, h)),
                (p + "self_attn.v_proj.weight", dtype, (kv * head_dim, h)), (p + "self_attn.o_proj.weight", dtype, (h, heads * head_dim)),
                (p + "mlp.gate_proj.weight", dtype, (inter, h)), (p + "mlp.up_proj.weight", dtype, (inter, h)),
                (p + "mlp.down_proj.weight", dtype, (h, inter)), (p + "input_layernorm.weight", dtype, (h,)),
                (p + "post_attention_layernorm.weight", dtype, (h,))]
    out += [("model.norm.weight", dtype, (h,))]
    if not cfg.get("tie_word_embeddings"):
        out += [("lm_head.weight", dtype, (v, h))]
    return out


def moe_tensors(cfg: dict[str, Any]) -> list[TensorSpec]:
    """A DeepSeek-V3/Kimi-style MoE layout: BF16 attention and dense layers, int4-packed (I32) experts."""
    h, n, v = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    experts, moe_inter, dense = cfg["n_routed_experts"], cfg["moe_intermediate_size"], cfg.get("first_k_dense_replace", 1)
    heads, q_rank, kv_rank = cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    out: list[TensorSpec] = [("language_model.model.embed_tokens.weight", "BF16", (v, h))]
    for i in range(n):
        p = f"language_model.model.layers.{i}."
        out += [(p + "self_attn.q_a_proj.weight", "BF16", (q_rank, h)), (p + "self_attn.q_b_proj.weight", "BF16", (heads * qk, q_rank)),
                (p + "self_attn.kv_a_proj_with_mqa.weight", "BF16", (kv_rank + cfg["qk_rope_head_dim"], h)),
                (p + "self_attn.kv_b_proj.weight", "BF16", (heads * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), kv_rank)),
                (p + "self_attn.o_proj.weight", "BF16", (h, heads * cfg["v_head_dim"]))]
        if i < dense:
            out += [(p + f"mlp.{m}.weight", "BF16", (cfg["intermediate_size"], h)) for m in ("gate_proj", "up_proj")]
            out += [(p + "mlp.down_proj.weight", "BF16", (h, cfg["intermediate_size"]))]
        else:  # 4-bit weights packed 8 per int32, one BF16 scale per 32 weights
            for m, (rows, cols) in {"w13": (2 * moe_inter, h), "w2": (h, moe_inter)}.items():
                out += [(p + f"mlp.experts.{m}_weight_packed", "I32", (experts, rows, cols // 8)),
                        (p + f"mlp.experts.{m}_weight_scale", "BF16", (experts, rows, cols // 32))]
            out += [(p + f"mlp.shared_experts.{m}.weight", "BF16", (moe_inter, h)) for m in ("gate_proj", "up_proj")]
            out += [(p + "mlp.shared_experts.down_proj.weight", "BF16", (h, moe_inter)), (p + "mlp.gate.weight", "BF16", (experts, h))]
    return out + [("language_model.model.norm.weight", "BF16", (h,)), ("language_model.lm_head.weight", "BF16", (v, h))]


def eagle3_tensors(cfg: dict[str, Any], target_hidden: int, captures: int = 3) -> list[TensorSpec]:
    """An EAGLE-3 drafter (LlamaForCausalLMEagle3) in SpecForge's export names."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    dv = cfg.get("draft_vocab_size") or v
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or h // heads
    inter = cfg["intermediate_size"]
    return [
        ("fc.weight", "BF16", (h, captures * target_hidden)),
        ("midlayer.self_attn.q_proj.weight", "BF16", (heads * head_dim, 2 * h)),
        ("midlayer.self_attn.k_proj.weight", "BF16", (kv * head_dim, 2 * h)),
        ("midlayer.self_attn.v_proj.weight", "BF16", (kv * head_dim, 2 * h)),
        ("midlayer.self_attn.o_proj.weight", "BF16", (h, heads * head_dim)),
        ("midlayer.mlp.gate_proj.weight", "BF16", (inter, h)), ("midlayer.mlp.up_proj.weight", "BF16", (inter, h)),
        ("midlayer.mlp.down_proj.weight", "BF16", (h, inter)), ("midlayer.input_layernorm.weight", "BF16", (h,)),
        ("midlayer.hidden_norm.weight", "BF16", (h,)), ("midlayer.post_attention_layernorm.weight", "BF16", (h,)),
        ("norm.weight", "BF16", (h,)), ("lm_head.weight", "BF16", (dv, h)), ("d2t", "I64", (dv,)), ("t2d", "BOOL", (v,)),
    ]


LAYOUTS = {"llama": lambda m: llama_tensors(m["config"]), "moe": lambda m: moe_tensors(m["config"].get("text_config", m["config"])),
           "eagle3": lambda m: eagle3_tensors(m["config"], m["target_hidden_size"], m.get("captures", 3))}


def build_models(cache: Path, models: Iterable[dict[str, Any]]) -> list[Path]:
    """Lay out every model spec as a snapshot in a Hugging Face cache."""
    made = []
    for model in models:
        snapshot = hub_snapshot(cache, model["repo"], model["revision"])
        if (snapshot / "config.json").exists():
            made.append(snapshot)
            continue
        made.append(write_checkpoint(snapshot, model["config"], LAYOUTS[model["layout"]](model), model.get("shards", 1)))
    return made


def main(argv: list[str]) -> int:
    cache = Path(argv[1] if len(argv) > 1 else ".cache/hub")
    models = json.loads((Path(__file__).parent / "models.json").read_text())["models"]
    for path in build_models(cache, models):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
