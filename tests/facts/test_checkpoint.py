"""Checkpoint metadata from real directories and a real (offline) Hugging Face cache layout."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from examples.hub import eagle3_tensors, llama_tensors, write_checkpoint, write_shard
from specctl.errors import CheckpointError
from specctl.facts.checkpoint import read_checkpoint, read_header
from tests.factory import DRAFTER_CONFIG, TARGET_CONFIG


def test_target_facts_and_bytes_by_dtype(tmp_path: Path) -> None:
    meta = read_checkpoint(str(write_checkpoint(tmp_path / "t", TARGET_CONFIG, llama_tensors(TARGET_CONFIG), shards=3)))
    assert (meta.architecture, meta.num_hidden_layers, meta.hidden_size) == ("LlamaForCausalLM", 32, 256)
    assert (meta.num_attention_heads, meta.num_key_value_heads, meta.vocab_size, meta.tie_word_embeddings) == (
        8,
        4,
        1000,
        False,
    )
    expected = sum(2 * __import__("math").prod(shape) for _, _, shape in llama_tensors(TARGET_CONFIG))
    assert meta.weight_bytes_by_dtype == {"BF16": expected}
    assert "model.safetensors.index.json" in meta.files and "model-00003-of-00003.safetensors" in meta.files


def test_drafter_facts(tmp_path: Path) -> None:
    config = {**DRAFTER_CONFIG, "eagle_aux_hidden_state_layer_ids": [2, 16, 29], "target_hidden_size": 256}
    meta = read_checkpoint(str(write_checkpoint(tmp_path / "d", config, eagle3_tensors(config, 256))))
    assert meta.eagle_config == {"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": True}
    assert meta.top_level_eagle_keys == {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]}
    assert (meta.target_hidden_size, meta.draft_vocab_size, meta.fc_weight_shape, meta.d2t_length) == (
        256,
        200,
        (256, 768),
        200,
    )
    assert set(meta.weight_bytes_by_dtype) == {"BF16", "I64", "BOOL"}
    assert meta.summary()["fc_weight_shape"] == [256, 768]


def test_text_config_of_multimodal_wrappers(tmp_path: Path) -> None:
    config = {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "text_config": {**TARGET_CONFIG, "num_hidden_layers": 61},
    }
    meta = read_checkpoint(str(write_checkpoint(tmp_path / "k", config, [("x", "BF16", (4,))])))
    assert (
        meta.architecture == "KimiK25ForConditionalGeneration"
        and meta.num_hidden_layers == 61
        and meta.hidden_size == 256
    )


def test_a_terabyte_of_sparse_shards_reads_only_headers(tmp_path: Path) -> None:
    tensors = [(f"w{i}", "BF16", (1 << 15, 1 << 14)) for i in range(512)]  # 512 GiB of BF16
    path = write_checkpoint(tmp_path / "big", TARGET_CONFIG, tensors, shards=64)
    meta = read_checkpoint(str(path))
    assert meta.weight_bytes == 512 * (1 << 30)
    assert sum(f.stat().st_blocks for f in path.iterdir()) * 512 < 10 * 1024 * 1024  # really sparse on disk


def test_missing_shard_is_named(tmp_path: Path) -> None:
    path = write_checkpoint(tmp_path / "t", TARGET_CONFIG, llama_tensors(TARGET_CONFIG), shards=2)
    (path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors"):
        read_checkpoint(str(path))


def test_truncated_or_garbage_headers(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    write_shard(good, [("a", "F32", (2, 2))])
    assert read_header(good)["a"].nbytes == 16
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(good.read_bytes()[:20])
    with pytest.raises(CheckpointError, match="truncated"):
        read_header(bad)
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(CheckpointError):
        read_header(huge)


def test_missing_directory_and_config(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="config.json not found"):
        read_checkpoint(str(tmp_path / "empty"))
    (tmp_path / "empty" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot parse"):
        read_checkpoint(str(tmp_path / "empty"))


def test_hub_repo_offline_from_cache(hub_env: Path) -> None:
    models = {
        m["repo"]: m for m in json.loads((Path(__file__).parents[2] / "examples" / "models.json").read_text())["models"]
    }
    kimi = models["moonshotai/Kimi-K2.5"]
    meta = read_checkpoint("moonshotai/Kimi-K2.5", kimi["revision"], offline=True)
    assert meta.num_hidden_layers == 61 and meta.hidden_size == 7168
    assert 500e9 < meta.weight_bytes < 700e9 and set(meta.weight_bytes_by_dtype) == {"BF16", "I32"}
    drafter = models["AQ-MedAI/Kimi-K25-eagle3"]
    d = read_checkpoint(drafter["repo"], drafter["revision"], offline=True)
    assert d.fc_weight_shape == (7168, 21504) and d.d2t_length == 32000


def test_hub_repo_not_cached_offline(hub_env: Path) -> None:
    with pytest.raises(CheckpointError) as info:
        read_checkpoint("org/absent", "a" * 40, offline=True)
    assert "hf download org/absent" in (info.value.fix or "")


def test_a_fifo_where_config_json_should_be_is_an_error_not_a_hang(tmp_path: Path) -> None:
    import os

    from specctl.errors import CheckpointError
    from specctl.facts.checkpoint import read_checkpoint

    os.mkfifo(tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="FIFO|fifo|pipe"):
        read_checkpoint(str(tmp_path), None, offline=True)
