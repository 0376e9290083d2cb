"""The shipped sglang convention table agrees with the real code of a sample of releases.

Re-runs `scripts/gen_sglang_conventions.py` (which executes each release's extracted setters on
stubs) on sampled wheels from the cache, downloading them when missing. Without network it skips,
except under CI=true, where it fails.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from specctl.engines.sglang.capture import load_table

pytestmark = pytest.mark.conformance

REPO = Path(__file__).resolve().parents[3]
# every release where a capture path this table models changed, among others: 0.5.13 (DeepSeek's +1
# only when ids[0] == 1), 0.5.17 (DeepSeek's forward preallocates a slot per position)
SAMPLE = ("0.4.6", "0.4.9", "0.5.5", "0.5.12.post1", "0.5.13", "0.5.14", "0.5.16", "0.5.17", "0.5.23")


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_sglang_conventions", REPO / "scripts" / "gen_sglang_conventions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def cache(gen: ModuleType) -> Path:
    directory: Path = gen.DEFAULT_CACHE
    try:
        for version in SAMPLE:
            gen.download(directory, version)
    except Exception as exc:  # no network, no pip: only CI must have them
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot fetch sglang wheels into {directory}: {exc}")
        pytest.skip(f"sglang wheels not available ({exc})")
    return directory


@pytest.mark.slow
@pytest.mark.parametrize("version", SAMPLE)
def test_shipped_rows_match_the_release_code(gen: ModuleType, cache: Path, version: str) -> None:
    table = load_table()
    assert version in table.releases
    derived = gen.derive_release(cache, version, True, gen.ARCHITECTURES)
    for arch in gen.ARCHITECTURES:
        row = table.rule_for(version, arch)
        assert row is not None, arch
        b = derived[arch]
        shipped = (row.supported, row.source, row.default, row.explicit, row.max_position, row.beyond,
                   row.negative, row.embedding, row.capture_site, row.unmatched)
        real = (b.supported, b.source, b.default, b.explicit, b.max_position, b.beyond, b.negative, b.embedding,
                b.capture_site, b.unmatched)
        assert shipped == real, f"{arch} @ {version}"


def test_generator_fails_loudly_when_no_rule_fits(gen: ModuleType, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # with the deepseek rule of #25454 removed, 0.5.23's DeepseekV3 code must match no remaining rule
    from specctl.engines.sglang import capture as capture_module

    reduced = {k: v for k, v in capture_module.EXPLICIT_RULES.items() if k != "plus_one_if_first_is_one"}
    monkeypatch.setattr(gen, "EXPLICIT_RULES", reduced)
    with pytest.raises(gen.DerivationError, match="named rules reproduce"):
        gen.derive_release(cache, "0.5.23", True, ["DeepseekV3ForCausalLM"])


def test_the_http_contract_matches_the_release_code(cache: Path) -> None:
    """Chat completions honour return_meta_info from 0.5.13 on, as data/http.json says."""
    spec = importlib.util.spec_from_file_location("gen_sglang_http", REPO / "scripts" / "gen_sglang_http.py")
    assert spec is not None and spec.loader is not None
    http = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(http)
    from specctl.engines import get_engine

    for version in ("0.5.12.post1", "0.5.13", "0.5.23"):
        [wheel] = sorted(cache.glob(f"sglang-{version}-*.whl"))[:1]
        assert http.features_of(wheel)["chat_meta_info"] == get_engine("sglang").http_contract(version).chat_meta_info
