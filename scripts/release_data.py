"""The command line every per-release data generator shares: derive from the cached wheels, then
write the shipped file or, with --check, exit 1 when it differs from what the code says."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run(description: str, out: Path, key: str, generate: Callable[[Path], dict[str, Any]], default_cache: Path) -> int:
    """`key` names the part of the file that --check compares (the rest says how it was made)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--cache", type=Path, default=default_cache)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    data = generate(args.cache)
    if args.check:
        shipped = json.loads(out.read_text())
        if shipped[key] != data[key]:
            print(f"shipped {shipped[key]}\nderived {data[key]}")
            return 1
        return 0
    out.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}: {data[key]}")
    return 0
