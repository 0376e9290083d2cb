#!/usr/bin/env python3
"""Generate which EAGLE-3 drafter classes each sglang release can load, from every release's code.

sglang picks a drafter's model class by its config's `architectures` through its model registry
(the `EntryClass` lists of `sglang/srt/models/*.py`); for EAGLE-3 it does not rename a drafter's
architecture (`ModelConfig._config_draft_model` renames only MTP/NextN heads). A drafter whose
architecture is not one of the registry's EAGLE-3 classes is loaded as that plain class, without
its fc and midlayer weights. This script reads each cached wheel as a zip and writes the first
release of every registered class whose name says EAGLE-3 to
`specctl/engines/sglang/data/drafters.json`.

    python scripts/gen_sglang_drafters.py [--check] [--cache DIR]
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import release_data  # noqa: E402
from gen_sglang_conventions import DEFAULT_CACHE, list_releases_cached  # noqa: E402

OUT = REPO / "specctl" / "engines" / "sglang" / "data" / "drafters.json"
_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", re.MULTILINE)


def eagle3_classes(wheel: Path) -> set[str]:
    """Registered model classes of a release whose name marks them as EAGLE-3 drafters."""
    found: set[str] = set()
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("sglang/srt/models/") and name.endswith(".py"):
                for entry in _ENTRY.findall(z.read(name).decode("utf-8", "replace")):
                    found |= {c for c in re.findall(r"\w+", entry) if "eagle3" in c.lower()}
    return found


def generate(cache: Path) -> dict[str, object]:
    releases = list_releases_cached(cache)
    first: dict[str, str] = {}
    for version in releases:
        wheel = sorted(cache.glob(f"sglang-{version}-*.whl"))[0]
        present = eagle3_classes(wheel)
        for name in present:
            first.setdefault(name, version)
        gone = set(first) - present
        if gone:
            raise RuntimeError(f"{sorted(gone)} disappear in sglang {version}: model it per release")
    return {"generated_by": "scripts/gen_sglang_drafters.py", "releases": [releases[0], releases[-1]],
            "eagle3_since": dict(sorted(first.items()))}


def main() -> int:
    return release_data.run(__doc__ or "", OUT, "eagle3_since", generate, DEFAULT_CACHE)


if __name__ == "__main__":
    sys.exit(main())
