"""Checkpoint metadata from the Hugging Face Hub at a pinned revision: config, index, headers only.

Offline (`--offline`, HF_HUB_OFFLINE) reads the local cache alone. Online, the Hub is first asked
once, briefly, whether it answers at all: huggingface_hub retries an unreachable Hub for about 45
seconds per file, printing each retry, before the same answer.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from specctl.errors import CheckpointError
from specctl.facts.checkpoint import INDEX_FILE, SINGLE_FILE, CheckpointMeta, Tensor, read_header, shard_names

REACH_TIMEOUT_S = 5.0


@functools.cache
def unreachable(endpoint: str) -> str | None:
    """Why the Hub at `endpoint` does not answer (one attempt), or None when it does."""
    try:
        urllib.request.urlopen(
            urllib.request.Request(endpoint.rstrip("/") + "/api/whoami-v2", method="HEAD"), timeout=REACH_TIMEOUT_S
        ).close()
    except urllib.error.HTTPError:
        return None  # it answered (401 without a token is an answer)
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))
    return None


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def offline_env() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def read_repo(repo: str, revision: str | None, *, offline: bool) -> CheckpointMeta:
    """Metadata of `repo` at `revision`; offline (or with the Hub not answering) reads only what
    the local HF cache already holds."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

    where = f"{repo}@{revision or 'main'}"
    why_not = None if offline or offline_env() else unreachable(hub_endpoint())
    offline = offline or offline_env() or why_not is not None

    def fetch(name: str) -> Path | None:
        try:
            return Path(hf_hub_download(repo, name, revision=revision, local_files_only=offline))
        except LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: test it first
            if name == "config.json":
                raise CheckpointError(
                    f"{where}: config.json is not in the local Hugging Face cache"
                    + (f" and the Hub at {hub_endpoint()} does not answer ({why_not})" if why_not else " (offline)"),
                    source=repo,
                    revision=revision,
                    fix=f"run `hf download {repo} --revision {revision or 'main'} --include '*.json'` "
                    "where the Hub is reachable",
                ) from None
            return None
        except EntryNotFoundError:
            return None
        except HfHubHTTPError as exc:
            raise CheckpointError(
                f"{where}: {exc}",
                source=repo,
                revision=revision,
                fix="check the repo id and revision, and HF_TOKEN for gated repos",
            ) from None

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
            source=repo,
            revision=revision,
            fix="run once with the Hub reachable (only headers are fetched), or download the shards",
        )
    files = tuple(
        sorted({*shards, "config.json", *([INDEX_FILE] if index else []), *(p.name for p in snapshot.iterdir())})
    )
    return CheckpointMeta(repo, revision, config, files, tensors)
