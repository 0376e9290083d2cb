#!/usr/bin/env python3
"""Generate sglang's HTTP contract per release, as verify needs it, from the code of every release.

For each cached wheel (read as a zip, like gen_sglang_conventions.py) it reads where the answer
verify relies on comes from, and writes the first release of each feature to
`specctl/engines/sglang/data/http.json`:

- `chat_meta_info`: `/v1/chat/completions` honours `return_meta_info` (the OpenAI serving code
  reads the field): verify can send chat requests and still get the counters; before it, the
  field is ignored and only the native `/generate` returns `meta_info`.
- `spec_verify_ct`: `meta_info` carries the verify-step count (the managers set the key).
- `e2e_latency`: `meta_info` carries the request's end-to-end latency.
- `server_info_route`: the server answers `/server_info` and `/model_info`; before it only
  `/get_server_info` and `/get_model_info`.

    python scripts/gen_sglang_http.py [--check] [--cache DIR]
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import release_data  # noqa: E402
from gen_sglang_conventions import DEFAULT_CACHE, list_releases_cached, version_key  # noqa: E402

OUT = REPO / "specctl" / "engines" / "sglang" / "data" / "http.json"
# feature -> (files whose text is read, what must appear in them)
FEATURES: dict[str, tuple[str, str]] = {
    "chat_meta_info": (r"sglang/srt/(entrypoints|openai_api)/.*\.py$", "return_meta_info"),
    "spec_verify_ct": (r"sglang/srt/managers/.*\.py$", '"spec_verify_ct"'),
    "e2e_latency": (r"sglang/srt/managers/.*\.py$", '"e2e_latency"'),
    # the route the server's arguments are read from: `/get_server_info` only, until `/server_info` (and
    # `/model_info`) appear; the old names stay as deprecated aliases
    "server_info_route": (r"sglang/srt/(entrypoints/http_server|server)\.py$", '"/server_info"'),
}


def features_of(wheel: Path) -> dict[str, bool]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        texts = {pattern: "".join(z.read(n).decode("utf-8", "replace") for n in names if re.search(pattern, n))
                 for pattern, _ in FEATURES.values()}
    return {name: needle in texts[pattern] for name, (pattern, needle) in FEATURES.items()}


def generate(cache: Path) -> dict[str, object]:
    releases = list_releases_cached(cache)
    first: dict[str, str | None] = dict.fromkeys(FEATURES)
    for version in releases:
        wheel = sorted(cache.glob(f"sglang-{version}-*.whl"))[0]
        for name, present in features_of(wheel).items():
            if present and first[name] is None:
                first[name] = version
            elif not present and first[name] is not None:
                raise RuntimeError(f"{name} disappears in sglang {version} (seen from {first[name]}): model it per release")
    return {"generated_by": "scripts/gen_sglang_http.py", "releases": [releases[0], releases[-1]], "since": first}


def main() -> int:
    return release_data.run(__doc__ or "", OUT, "since", generate, DEFAULT_CACHE)


if __name__ == "__main__":
    sys.exit(main())
