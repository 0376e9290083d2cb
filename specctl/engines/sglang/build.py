"""Which sglang build an interpreter has: its version and a digest of the files the probe's answers
come from (the model modules, the server arguments, the capture machinery). Standard library only,
run by the engine's interpreter on a host; sglang itself is located, not imported (importing it
takes seconds). Prints one JSON object: {"version", "digest", "files"} or {"error"}.

Two hosts with the same version and digest give the same probe answers, so one probe answers for
both; a file patched on one host changes its digest.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from importlib.metadata import PackageNotFoundError, version

PARTS = ("srt/models", "srt/server_args.py", "srt/layers/aux_hidden_states.py", "srt/speculative")


def main() -> None:
    try:
        spec = importlib.util.find_spec("sglang")
        installed = version("sglang")
    except (ImportError, PackageNotFoundError, ValueError) as exc:
        print(json.dumps({"error": f"sglang is not installed for {sys.executable}: {exc}"}))
        return
    if spec is None or spec.origin is None:
        print(json.dumps({"error": f"sglang is not importable by {sys.executable}"}))
        return
    root = os.path.dirname(spec.origin)
    digest = hashlib.sha256(installed.encode())
    count = 0
    for part in PARTS:
        path = os.path.join(root, part)
        files = (
            [path]
            if os.path.isfile(path)
            else sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names if f.endswith(".py"))
        )
        for name in files:
            with open(name, "rb") as handle:
                digest.update(os.path.relpath(name, root).encode() + b"\0" + handle.read() + b"\0")
            count += 1
    print(json.dumps({"version": installed, "digest": digest.hexdigest()[:20], "files": count}))


if __name__ == "__main__":
    main()
