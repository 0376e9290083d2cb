"""What checking staged weights by content costs, measured in one run on this machine as the local
host: the staging script a host runs (specctl/release/_stage_host.py), by this Python, against the
test suite's Hub endpoint on 127.0.0.1 (tests/hub_endpoint.py, which publishes the real sha256 of
files up to 64 MiB). The file set is real bytes, not sparse: `--shards` shards of `--shard-mib` MiB,
in the page cache (a host's disk caps the rate where it reads slower).

1. Hashing throughput (median of `--hash-repeat`, interleaved): the script's hash loop alone
   (sha256 over 1 MiB reads), and `stage --verify` end to end (the Hub asked for its checksums,
   every file hashed again, the hash cache ignored) of a snapshot placed in the cache by hand and
   staged `--offline` (content unverified) before.
2. A second stage of the staged checkpoint, what a deploy's stage step costs on a host that has it:
   with the hash cache (the content check: each file's size and mtime against hashes.json) against
   a size-only check (a record without ids, as staging did before content checks), interleaved.

    .venv/bin/python benchmarks/content_checks.py [--shards 64] [--shard-mib 63] [--repeat 15] [--hash-repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import interleaved  # noqa: E402
from specctl.hosts.local import local_transport  # noqa: E402
from specctl.release import staging  # noqa: E402
from tests.hub_endpoint import HubEndpoint, HubRepo  # noqa: E402

REPO = "bench/content-checks"
COMMIT = hashlib.sha1(b"content-checks").hexdigest()


def write_shards(directory: Path, shards: int, mib: int) -> dict[str, Path]:
    """config.json, an index and `shards` safetensors files of real (random) bytes."""
    directory.mkdir(parents=True)
    block = os.urandom(1 << 20)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        size = (mib << 20) - 4096
        header = json.dumps({f"w{i}": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
        with open(directory / name, "wb") as handle:
            handle.write(len(header).to_bytes(8, "little") + header)
            handle.write(i.to_bytes(8, "little"))  # every shard its own content
            for _ in range((size - 8) >> 20):
                handle.write(block)
            handle.write(block[: (size - 8) & ((1 << 20) - 1)])
        weight_map[f"w{i}"] = name
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (directory / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return {p.name: p for p in sorted(directory.iterdir())}


def hash_loop(path: Path) -> str:
    """The staging script's hash of a weight file: sha256 over 1 MiB reads."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def place(cache: Path, files: dict[str, Path], ids: dict[str, str]) -> None:
    """The snapshot in the cache's layout, as a copy by hand leaves it (blobs hard-linked: no second 4 GB)."""
    repo = cache / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, path in files.items():
        os.link(path, repo / "blobs" / ids[name])
        (snapshot / name).symlink_to(f"../../blobs/{ids[name]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--shard-mib", type=int, default=63, help="at most 64: larger files get made-up ids")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--hash-repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="content-checks-"))
    hub: HubEndpoint | None = None
    try:
        files = write_shards(work / "checkpoint", args.shards, args.shard_mib)
        weights = {n: p for n, p in files.items() if n.endswith(".safetensors")}
        total = sum(p.stat().st_size for p in files.values())
        ids = {name: hash_loop(path) for name, path in weights.items()}  # (also: the files settle in the cache)
        for name in set(files) - set(weights):
            data = files[name].read_bytes()
            ids[name] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

        hub = HubEndpoint({REPO: HubRepo(files, COMMIT)}).start()
        cache = work / "cache"
        place(cache, files, ids)
        from huggingface_hub import HfApi

        HfApi(endpoint=hub.url).model_info(REPO, revision=COMMIT, files_metadata=True)  # the endpoint hashes once
        engine_env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_XET": "1"}
        local, checkpoint = local_transport(), [staging.Checkpoint(REPO, COMMIT)]
        content_root, size_root = work / "root-content", work / "root-size"

        def stage(root: Path, *, offline: bool = False, verify: bool = False) -> list[staging.Staged]:
            return staging.stage(
                local,
                python=sys.executable,
                root=str(root),
                checkpoints=checkpoint,
                env=staging.staging_env(engine_env, {}, offline=offline),
                offline=offline,
                verify=verify,
            )

        [unverified] = stage(content_root, offline=True)
        assert not unverified.verified

        def loop() -> float:
            begin = time.perf_counter()
            assert all(hash_loop(path) == ids[name] for name, path in weights.items())
            return time.perf_counter() - begin

        def verify() -> float:
            begin = time.perf_counter()
            [verified] = stage(content_root, verify=True)
            assert verified.verified and verified.hashed == total, verified.to_dict()
            return time.perf_counter() - begin

        hashing = interleaved({"loop": loop, "verify": verify}, args.hash_repeat, warmup=0)
        loop_s, verify_s = hashing["loop"], hashing["verify"]

        shutil.copytree(content_root / "staged", size_root / "staged")  # the same record, without its ids
        [record] = (size_root / "staged").glob("*/*@*.json")
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "ids": {}}))

        def second(root: Path) -> float:
            begin = time.perf_counter()
            staged, missing = staging.check(
                local, python=sys.executable, root=str(root), checkpoints=checkpoint, env=engine_env
            )
            assert staged and not missing and staged[0].hashed == 0  # nothing read again
            return time.perf_counter() - begin

        times = interleaved({"content": lambda: second(content_root), "size": lambda: second(size_root)}, args.repeat)
        gb = total / 1e9
        print(f"{args.shards} shards, {gb:.2f} GB of real bytes in the page cache, {os.cpu_count()} CPU(s)")
        print(f"hashing, median of {args.hash_repeat} interleaved:")
        print(f"  hash loop alone (sha256, 1 MiB reads):   {loop_s:6.2f} s  {gb / loop_s:5.2f} GB/s")
        print(f"  stage --verify end to end:               {verify_s:6.2f} s  {gb / verify_s:5.2f} GB/s")
        print(f"second stage of the staged checkpoint (median of {args.repeat}, interleaved):")
        print(f"  size-only check:                         {times['size'] * 1e3:6.0f} ms  x1.00")
        print(
            f"  content check with the hash cache:       {times['content'] * 1e3:6.0f} ms  "
            f"x{times['content'] / times['size']:.2f}"
        )
        print(f"  without the hash cache it would hash again: {verify_s:.1f} s")
        return 0
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
