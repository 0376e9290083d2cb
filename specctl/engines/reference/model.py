"""The reference engine's models: a Llama-style target and an EAGLE-3 drafter, in torch.

Both read and write standard Hugging Face checkpoints (`config.json` + safetensors) with the tensor
names that transformers/sglang (target) and SpecForge (drafter) use, so the shipped files are the
same kind of thing specctl deploys on a GPU host. Weights are stored in bfloat16/float32 to keep the
repository small, but the engine computes in float64: greedy decoding is then exact enough that
speculative and plain decoding agree token for token although they batch the work differently.

Both take a batch of sequences at different lengths: a `KVCache` row per sequence with its own
length, per-row positions and a mask, so right-padded rows share one forward.

Capture frame: position p is the residual stream entering decoder layer p, so
position 0 is the embedding output and position L + 1 is the output of layer L. `TargetModel.forward`
returns positions 0..N-1, the ones sglang's Llama loop can capture.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from specctl.errors import CheckpointError

__all__ = [
    "COMPUTE_DTYPE",
    "DraftOutput",
    "DrafterConfig",
    "Eagle3Drafter",
    "KVCache",
    "LlamaConfig",
    "Rows",
    "TargetModel",
    "TargetOutput",
    "load_drafter",
    "load_target",
    "save_checkpoint",
]

COMPUTE_DTYPE = torch.float64
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


# --- configs -----------------------------------------------------------------------------------------


def _field(data: Mapping[str, Any], key: str, kind: type, source: Path) -> Any:
    """`data[key]` checked against `kind`, or a CheckpointError naming the file and the key."""
    value = data.get(key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise CheckpointError(
            f"{source}: key {key!r} must be {kind.__name__}, found {value!r}",
            source=str(source),
            fix=f"set {key!r} in {source.name}",
        )
    return value


@dataclass(frozen=True)
class LlamaConfig:
    """The fields of a transformers `LlamaConfig` that the target reads."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 1024
    torch_dtype: str = "bfloat16"
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_hf(self) -> dict[str, Any]:
        """The `config.json` of a `LlamaForCausalLM` checkpoint."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "attention_bias": False,
            "mlp_bias": False,
            "tie_word_embeddings": False,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": self.torch_dtype,
        }

    @classmethod
    def from_hf(cls, data: Mapping[str, Any], source: Path) -> LlamaConfig:
        architectures = data.get("architectures") or []
        if "LlamaForCausalLM" not in architectures:
            raise CheckpointError(
                f"{source}: architectures is {architectures!r}, the reference target is LlamaForCausalLM",
                source=str(source),
                fix="point the target at a LlamaForCausalLM checkpoint",
            )
        if data.get("tie_word_embeddings"):
            raise CheckpointError(
                f"{source}: tie_word_embeddings is true; the reference target needs its own lm_head", source=str(source)
            )
        config = cls(
            hidden_size=_field(data, "hidden_size", int, source),
            intermediate_size=_field(data, "intermediate_size", int, source),
            num_hidden_layers=_field(data, "num_hidden_layers", int, source),
            num_attention_heads=_field(data, "num_attention_heads", int, source),
            num_key_value_heads=int(data.get("num_key_value_heads") or data.get("num_attention_heads") or 0),
            vocab_size=_field(data, "vocab_size", int, source),
            rms_norm_eps=_field(data, "rms_norm_eps", float, source),
            rope_theta=float(data.get("rope_theta", 10000.0)),
            max_position_embeddings=int(data.get("max_position_embeddings", 1024)),
            torch_dtype=str(data.get("torch_dtype", "float32")),
            bos_token_id=data.get("bos_token_id"),
            eos_token_id=data.get("eos_token_id"),
        )
        _check_heads(
            config.hidden_size, config.num_attention_heads, config.num_key_value_heads, data.get("head_dim"), source
        )
        return config


@dataclass(frozen=True)
class DrafterConfig:
    """The fields of an EAGLE-3 drafter config that sglang's `LlamaForCausalLMEagle3` reads (reference 3.1)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    num_aux_hidden_states: int
    aux_layer_ids: tuple[int, ...] | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 1024
    torch_dtype: str = "float32"

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_hf(self) -> dict[str, Any]:
        """The `config.json` of a SpecForge-style `LlamaForCausalLMEagle3` checkpoint."""
        eagle_config: dict[str, Any] = {"use_aux_hidden_state": True}
        if self.aux_layer_ids is not None:
            eagle_config["eagle_aux_hidden_state_layer_ids"] = list(self.aux_layer_ids)
        return {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": 1,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings,
            "attention_bias": False,
            "tie_word_embeddings": False,
            "eagle_config": eagle_config,
            "torch_dtype": self.torch_dtype,
        }

    @classmethod
    def from_hf(cls, data: Mapping[str, Any], source: Path) -> DrafterConfig:
        architectures = data.get("architectures") or []
        if "LlamaForCausalLMEagle3" not in architectures:
            raise CheckpointError(
                f"{source}: architectures is {architectures!r}, the reference drafter is LlamaForCausalLMEagle3",
                source=str(source),
                fix="point the drafter at an EAGLE-3 checkpoint",
            )
        if data.get("num_hidden_layers", 1) != 1:
            raise CheckpointError(
                f"{source}: num_hidden_layers is {data.get('num_hidden_layers')}; the reference drafter has one layer",
                source=str(source),
            )
        if "draft_vocab_size" not in data:
            # sglang reads config.draft_vocab_size directly and fails the same way (reference 3.1)
            raise CheckpointError(
                f"{source}: key 'draft_vocab_size' is missing",
                source=str(source),
                fix="add draft_vocab_size (the lm_head rows) to the drafter config",
            )
        eagle_config = data.get("eagle_config") or {}
        ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
        hidden = _field(data, "hidden_size", int, source)
        vocab = _field(data, "vocab_size", int, source)
        # the count of aux states follows llama_eagle3.py L157-161: explicit key, else len(ids), else 3
        count = data.get("num_aux_hidden_states") or (len(ids) if ids is not None else 3)
        config = cls(
            hidden_size=hidden,
            intermediate_size=_field(data, "intermediate_size", int, source),
            num_attention_heads=_field(data, "num_attention_heads", int, source),
            num_key_value_heads=int(data.get("num_key_value_heads") or data.get("num_attention_heads") or 0),
            vocab_size=vocab,
            draft_vocab_size=int(data["draft_vocab_size"] or vocab),
            target_hidden_size=int(data.get("target_hidden_size") or hidden),
            num_aux_hidden_states=int(count),
            aux_layer_ids=None if ids is None else tuple(int(i) for i in ids),
            rms_norm_eps=_field(data, "rms_norm_eps", float, source),
            rope_theta=float(data.get("rope_theta", 10000.0)),
            max_position_embeddings=int(data.get("max_position_embeddings", 1024)),
            torch_dtype=str(data.get("torch_dtype", "float32")),
        )
        _check_heads(
            config.hidden_size, config.num_attention_heads, config.num_key_value_heads, data.get("head_dim"), source
        )
        return config


def _check_heads(hidden: int, heads: int, kv_heads: int, head_dim: Any, source: Path) -> None:
    if heads <= 0 or kv_heads <= 0 or hidden % heads or heads % kv_heads:
        raise CheckpointError(
            f"{source}: hidden_size {hidden}, num_attention_heads {heads} and num_key_value_heads "
            f"{kv_heads} do not divide",
            source=str(source),
        )
    if head_dim is not None and head_dim != hidden // heads:
        raise CheckpointError(f"{source}: head_dim {head_dim} != hidden_size / num_attention_heads", source=str(source))


# --- building blocks ---------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Rotary(nn.Module):
    """RoPE tables (HF `rotate_half` layout), computed in float64 and cast with the module."""

    def __init__(self, head_dim: int, theta: float, max_positions: int) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.cos: Tensor
        self.sin: Tensor
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin at `positions` ([tokens] -> [tokens, head_dim]; [batch, tokens] -> [batch, 1, tokens,
        head_dim], broadcasting over the heads of [batch, heads, tokens, head_dim])."""
        if int(positions.max()) >= self.cos.shape[0]:
            raise RuntimeError(f"position {int(positions.max())} is beyond max_position_embeddings {self.cos.shape[0]}")
        cos, sin = self.cos[positions], self.sin[positions]
        if positions.dim() == 2:
            return cos.unsqueeze(1), sin.unsqueeze(1)
        return cos, sin


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Grouped-query attention with RoPE; `in_features` is 2 x hidden in the drafter's input layer."""

    def __init__(self, in_features: int, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(in_features, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(in_features, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(in_features, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def project(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Rotated queries and keys and values, [batch, heads, tokens, head_dim]."""
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool = False) -> Tensor:
        """Attention output projected back to hidden; `mask` is boolean (True = may attend)."""
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=True)
        b, _, t, _ = out.shape
        projected: Tensor = self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))
        return projected


class MLP(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class KVCache:
    """Keys and values of up to `slots` sequences, each with its own committed length.

    A forward writes its new tokens after each row's committed length and commits them all; the
    caller then `truncate`s each row to what it keeps (rejected drafts, right padding), so one
    batched forward serves sequences of different lengths.
    """

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        max_tokens: int,
        dtype: torch.dtype,
        slots: int = 1,
        device: torch.device | None = None,
    ) -> None:
        self.keys = torch.zeros(layers, slots, kv_heads, max_tokens, head_dim, dtype=dtype, device=device)
        self.values = torch.zeros_like(self.keys)
        self.lengths = [0] * slots

    @property
    def capacity(self) -> int:
        return self.keys.shape[3]

    @property
    def slots(self) -> int:
        return self.keys.shape[1]

    def rows(self, slots: Sequence[int], new: int) -> Rows:
        """Where `new` tokens of each of `slots` go: positions, the attention mask and the key span."""
        starts = [self.lengths[s] for s in slots]
        span = max(starts) + new
        if span > self.capacity:
            raise RuntimeError(f"KV cache full: {span} tokens > capacity {self.capacity}")
        device = self.keys.device
        positions = torch.tensor(starts, device=device).unsqueeze(1) + torch.arange(new, device=device)
        # key j is visible to the query at position p of the same row iff j <= p (its own past and itself)
        mask = (torch.arange(span, device=device) <= positions.unsqueeze(-1)).unsqueeze(1)
        index = torch.tensor(list(slots), device=device)
        first = slots[0]
        contiguous = list(slots) == list(range(first, first + len(slots)))
        return Rows(index, positions, mask, span, slice(first, first + len(slots)) if contiguous else None)

    def update(self, layer: int, rows: Rows, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new tokens' keys/values after each row's committed ones; all of them, for attention."""
        grid = rows.slots.unsqueeze(1).expand_as(rows.positions)
        # [batch, tokens] index pairs: the kv-head dim (a slice between them) moves behind them
        self.keys[layer][grid, :, rows.positions] = k.transpose(1, 2)
        self.values[layer][grid, :, rows.positions] = v.transpose(1, 2)
        if rows.contiguous is not None:  # a view, no copy
            return self.keys[layer, rows.contiguous, :, : rows.span], self.values[
                layer, rows.contiguous, :, : rows.span
            ]
        return self.keys[layer][rows.slots, :, : rows.span], self.values[layer][rows.slots, :, : rows.span]

    def commit(self, slots: Sequence[int], tokens: int) -> None:
        for s in slots:
            self.lengths[s] += tokens

    def truncate(self, slot: int, length: int) -> None:
        if not 0 <= length <= self.lengths[slot]:
            raise ValueError(f"cannot truncate a cache row of {self.lengths[slot]} tokens to {length}")
        self.lengths[slot] = length


class Rows(NamedTuple):
    """One forward's place in a KVCache: cache rows, per-token positions [batch, tokens], the boolean
    mask [batch, 1, tokens, span] (True = may attend) and the key span to attend over."""

    slots: Tensor
    positions: Tensor
    mask: Tensor
    span: int
    contiguous: slice | None


def _placement(
    cache: KVCache | None, slots: Sequence[int] | None, batch: int, new: int, device: torch.device
) -> tuple[Rows | None, Tensor, Tensor | None, bool]:
    """(cache rows, positions, mask, is_causal) for `new` tokens of `batch` rows; without a cache, a
    plain causal pass from position 0 (training)."""
    if cache is None:
        return None, torch.arange(new, device=device).unsqueeze(0), None, new > 1
    rows = cache.rows(list(range(batch)) if slots is None else slots, new)
    return rows, rows.positions, rows.mask, False


# --- target ------------------------------------------------------------------------------------------


class DecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.input_layernorm = RMSNorm(h, config.rms_norm_eps)
        self.self_attn = Attention(h, h, config.num_attention_heads, config.num_key_value_heads)
        self.post_attention_layernorm = RMSNorm(h, config.rms_norm_eps)
        self.mlp = MLP(h, config.intermediate_size)


class LlamaBody(nn.Module):
    """`model.*` of a LlamaForCausalLM: embeddings, layers and the final norm."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class TargetOutput(NamedTuple):
    """Logits [batch, tokens, vocab] and the capture positions 0..N-1, each [batch, tokens, hidden]."""

    logits: Tensor
    hidden_states: tuple[Tensor, ...]


class TargetModel(nn.Module):
    """A Llama-style decoder (`LlamaForCausalLM` tensor names) that also returns its residual streams."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaBody(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary = Rotary(config.head_dim, config.rope_theta, config.max_position_embeddings)

    def new_cache(self, max_tokens: int, slots: int = 1) -> KVCache:
        c = self.config
        weight = self.lm_head.weight
        return KVCache(
            c.num_hidden_layers, c.num_key_value_heads, c.head_dim, max_tokens, weight.dtype, slots, weight.device
        )

    def embed(self, input_ids: Tensor) -> Tensor:
        embeds: Tensor = self.model.embed_tokens(input_ids)
        return embeds

    def forward(
        self, input_ids: Tensor, cache: KVCache | None = None, slots: Sequence[int] | None = None
    ) -> TargetOutput:
        """Run `input_ids` [batch, tokens] after the committed tokens of cache rows `slots` (default
        0..batch-1), each row at its own positions, and commit them all (the caller truncates)."""
        batch, new = input_ids.shape
        rows, positions, mask, causal = _placement(cache, slots, batch, new, input_ids.device)
        cos, sin = self.rotary.tables(positions)
        h = self.embed(input_ids)
        captures = []
        for index, layer in enumerate(cast("list[DecoderLayer]", self.model.layers)):
            captures.append(h)  # position `index`: the residual stream entering layer `index`
            q, k, v = layer.self_attn.project(layer.input_layernorm(h), cos, sin)
            if cache is not None and rows is not None:
                k, v = cache.update(index, rows, k, v)
            h = h + layer.self_attn.attend(q, k, v, mask, causal)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        if cache is not None:
            cache.commit(list(range(batch)) if slots is None else slots, new)
        return TargetOutput(self.lm_head(self.model.norm(h)), tuple(captures))


# --- drafter -----------------------------------------------------------------------------------------


class Eagle3Layer(nn.Module):
    """The drafter's one decoder layer (`midlayer`): attention over [embeds ; hidden], 2 x hidden wide."""

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.input_layernorm = RMSNorm(h, config.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, config.rms_norm_eps)
        self.self_attn = Attention(2 * h, h, config.num_attention_heads, config.num_key_value_heads)
        self.post_attention_layernorm = RMSNorm(h, config.rms_norm_eps)
        self.mlp = MLP(h, config.intermediate_size)

    def attention_input(self, embeds: Tensor, hidden: Tensor) -> Tensor:
        return torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)

    def finish(self, hidden: Tensor, attn_out: Tensor) -> Tensor:
        """Residual adds after attention: the residual is the (fc-projected) hidden input."""
        h = hidden + attn_out
        out: Tensor = h + self.mlp(self.post_attention_layernorm(h))
        return out


class DraftOutput(NamedTuple):
    """Draft-vocabulary logits [batch, tokens, draft_vocab] and the pre-norm hidden fed to the next step."""

    logits: Tensor
    hidden: Tensor


class Eagle3Drafter(nn.Module):
    """sglang's `LlamaForCausalLMEagle3` for one layer, with SpecForge's tensor names.

    Token embeddings are the target's (sglang replaces the drafter's with them for EAGLE-3), so
    `forward` takes embeddings. `d2t` maps a draft id to a target id: target = draft + d2t[draft].
    """

    def __init__(self, config: DrafterConfig) -> None:
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.fc = nn.Linear(config.target_hidden_size * config.num_aux_hidden_states, h, bias=False)
        self.midlayer = Eagle3Layer(config)
        self.norm = RMSNorm(h, config.rms_norm_eps)
        self.lm_head = nn.Linear(h, config.draft_vocab_size, bias=False)
        self.d2t: Tensor
        self.t2d: Tensor
        self.register_buffer("d2t", torch.zeros(config.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(config.vocab_size, dtype=torch.bool))
        self.rotary = Rotary(config.head_dim, config.rope_theta, config.max_position_embeddings)

    def new_cache(self, max_tokens: int, slots: int = 1) -> KVCache:
        c = self.config
        weight = self.lm_head.weight
        return KVCache(1, c.num_key_value_heads, c.head_dim, max_tokens, weight.dtype, slots, weight.device)

    def project(self, hidden: Tensor, embed_width: int) -> Tensor:
        """Target features through `fc`; the drafter's own hidden (embedding-wide) passes unchanged.

        Like llama_eagle3.py L237-247, the fc is skipped whenever the width equals the embedding
        width. Other widths that the fc cannot take are sglang's warmup shape error, made readable.
        """
        width = hidden.shape[-1]
        if width == embed_width:
            return hidden
        expected = self.fc.in_features
        if width != expected:
            count = self.config.num_aux_hidden_states
            raise RuntimeError(
                f"EAGLE-3 drafter fc expects {expected} input features ({count} captured layers x target hidden "
                f"{self.config.target_hidden_size}) but the target supplied {width} "
                f"({width / self.config.target_hidden_size:g} captures): the target captured a different number of "
                f"layers than the drafter was trained on (eagle_aux_hidden_state_layer_ids "
                f"{list(self.config.aux_layer_ids) if self.config.aux_layer_ids is not None else None})"
            )
        projected: Tensor = self.fc(hidden)
        return projected

    def forward(
        self, embeds: Tensor, hidden: Tensor, cache: KVCache | None = None, slots: Sequence[int] | None = None
    ) -> DraftOutput:
        """One drafter pass over [batch, tokens] rows after the committed rows of cache rows `slots`
        (default 0..batch-1); commits them all (the caller truncates)."""
        batch, new = embeds.shape[:2]
        hidden = self.project(hidden, embeds.shape[-1])
        rows, positions, mask, causal = _placement(cache, slots, batch, new, embeds.device)
        cos, sin = self.rotary.tables(positions)
        layer = self.midlayer
        q, k, v = layer.self_attn.project(layer.attention_input(embeds, hidden), cos, sin)
        if cache is not None and rows is not None:
            k, v = cache.update(0, rows, k, v)
            cache.commit(list(range(batch)) if slots is None else slots, new)
        out = layer.finish(hidden, layer.self_attn.attend(q, k, v, mask, causal))
        return DraftOutput(self.lm_head(self.norm(out)), out)

    def to_target_ids(self, draft_ids: Tensor) -> Tensor:
        return draft_ids + self.d2t[draft_ids]


# --- checkpoints -------------------------------------------------------------------------------------

# tensors a checkpoint may omit: t2d is written by SpecForge but ignored by sglang (reference 3.3)
_OPTIONAL = {"t2d"}


def _read_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: no config.json", source=str(directory), fix="point at a checkpoint directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable config: {exc}", source=str(path)) from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: config is not a JSON object", source=str(path))
    return data


def _read_tensors(directory: Path) -> dict[str, tuple[Path, Tensor]]:
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{directory}: no *.safetensors file", source=str(directory))
    tensors: dict[str, tuple[Path, Tensor]] = {}
    for file in files:
        try:
            loaded = load_file(file)
        except Exception as exc:  # safetensors raises its own error types for corrupt headers
            raise CheckpointError(f"{file}: unreadable safetensors file: {exc}", source=str(file)) from exc
        for name, tensor in loaded.items():
            tensors[name] = (file, tensor)
    return tensors


def _load_state(module: nn.Module, directory: Path) -> None:
    """Copy the checkpoint's tensors into `module`, naming file and tensor for anything amiss."""
    tensors = _read_tensors(directory)
    expected = module.state_dict()
    for name, (file, _) in tensors.items():
        if name not in expected:
            raise CheckpointError(
                f"{file}: unexpected tensor {name!r}",
                source=str(file),
                fix="export with SpecForge/transformers tensor names",
            )
    for name, slot in expected.items():
        if name not in tensors:
            if name in _OPTIONAL:
                continue
            raise CheckpointError(f"{directory}: tensor {name!r} is missing", source=str(directory))
        file, tensor = tensors[name]
        if tuple(tensor.shape) != tuple(slot.shape):
            raise CheckpointError(
                f"{file}: tensor {name!r} has shape {tuple(tensor.shape)}, the config implies {tuple(slot.shape)}",
                source=str(file),
                fix="make config.json match the weights",
            )
        with torch.no_grad():
            slot.copy_(tensor.to(slot.dtype))


def load_target(directory: Path | str, dtype: torch.dtype = COMPUTE_DTYPE) -> TargetModel:
    """The target in `directory` (config.json + safetensors), in `dtype`, in eval mode."""
    directory = Path(directory)
    config = LlamaConfig.from_hf(_read_config(directory), directory / CONFIG_FILE)
    target = TargetModel(config).to(dtype)
    _load_state(target, directory)
    return target.eval()


def load_drafter(directory: Path | str, dtype: torch.dtype = COMPUTE_DTYPE) -> Eagle3Drafter:
    """The EAGLE-3 drafter in `directory`, in `dtype`, in eval mode."""
    directory = Path(directory)
    config = DrafterConfig.from_hf(_read_config(directory), directory / CONFIG_FILE)
    drafter = Eagle3Drafter(config).to(dtype)
    _load_state(drafter, directory)
    return drafter.eval()


def save_checkpoint(module: TargetModel | Eagle3Drafter, directory: Path | str) -> None:
    """Write `config.json` and `model.safetensors`, weights in the config's `torch_dtype`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = module.config.to_hf()
    dtype = _DTYPES[config["torch_dtype"]]
    state = {
        name: (t.to(dtype) if t.is_floating_point() else t).contiguous() for name, t in module.state_dict().items()
    }
    save_file(state, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
