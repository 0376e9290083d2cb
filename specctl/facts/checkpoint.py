"""Checkpoint metadata: config.json and safetensors headers, never the weights.

Reads a local directory or a Hugging Face repo at a pinned revision (offline from the HF cache
when asked). A safetensors header is an 8-byte length plus JSON, so a terabyte checkpoint costs
the same few kilobytes per shard as a tiny one.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specctl.errors import CheckpointError
from specctl.profile._files import refusal

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit
MAX_CHECKPOINT_JSON_BYTES = 64 * 1024 * 1024  # config.json and the shard index; a large index is a few MB
FC_NAMES = ("fc.weight", "model.fc.weight")
D2T_NAMES = ("d2t", "model.d2t")


@dataclass(frozen=True)
class Tensor:
    """One tensor's header entry."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass(frozen=True)
class CheckpointMeta:
    """What specctl needs to know about a checkpoint, read from its metadata only."""

    source: str
    revision: str | None
    config: Mapping[str, Any]
    files: tuple[str, ...]
    tensors: Mapping[str, Tensor] = field(repr=False)

    def _text(self, key: str) -> Any:
        """A text-model key: top level first, then `text_config` (multimodal wrappers such as Kimi-K2.5)."""
        if key in self.config:
            return self.config[key]
        text = self.config.get("text_config")
        return text.get(key) if isinstance(text, Mapping) else None

    @property
    def architecture(self) -> str | None:
        archs = self.config.get("architectures")
        return archs[0] if isinstance(archs, list) and archs else None

    @property
    def model_type(self) -> str | None:
        value = self.config.get("model_type")
        return value if isinstance(value, str) else None

    @property
    def num_hidden_layers(self) -> int | None:
        return _int(self._text("num_hidden_layers"))

    @property
    def hidden_size(self) -> int | None:
        return _int(self._text("hidden_size"))

    @property
    def num_attention_heads(self) -> int | None:
        return _int(self._text("num_attention_heads"))

    @property
    def num_key_value_heads(self) -> int | None:
        return _int(self._text("num_key_value_heads")) or self.num_attention_heads

    @property
    def vocab_size(self) -> int | None:
        return _int(self._text("vocab_size"))

    @property
    def tie_word_embeddings(self) -> bool:
        return bool(self._text("tie_word_embeddings"))

    # drafter facts
    @property
    def eagle_config(self) -> Mapping[str, Any] | None:
        """The nested `eagle_config` block, as written."""
        value = self.config.get("eagle_config")
        return value if isinstance(value, Mapping) else None

    @property
    def top_level_eagle_keys(self) -> Mapping[str, Any]:
        """EAGLE keys written at the top level, which some readers use and others ignore."""
        keys = ("eagle_aux_hidden_state_layer_ids", "use_aux_hidden_state", "norm_before_fc")
        return {k: self.config[k] for k in keys if k in self.config}

    @property
    def target_hidden_size(self) -> int | None:
        return _int(self.config.get("target_hidden_size"))

    @property
    def has_draft_vocab_size(self) -> bool:
        return "draft_vocab_size" in self.config

    @property
    def draft_vocab_size(self) -> int | None:
        return _int(self.config.get("draft_vocab_size"))

    @property
    def fc_weight_shape(self) -> tuple[int, ...] | None:
        return next((self.tensors[n].shape for n in FC_NAMES if n in self.tensors), None)

    @property
    def d2t_length(self) -> int | None:
        shape = next((self.tensors[n].shape for n in D2T_NAMES if n in self.tensors), None)
        return shape[0] if shape else None

    @property
    def weight_bytes_by_dtype(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for tensor in self.tensors.values():
            totals[tensor.dtype] = totals.get(tensor.dtype, 0) + tensor.nbytes
        return dict(sorted(totals.items()))

    @property
    def weight_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def summary(self) -> dict[str, Any]:
        """The facts as plain data, for --json and the ledger."""
        return {
            "source": self.source,
            "revision": self.revision,
            "architecture": self.architecture,
            "model_type": self.model_type,
            "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "eagle_config": dict(self.eagle_config) if self.eagle_config is not None else None,
            "top_level_eagle_keys": dict(self.top_level_eagle_keys),
            "target_hidden_size": self.target_hidden_size,
            "draft_vocab_size": self.draft_vocab_size,
            "fc_weight_shape": list(self.fc_weight_shape) if self.fc_weight_shape else None,
            "d2t_length": self.d2t_length,
            "weight_bytes_by_dtype": self.weight_bytes_by_dtype,
            "weight_bytes": self.weight_bytes,
        }


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_checkpoint(model: str, revision: str | None = None, *, offline: bool = False) -> CheckpointMeta:
    """Metadata of a local checkpoint directory or of a Hugging Face repo id at `revision`."""
    path = Path(model).expanduser()
    if path.is_dir():
        return read_local(path, revision)
    if model.startswith(("/", ".", "~")):
        raise CheckpointError(
            f"checkpoint directory {model} does not exist",
            source=model,
            fix="fix the path, or run check where the checkpoint is (or against its HF repo id)",
        )
    from specctl.facts import _hub  # huggingface_hub only when a repo id is read

    return _hub.read_repo(model, revision, offline=offline)


def read_local(path: Path, revision: str | None = None) -> CheckpointMeta:
    """Metadata of a checkpoint directory: config.json plus the headers of its safetensors shards."""
    config = _read_config(path / "config.json", str(path))
    shards = shard_names(
        _read_json(path / INDEX_FILE, str(path)) if (path / INDEX_FILE).exists() else None,
        (p.name for p in path.glob("*.safetensors")),
    )
    tensors: dict[str, Tensor] = {}
    for shard in shards:
        if not (path / shard).exists():
            raise CheckpointError(
                f"shard {shard} listed in {INDEX_FILE} is missing from {path}",
                source=str(path),
                fix="download the complete checkpoint, or fix the index",
            )
        tensors.update(read_header(path / shard))
    files = tuple(sorted(p.name for p in path.iterdir() if p.is_file() or p.is_symlink()))
    return CheckpointMeta(str(path), revision, config, files, tensors)


def shard_names(index: Mapping[str, Any] | None, present: Iterable[str]) -> list[str]:
    """Shards named by the index, else every *.safetensors file present."""
    if index is not None:
        weight_map = index.get("weight_map")
        if isinstance(weight_map, Mapping):
            return sorted(set(map(str, weight_map.values())))
    return sorted(present)


def read_header(path: Path) -> dict[str, Tensor]:
    """Parse one safetensors header; reads 8 bytes plus the header, whatever the file size."""
    _refuse_special(path, str(path), 1 << 62)
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise ValueError("file shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise ValueError(f"header length {length} exceeds the format's limit")
            raw = handle.read(length)
            if len(raw) != length:
                raise ValueError("file ends inside the header")
        header = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"cannot read safetensors header of {path}: {exc}",
            source=str(path),
            fix="re-download the shard; it is truncated or not a safetensors file",
        ) from None
    return parse_header(header, str(path))


def parse_header(header: Mapping[str, Any], source: str) -> dict[str, Tensor]:
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = entry["data_offsets"]
            tensors[name] = Tensor(str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), int(end) - int(start))
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(
                f"malformed safetensors header entry {name!r} in {source}", source=source, fix="re-download the shard"
            ) from None
    return tensors


def _refuse_special(path: Path, source: str, limit: int) -> None:
    """A FIFO, device or directory where a checkpoint file should be is an error, never a hang."""
    found = refusal(path, limit)
    if found is not None and not found.missing:
        raise CheckpointError(f"{path}: {found.message}", source=source, fix=found.fix)


def _read_json(path: Path, source: str) -> dict[str, Any]:
    _refuse_special(path, source, MAX_CHECKPOINT_JSON_BYTES)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(
            f"{path.name} not found in {source}",
            source=source,
            fix="point the profile at a Hugging Face checkpoint directory (config.json + *.safetensors)",
        ) from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"cannot parse {path}: {exc}", source=source, fix="re-download the file; it is not valid JSON"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object", source=source, fix="re-download the file")
    return data


def _read_config(path: Path, source: str) -> dict[str, Any]:
    return _read_json(path, source)
