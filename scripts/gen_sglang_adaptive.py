#!/usr/bin/env python3
"""Generate what adaptive speculation is in each sglang release, from every release's code.

sglang can change `speculative_num_steps` at run time from the acceptance it observes, per
batch-size tier (`--speculative-adaptive`, `--speculative-adaptive-config FILE`,
`sglang/srt/speculative/adaptive_spec_params.py`). Where the server arguments rule it out,
sglang logs a warning and silently serves static parameters. For each cached wheel (read as a
zip) this script reads, with `ast`:

- whether the release has the module and the flag;
- the built-in settings: `DEFAULT_ADAPTIVE_CONFIG`, tiers by batch size (candidate steps and
  knobs), or in the first releases one set for every batch size (the `candidate_steps` default of
  `cfg.get`), written as the tier "1" with `"tiers": false`;
- `adaptive_unsupported_reason`: the algorithms it allows, whether it requires eagle_topk 1,
  the server arguments (`enable_*`) that rule it out and those it needs (`disable_*`: the first
  releases need the overlap scheduler off);

and writes the releases grouped where nothing changed to
`specctl/engines/sglang/data/adaptive.json`.

    python scripts/gen_sglang_adaptive.py [--check] [--cache DIR]
"""

from __future__ import annotations

import ast
import sys
import zipfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import release_data  # noqa: E402
from gen_sglang_conventions import DEFAULT_CACHE, list_releases_cached  # noqa: E402

OUT = REPO / "specctl" / "engines" / "sglang" / "data" / "adaptive.json"
MODULE = "sglang/srt/speculative/adaptive_spec_params.py"


def adaptive_of(wheel: Path) -> dict[str, Any] | None:
    """What one release's adaptive speculation is, or None when it has none."""
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        if MODULE not in names:
            return None
        has_flag = any("speculative_adaptive" in z.read(n).decode("utf-8", "replace") for n in names
                       if n.endswith("server_args.py") or n.startswith("sglang/srt/arg_groups/"))
        tree = ast.parse(z.read(MODULE).decode("utf-8"))
    if not has_flag:
        return None
    defaults = None
    refuses: dict[str, Any] = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "DEFAULT_ADAPTIVE_CONFIG" and node.value is not None:
            defaults = ast.literal_eval(node.value)
        if isinstance(node, ast.FunctionDef) and node.name == "adaptive_unsupported_reason":
            refuses = _refusals(node)
    tiers = defaults is not None
    if defaults is None:
        steps = next((ast.literal_eval(node.args[1]) for node in ast.walk(tree) if isinstance(node, ast.Call)
                      and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and len(node.args) == 2
                      and isinstance(node.args[0], ast.Constant) and node.args[0].value == "candidate_steps"), None)
        if steps is None:
            raise RuntimeError(f"{wheel.name}: neither DEFAULT_ADAPTIVE_CONFIG nor a candidate_steps default in {MODULE}: model it")
        defaults = {"1": {"candidate_steps": steps}}
    return {"defaults": defaults, "tiers": tiers, **refuses}


def _refusals(fn: ast.FunctionDef) -> dict[str, Any]:
    """The conditions under which the release turns adaptive off: read from the function's tests."""
    algorithms: list[str] = []
    flags: set[str] = set()
    needs: set[str] = set()
    topk_one = False
    platform = False
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.NotIn) for op in node.ops):
            for comparator in node.comparators:
                if isinstance(comparator, (ast.Tuple, ast.List, ast.Set)):
                    algorithms = [e.value for e in comparator.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("enable_"):
                flags.add(node.attr)
            if node.attr.startswith("disable_"):
                needs.add(node.attr)
            if node.attr == "speculative_eagle_topk":
                topk_one = True
            if node.attr == "get_platform_worker_cls":
                platform = True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "attn_dp_enabled_of":
            flags.add("enable_dp_attention")
    if not algorithms:
        raise RuntimeError("adaptive_unsupported_reason names no algorithms: model it")
    return {"algorithms": algorithms, "topk_one": topk_one, "flags": sorted(flags), "needs": sorted(needs),
            "platform_workers": platform}


def generate(cache: Path) -> dict[str, Any]:
    releases = list_releases_cached(cache)
    rows: list[dict[str, Any]] = []
    since = None
    for version in releases:
        found = adaptive_of(sorted(cache.glob(f"sglang-{version}-*.whl"))[0])
        if found is None:
            if since is not None:
                raise RuntimeError(f"adaptive speculation disappears in sglang {version}: model it per release")
            continue
        since = since or version
        if not rows or {k: v for k, v in rows[-1].items() if k != "from"} != found:
            rows.append({"from": version, **found})
    return {"generated_by": "scripts/gen_sglang_adaptive.py", "releases": [releases[0], releases[-1]],
            "adaptive": {"since": since, "rows": rows}}


def main() -> int:
    return release_data.run(__doc__ or "", OUT, "adaptive", generate, DEFAULT_CACHE)


if __name__ == "__main__":
    sys.exit(main())
