"""Run on a host by the engine's Python: the metadata of checkpoint directories that live there.

A model given as an absolute path names a directory on the hosts, which the operator's machine
often cannot see (weights on the GPU hosts' local disks). This reads what specctl's checks need,
where the files are: config.json, the shard index, every shard's safetensors header (an 8-byte
little-endian length, then that many bytes of JSON) and the file list; never the weights.

Self-contained (the standard library only, any Python 3.8+): specctl sends it as `python -c` with
one JSON argument and reads one JSON object back on stdout.

    request  {"paths": ["/data/models/target", ...], "index_file": "model.safetensors.index.json",
              "max_header_bytes": N, "max_json_bytes": N}
    answer   {"checkpoints": [{"path": ..., "config": {...}, "files": [...], "shards": [...],
                               "tensors": {name: [dtype, [shape...], nbytes]}}
                              | {"path": ..., "error": {"kind": ..., "message": ...}}]}

Every file is judged by stat before it is read and read only when it is a regular file under its
limit, opened non-blocking: a FIFO, a device or a huge file where a checkpoint file should be is
an error in the answer, never a hang.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import struct
import sys
from typing import Any


class Refused(Exception):
    """Why one checkpoint cannot be read; `kind` tells the operator side which fix to give."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _os_problem(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "not found"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def _open_regular(path: str, limit: int, kind: str) -> int:
    """A read-only descriptor of a regular file of at most `limit` bytes, judged before and after opening."""
    try:
        before = os.stat(path)
    except OSError as exc:
        raise Refused(
            "missing-file" if exc.errno in (errno.ENOENT, errno.ENOTDIR) else "unreadable",
            f"{path}: {_os_problem(exc)}",
        ) from None
    _judge(path, before, limit, kind)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise Refused("unreadable", f"{path}: {_os_problem(exc)}") from None
    try:
        _judge(path, os.fstat(fd), limit, kind)  # the path may have been swapped since the stat above
    except Refused:
        os.close(fd)
        raise
    return fd


def _judge(path: str, st: os.stat_result, limit: int, kind: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise Refused("special-file", f"{path} is not a regular file")
    if st.st_size > limit:
        raise Refused(kind, f"{path} is {st.st_size} bytes, over the limit of {limit} bytes for this kind of file")


def _read_exactly(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    left = count
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_json(path: str, limit: int) -> dict[str, Any]:
    """A JSON object from a regular file of at most `limit` bytes."""
    fd = _open_regular(path, limit, "too-large")
    try:
        raw = _read_exactly(fd, limit + 1)
    except OSError as exc:
        raise Refused("unreadable", f"{path}: {_os_problem(exc)}") from None
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise Refused("too-large", f"{path} grew past the limit of {limit} bytes while it was read")
    return _json_object(raw, "bad-json", f"cannot parse {path}")


def _json_object(raw: bytes, kind: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise Refused(kind, f"{what}: {exc}") from None
    if not isinstance(data, dict):
        raise Refused(kind, f"{what}: not a JSON object")
    return data


def read_header(path: str, limit: int) -> dict[str, list[Any]]:
    """One shard's tensors as {name: [dtype, shape, nbytes]}: 8 bytes plus the header, whatever the file size."""
    fd = _open_regular(path, 1 << 62, "header")
    try:
        prefix = _read_exactly(fd, 8)
        if len(prefix) != 8:
            raise Refused(
                "header", f"cannot read safetensors header of {path}: file shorter than the 8-byte header length"
            )
        (length,) = struct.unpack("<Q", prefix)
        if length > limit:
            raise Refused(
                "header", f"cannot read safetensors header of {path}: header length {length} exceeds the format's limit"
            )
        raw = _read_exactly(fd, length)
        if len(raw) != length:
            raise Refused("header", f"cannot read safetensors header of {path}: file ends inside the header")
    except OSError as exc:
        raise Refused("unreadable", f"{path}: {_os_problem(exc)}") from None
    finally:
        os.close(fd)
    header = _json_object(raw, "header", f"cannot read safetensors header of {path}")
    tensors: dict[str, list[Any]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = entry["data_offsets"]
            tensors[name] = [str(entry["dtype"]), [int(d) for d in entry["shape"]], int(end) - int(start)]
        except (KeyError, TypeError, ValueError):
            raise Refused("header", f"malformed safetensors header entry {name!r} in {path}") from None
    return tensors


def shard_names(index: dict[str, Any] | None, present: list[str]) -> list[str]:
    """Shards named by the index's weight_map, else every *.safetensors file present."""
    if index is not None and isinstance(index.get("weight_map"), dict):
        return sorted(set(str(v) for v in index["weight_map"].values()))
    return sorted(present)


def read_checkpoint(path: str, spec: dict[str, Any]) -> dict[str, Any]:
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise Refused("missing", f"checkpoint directory {path} does not exist") from None
        raise Refused("unreadable", f"checkpoint directory {path}: {_os_problem(exc)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Refused("not-directory", f"{path} is not a directory")
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as exc:
        raise Refused("unreadable", f"checkpoint directory {path}: {_os_problem(exc)}") from None
    files = [e.name for e in entries if e.is_symlink() or e.is_file()]
    join = os.path.join
    try:
        config = read_json(join(path, "config.json"), spec["max_json_bytes"])
    except Refused as refused:
        if refused.kind == "missing-file":
            raise Refused("no-config", f"config.json not found in {path}") from None
        raise
    index_path = join(path, spec["index_file"])
    index = read_json(index_path, spec["max_json_bytes"]) if os.path.lexists(index_path) else None
    shards = shard_names(index, [name for name in files if name.endswith(".safetensors")])
    tensors: dict[str, list[Any]] = {}
    for shard in shards:
        if not os.path.exists(join(path, shard)):
            raise Refused("shard-missing", f"shard {shard} listed in {spec['index_file']} is missing from {path}")
        tensors.update(read_header(join(path, shard), spec["max_header_bytes"]))
    return {"path": path, "config": config, "files": files, "shards": shards, "tensors": tensors}


def main() -> None:
    spec = json.loads(sys.argv[1])
    answers = []
    for path in spec["paths"]:
        try:
            answers.append(read_checkpoint(path, spec))
        except Refused as refused:
            answers.append({"path": path, "error": {"kind": refused.kind, "message": refused.message}})
    sys.stdout.write(json.dumps({"checkpoints": answers}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
