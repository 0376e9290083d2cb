"""The shipped checkpoints are standard HF/SpecForge files, small, and agree with their manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors import safe_open

from specctl.engines.reference.model import load_drafter, load_target
from specctl.engines.reference.tokenizer import apply_chat_template, decode, encode
from specctl.engines.sglang import capture as capture_table
from specctl.errors import CheckpointError
from specctl.profile.document import load_document
from specctl.profile.manifest import DrafterManifest

ROOT = Path(__file__).resolve().parents[3]
TARGET = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama"
DRAFTER = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama-eagle3"
MANIFEST = ROOT / "specctl" / "engines" / "reference" / "models" / "tiny-llama-eagle3.manifest.yaml"
MAX_BYTES = 3 * 1024 * 1024


def shapes(directory: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(directory / "model.safetensors"), framework="pt") as handle:
        return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}


def test_target_is_a_standard_llama_checkpoint() -> None:
    config = json.loads((TARGET / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is False
    h, i, v, n = config["hidden_size"], config["intermediate_size"], config["vocab_size"], config["num_hidden_layers"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    for key in ("num_attention_heads", "rms_norm_eps", "rope_theta", "max_position_embeddings", "torch_dtype"):
        assert key in config
    expected = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for layer in range(n):
        p = f"model.layers.{layer}."
        expected |= {
            p + "self_attn.q_proj.weight": (h, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        }
    assert shapes(TARGET) == expected
    assert (TARGET / "model.safetensors").stat().st_size < MAX_BYTES


def test_drafter_is_a_specforge_eagle3_checkpoint() -> None:
    config = json.loads((DRAFTER / "config.json").read_text())
    target = json.loads((TARGET / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["num_hidden_layers"] == 1
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [1, 3, 4], "use_aux_hidden_state": True}
    h, i, d, ht = (
        config["hidden_size"],
        config["intermediate_size"],
        config["draft_vocab_size"],
        config["target_hidden_size"],
    )
    assert ht == target["hidden_size"] and config["vocab_size"] == target["vocab_size"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]
    m = "midlayer."
    assert shapes(DRAFTER) == {
        "fc.weight": (h, 3 * ht),
        m + "self_attn.q_proj.weight": (h, 2 * h),
        m + "self_attn.k_proj.weight": (kv, 2 * h),
        m + "self_attn.v_proj.weight": (kv, 2 * h),
        m + "self_attn.o_proj.weight": (h, h),
        m + "mlp.gate_proj.weight": (i, h),
        m + "mlp.up_proj.weight": (i, h),
        m + "mlp.down_proj.weight": (h, i),
        m + "input_layernorm.weight": (h,),
        m + "hidden_norm.weight": (h,),
        m + "post_attention_layernorm.weight": (h,),
        "norm.weight": (h,),
        "lm_head.weight": (d, h),
        "d2t": (d,),
        "t2d": (config["vocab_size"],),
    }
    assert (DRAFTER / "model.safetensors").stat().st_size < MAX_BYTES
    drafter = load_drafter(DRAFTER)
    hot = drafter.to_target_ids(torch.arange(d))
    assert hot.tolist() == sorted(set(hot.tolist())) and drafter.t2d[hot].all() and int(drafter.t2d.sum()) == d


def test_manifest_names_the_layers_the_config_ids_capture() -> None:
    manifest = load_document(MANIFEST, DrafterManifest, "DrafterManifest").model
    ids = json.loads((DRAFTER / "config.json").read_text())["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    rule = capture_table.load_table().rule_for("0.5.23", "LlamaForCausalLM")
    assert rule is not None
    captured = capture_table.capture(rule, ids, manifest.target.num_hidden_layers).captured
    assert [p - 1 for p in captured] == manifest.capture.layers
    assert (
        manifest.drafter.model == "specctl-reference/tiny-llama-eagle3"
        and manifest.target.model == "specctl-reference/tiny-llama"
    )


def test_loading_names_the_file_and_tensor(tmp_path: Path) -> None:
    broken = tmp_path / "target"
    shutil.copytree(TARGET, broken)
    config = json.loads((broken / "config.json").read_text())
    config["intermediate_size"] += 1
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        CheckpointError, match=r"model\.safetensors: tensor 'model\.layers\.0\.mlp\.gate_proj\.weight' has shape"
    ):
        load_target(broken)
    (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json"):
        load_target(broken)


def test_loading_needs_draft_vocab_size_like_sglang(tmp_path: Path) -> None:
    broken = tmp_path / "drafter"
    shutil.copytree(DRAFTER, broken)
    config = json.loads((broken / "config.json").read_text())
    del config["draft_vocab_size"]
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="draft_vocab_size"):
        load_drafter(broken)


def test_tokenizer_round_trips_and_templates_chat() -> None:
    text = "Count from 3 to 5. Ünïcode ✓"
    assert decode(encode(text)) == text and encode(text)[0] == 256
    prompt = apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert prompt == "System: Be brief.\nUser: Hi\nAssistant: "
    with pytest.raises(ValueError, match="tool"):
        apply_chat_template([{"role": "tool", "content": "x"}])
