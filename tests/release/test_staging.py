"""Staging without the Hub: the host script (release/_stage_host.py), run here as on a host, on a
Hugging Face cache laid out by hand (blobs/, snapshots/<commit>/, refs/), recognises a complete
snapshot by its config, index and shard headers, stages it "content unverified", and refuses an
incomplete one naming the file."""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import pytest

from specctl.hosts.local import local_transport
from specctl.release import staging

REPO = "org/tiny"
COMMIT = hashlib.sha1(b"tiny").hexdigest()


def shard(tensors: dict[str, int]) -> bytes:
    """A safetensors file of F32 vectors (name -> length)."""
    header, offset = {}, 0
    for name, n in tensors.items():
        header[name] = {"dtype": "F32", "shape": [n], "data_offsets": [offset, offset + 4 * n]}
        offset += 4 * n
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def place(cache: Path, files: dict[str, bytes], *, ref: bool = True) -> Path:
    """A snapshot in the cache's own layout: each file a link to its blob, named by its content id."""
    repo = cache / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, data in files.items():
        blob = (
            hashlib.sha256(data).hexdigest()
            if name.endswith(".safetensors")
            else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        )
        (repo / "blobs" / blob).write_bytes(data)
        (snapshot / name).symlink_to(f"../../blobs/{blob}")
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def checkpoint_files() -> dict[str, bytes]:
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    return {
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-1.safetensors": shard({"a": 16}),
        "model-2.safetensors": shard({"b": 8}),
        "tokenizer.json": b"{}",
    }


def stage(tmp_path: Path, cache: Path, revision: str | None = None) -> list[staging.Staged]:
    return staging.stage(
        local_transport(),
        python=sys.executable,
        root=str(tmp_path / "root"),
        checkpoints=[staging.Checkpoint(REPO, revision)],
        env={"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"},
        offline=True,
    )


def test_a_complete_snapshot_placed_by_hand_is_staged_content_unverified(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    files = checkpoint_files()
    snapshot = place(cache, files)
    [done] = stage(tmp_path, cache)  # unpinned: resolved through refs/main
    assert (done.repo, done.commit, done.snapshot) == (REPO, COMMIT, str(snapshot))
    assert not done.verified and "--offline" in (done.unverified or "")
    assert done.bytes == sum(map(len, files.values())) and done.fetched == 0
    record = done.checksums()
    by_name = {f["name"]: f for f in record["files"]}
    assert set(by_name) == set(files)
    assert by_name["model-1.safetensors"]["id"] == "sha256:" + hashlib.sha256(files["model-1.safetensors"]).hexdigest()
    assert by_name["config.json"]["id"].startswith("git:") and not any(f["verified"] for f in record["files"])
    assert "content unverified" in done.state()
    [again] = stage(tmp_path, cache, COMMIT)  # the record answers the next look, still unverified
    assert again.unverified == done.unverified and again.contents == done.contents


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        ("missing-shard", "model-2.safetensors is missing from"),
        ("truncated-shard", "model-1.safetensors is 100 bytes; its safetensors header implies"),
        ("missing-config", "config.json is missing from"),
        ("no-ref", "refs/main is missing"),
        ("blob-not-copied", "tokenizer.json in"),
    ],
)
def test_an_incomplete_snapshot_is_refused_naming_the_file(tmp_path: Path, damage: str, said: str) -> None:
    cache = tmp_path / "cache"
    files = checkpoint_files()
    if damage == "missing-shard":
        del files["model-2.safetensors"]
    if damage == "truncated-shard":
        files["model-1.safetensors"] = files["model-1.safetensors"][:100]
    if damage == "missing-config":
        del files["config.json"]
    snapshot = place(cache, files, ref=damage != "no-ref")
    if damage == "blob-not-copied":
        (snapshot / "tokenizer.json").resolve().unlink()
    with pytest.raises(staging.StageFailed) as caught:
        stage(tmp_path, cache)
    assert said in caught.value.message and "the Hub is not asked (--offline)" in caught.value.message
    assert caught.value.kind == ("not-cached" if damage == "no-ref" else "incomplete-cache")
    assert "snapshot" in (caught.value.fix or "")
