"""Builders for test inputs: real checkpoint directories (sparse weights), profiles and manifests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from examples.hub import eagle3_tensors, llama_tensors, write_checkpoint

TARGET_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 32,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
}
DRAFTER_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 1,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": 1000,
    "draft_vocab_size": 200,
    "tie_word_embeddings": False,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 15, 28], "use_aux_hidden_state": True},
}


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is DELETE:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


DELETE: Any = object()


class Scenario:
    """A working profile + manifest + target + drafter in a directory; tests change one thing each."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.target_config = copy.deepcopy(TARGET_CONFIG)
        self.drafter_config = copy.deepcopy(DRAFTER_CONFIG)
        self.captures = 3
        self.target_shards = 2
        self.drafter_tensors: list[Any] | None = None
        self.engine_python: str | None = None  # probe this interpreter's engine in check
        self.manifest: dict[str, Any] = {
            "apiVersion": "specctl/v1",
            "kind": "DrafterManifest",
            "metadata": {"name": "tiny-eagle3"},
            "drafter": {"model": str(root / "drafter")},
            "target": {
                "model": str(root / "target"),
                "architecture": "LlamaForCausalLM",
                "num_hidden_layers": 32,
                "hidden_size": 256,
                "vocab_size": 1000,
            },
            "capture": {"layers": [1, 15, 28], "width": 768},
        }
        self.profile: dict[str, Any] = {
            "apiVersion": "specctl/v1",
            "kind": "Profile",
            "metadata": {"name": "tiny", "version": 1},
            "target": {"model": str(root / "target")},
            "drafter": {"model": str(root / "drafter"), "manifest": "manifest.yaml"},
            "speculative": {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
            "parallel": {"tp": 1},
            "hardware": {"gpu": "h100", "gpus_per_node": 8},
            "engine": {"name": "sglang", "version": "0.5.23", "port": 30000},
        }

    def write(self) -> Path:
        write_checkpoint(
            self.root / "target", self.target_config, llama_tensors(self.target_config), self.target_shards
        )
        tensors = (
            self.drafter_tensors
            if self.drafter_tensors is not None
            else eagle3_tensors(self.drafter_config, self.target_config["hidden_size"], self.captures)
        )
        write_checkpoint(self.root / "drafter", self.drafter_config, tensors)
        (self.root / "manifest.yaml").write_text(yaml.safe_dump(self.manifest, sort_keys=False))
        path = self.root / "profile.yaml"
        path.write_text(yaml.safe_dump(self.profile, sort_keys=False))
        return path
