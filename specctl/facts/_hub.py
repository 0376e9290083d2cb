"""Checkpoint metadata from the Hugging Face Hub at a pinned revision: config, index, headers only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specctl.errors import CheckpointError
from specctl.facts.checkpoint import INDEX_FILE, SINGLE_FILE, CheckpointMeta, Tensor, read_header, shard_names


def read_repo(repo: str, revision: str | None, *, offline: bool) -> CheckpointMeta:
    """Metadata of `repo` at `revision`; offline reads only what the local HF cache already holds."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

    where = f"{repo}@{revision or 'main'}"

    def fetch(name: str) -> Path | None:
        try:
            return Path(hf_hub_download(repo, name, revision=revision, local_files_only=offline))
        except LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: test it first
            if name == "config.json":
                raise CheckpointError(
                    f"{where}: config.json is not in the local Hugging Face cache" + (" (offline)" if offline else " and the Hub is unreachable"),
                    source=repo, revision=revision,
                    fix=f"run `hf download {repo} --revision {revision or 'main'} --include '*.json'` where the Hub is reachable",
                ) from None
            return None
        except EntryNotFoundError:
            return None
        except HfHubHTTPError as exc:
            raise CheckpointError(f"{where}: {exc}", source=repo, revision=revision,
                                  fix="check the repo id and revision, and HF_TOKEN for gated repos") from None

    config_path = fetch("config.json")
    assert config_path is not None
    config = json.loads(config_path.read_text(encoding="utf-8"))
    index_path = fetch(INDEX_FILE)
    index: dict[str, Any] | None = json.loads(index_path.read_text(encoding="utf-8")) if index_path else None
    shards = shard_names(index, [] if index else [SINGLE_FILE])
    snapshot = config_path.parent
    tensors: dict[str, Tensor] = {}
    missing = []
    for shard in shards:
        local = snapshot / shard
        if local.exists():
            tensors.update(read_header(local))
        else:
            missing.append(shard)
    if missing and not offline:
        metadata = HfApi().get_safetensors_metadata(repo, revision=revision)
        for name, file_meta in metadata.files_metadata.items():
            if name in missing:
                for tensor_name, info in file_meta.tensors.items():
                    start, end = info.data_offsets
                    tensors[tensor_name] = Tensor(info.dtype, tuple(info.shape), end - start)
        missing = [m for m in missing if m not in metadata.files_metadata]
    if missing:
        raise CheckpointError(
            f"{where}: safetensors headers of {len(missing)} shard(s) are not available offline (e.g. {missing[0]})",
            source=repo, revision=revision,
            fix="run once with the Hub reachable (only headers are fetched), or download the shards",
        )
    files = tuple(sorted({*shards, "config.json", *([INDEX_FILE] if index else []), *(p.name for p in snapshot.iterdir())}))
    return CheckpointMeta(repo, revision, config, files, tensors)
