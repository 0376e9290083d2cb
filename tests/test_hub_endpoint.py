"""The real huggingface_hub client against tests.hub_endpoint: downloads, metadata, resume, errors, gating."""

from __future__ import annotations

import hashlib
import json
import random
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from examples.hub import write_checkpoint, write_shard
from tests.conftest import Serve
from tests.hub_endpoint import HubRepo

REPO = "acme/tiny-llm"
COMMIT = hashlib.sha1(b"tiny-llm@1").hexdigest()
SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
TENSORS = [
    ("model.embed_tokens.weight", "BF16", (128, 64)),
    ("model.layers.0.mlp.up_proj.weight", "F32", (64, 96)),
    ("model.layers.0.mlp.down_proj.weight", "F32", (96, 64)),
    ("lm_head.weight", "BF16", (128, 64)),
]


def fill(path: Path, data_size: int, seed: int) -> Path:
    """Overwrite a shard's sparse data region with random bytes, so a misplaced byte range cannot pass as zeros."""
    with path.open("r+b") as handle:
        handle.seek(path.stat().st_size - data_size)
        handle.write(random.Random(seed).randbytes(data_size))
    return path


def checkpoint(root: Path) -> dict[str, Path]:
    """config.json, two random-filled shards, their index and a README, as repo filename -> local path."""
    write_checkpoint(
        root,
        {"architectures": ["LlamaForCausalLM"], "hidden_size": 64},
        TENSORS,
        shards=2,
        extra_files={"README.md": "# tiny\n"},
    )
    for seed, shard in enumerate(SHARDS):
        with (root / shard).open("rb") as handle:
            header_len = int.from_bytes(handle.read(8), "little")
        fill(root / shard, (root / shard).stat().st_size - 8 - header_len, seed)
    return {p.name: p for p in root.iterdir()}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return checkpoint(tmp_path / "src")


def test_snapshot_at_commit_is_byte_identical(serve: Serve, files: dict[str, Path]) -> None:
    from huggingface_hub import snapshot_download

    hub = serve({REPO: HubRepo(files, COMMIT)})
    folder = Path(snapshot_download(REPO, revision=COMMIT, allow_patterns=["*.json", "*.safetensors"]))

    assert folder.name == COMMIT
    assert sorted(p.name for p in folder.iterdir()) == sorted(n for n in files if n != "README.md")
    for path in folder.iterdir():
        assert path.read_bytes() == files[path.name].read_bytes()
    assert ("GET", f"/api/models/{REPO}/tree/{COMMIT}") in hub.requests  # a commit needs no model-info call
    assert all(path.startswith(f"/api/models/{REPO}/tree/") or "/resolve/" in path for _, path in hub.requests)
    assert sorted(s.filename or "" for s in hub.file_gets()) == sorted(n for n in files if n != "README.md")
    assert hub.bytes_sent[f"/{REPO}/resolve/{COMMIT}/{SHARDS[0]}"] == files[SHARDS[0]].stat().st_size


def test_second_snapshot_fetches_no_file_body(serve: Serve, files: dict[str, Path]) -> None:
    from huggingface_hub import snapshot_download

    hub = serve({REPO: HubRepo(files, COMMIT)})
    first = snapshot_download(REPO, revision=COMMIT, allow_patterns="*.safetensors")
    hub.clear()

    assert snapshot_download(REPO, revision=COMMIT, allow_patterns="*.safetensors") == first
    assert hub.requests == []  # tree listing cached on disk, every pointer present
    assert snapshot_download(REPO, allow_patterns="*.safetensors") == first  # "main" costs one model-info call
    assert hub.requests == [("GET", f"/api/models/{REPO}/revision/main")]
    assert hub.file_gets() == []


def test_model_info_files_metadata(serve: Serve, files: dict[str, Path]) -> None:
    from huggingface_hub import HfApi, model_info

    serve({REPO: HubRepo(files, COMMIT, revisions={"main", "v1"})})
    info = HfApi().model_info(REPO, revision="v1", files_metadata=True)

    assert info.sha == COMMIT and info.gated is False
    assert {s.rfilename: s.size for s in info.siblings or []} == {n: p.stat().st_size for n, p in files.items()}
    lfs = {s.rfilename: s.lfs for s in info.siblings or [] if s.lfs is not None}
    assert sorted(lfs) == sorted(SHARDS)
    assert all(x.size == files[n].stat().st_size and len(x.sha256) == 64 for n, x in lfs.items())
    plain = model_info(REPO)  # the module-level function, bound to an HfApi built at import
    assert plain.sha == COMMIT and all(s.size is None for s in plain.siblings or [])


def test_get_safetensors_metadata(serve: Serve, files: dict[str, Path], tmp_path: Path) -> None:
    from huggingface_hub import HfApi

    single = tmp_path / "single.safetensors"
    write_shard(single, [("w", "F16", (8, 4)), ("b", "F32", (4,))])
    hub = serve({REPO: HubRepo(files, COMMIT), "acme/one": HubRepo({"model.safetensors": single}, COMMIT)})

    sharded = HfApi().get_safetensors_metadata(REPO, revision=COMMIT)
    assert sharded.sharded and set(sharded.files_metadata) == set(SHARDS)
    tensors = {name: t for meta in sharded.files_metadata.values() for name, t in meta.tensors.items()}
    assert {n: (t.dtype, tuple(t.shape)) for n, t in tensors.items()} == {n: (d, s) for n, d, s in TENSORS}
    assert sharded.weight_map == json.loads(files["model.safetensors.index.json"].read_text())["weight_map"]
    header_reads = [s for s in hub.file_gets(SHARDS[0]) if s.range == "bytes=0-100000"]
    assert [s.status for s in header_reads] == [206]

    one = HfApi().get_safetensors_metadata("acme/one")
    assert not one.sharded and one.parameter_count == {"F16": 32, "F32": 4}


def test_cut_mid_shard_resumes_with_range(serve: Serve, tmp_path: Path) -> None:
    from huggingface_hub import constants, hf_hub_download

    shard = tmp_path / "big.safetensors"
    data = write_shard(shard, [("w", "BF16", (4096, 3072))])  # 24 MiB: the client buffers 10 MiB chunks
    fill(shard, data, seed=7)
    size = shard.stat().st_size
    chunk = constants.DOWNLOAD_CHUNK_SIZE
    hub = serve({REPO: HubRepo({"model.safetensors": shard}, COMMIT)})
    hub.cut_after_bytes = chunk + chunk // 2

    path = Path(hf_hub_download(REPO, "model.safetensors", revision=COMMIT))

    assert path.read_bytes() == shard.read_bytes()
    assert hub.cut_after_bytes is None
    gets = hub.file_gets("model.safetensors")
    assert [(s.range, s.status) for s in gets] == [(None, 200), (f"bytes={chunk}-", 206)]
    assert [s.body_bytes for s in gets] == [chunk + chunk // 2, size - chunk]  # the partial chunk is re-sent
    assert not list(path.parent.parent.parent.glob("blobs/*.incomplete"))


def test_errors_map_to_client_exceptions(serve: Serve, files: dict[str, Path]) -> None:
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    serve({REPO: HubRepo(files, COMMIT)})
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO, "config.json", revision="nope")
    with pytest.raises(RevisionNotFoundError):
        HfApi().model_info(REPO, revision="nope")
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(REPO, revision="nope")
    with pytest.raises(RevisionNotFoundError):
        snapshot_download(REPO, revision="f" * 40)  # an unknown commit fails at the tree listing
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("acme/missing", "config.json")
    with pytest.raises(RepositoryNotFoundError):
        HfApi().model_info("acme/missing")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download(REPO, "nope.json", revision=COMMIT)


def test_gated_repo_needs_the_token(serve: Serve, files: dict[str, Path]) -> None:
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import GatedRepoError

    hub = serve({REPO: HubRepo(files, COMMIT, gated=True)}, token="hf_secret")
    assert HfApi().model_info(REPO).gated == "manual"  # metadata stays public, as on the Hub
    with pytest.raises(GatedRepoError):
        hf_hub_download(REPO, "config.json")
    with pytest.raises(GatedRepoError):
        snapshot_download(REPO, allow_patterns="*.json")
    with pytest.raises(GatedRepoError):
        hf_hub_download(REPO, "config.json", token="hf_wrong")
    assert hub.file_gets() == []

    path = hf_hub_download(REPO, "config.json", token="hf_secret")
    assert Path(path).read_bytes() == files["config.json"].read_bytes()
    folder = Path(snapshot_download(REPO, allow_patterns="*.safetensors", token="hf_secret"))
    assert sorted(p.name for p in folder.glob("*.safetensors")) == SHARDS


def test_client_stays_off_xet_even_when_available(
    serve: Serve, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, snapshot_download
    from huggingface_hub.utils._runtime import is_xet_available

    hub = serve({REPO: HubRepo(files, COMMIT)})
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    assert is_xet_available()
    assert get_hf_file_metadata(hf_hub_url(REPO, SHARDS[0], revision=COMMIT)).xet_file_data is None
    folder = Path(snapshot_download(REPO, revision=COMMIT, allow_patterns="*.safetensors"))
    assert all((folder / n).read_bytes() == files[n].read_bytes() for n in SHARDS)
    assert not [p for _, p in hub.requests if "xet" in p]


def test_raw_ranges(serve: Serve, files: dict[str, Path]) -> None:
    """Range edge cases the client does not exercise, straight over urllib."""
    hub = serve({REPO: HubRepo(files, COMMIT)})
    url = f"{hub.url}/{REPO}/resolve/main/config.json"
    body = files["config.json"].read_bytes()

    def get(range_: str) -> tuple[int, bytes, str | None]:
        request = urllib.request.Request(url, headers={"Range": range_})
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, response.read(), response.headers.get("Content-Range")
        except urllib.error.HTTPError as error:
            with error:
                return error.code, error.read(), error.headers.get("Content-Range")

    assert get("bytes=2-5") == (206, body[2:6], f"bytes 2-5/{len(body)}")
    assert get("bytes=-4") == (206, body[-4:], f"bytes {len(body) - 4}-{len(body) - 1}/{len(body)}")
    assert get("bytes=3-") == (206, body[3:], f"bytes 3-{len(body) - 1}/{len(body)}")
    assert get(f"bytes={len(body)}-") == (416, b"", f"bytes */{len(body)}")
    assert get("bytes=0-1,4-5") == (200, body, None)  # multiple ranges: ignored, whole file
