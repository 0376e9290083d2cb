"""The shipped sglang convention table agrees with the real capture path of each release.

`scripts/gen_sglang_conventions.py` runs each release's setter and then its inner model's `forward`
(compiled from the wheel at run time, driven on CPU with stand-in layers, the release's own
AuxHiddenStatePacker included; see scripts/sglang_forward_exec.py). Here, for every architecture,
on every release where its row of the table changes (and on the newest release), the executed
outcome of id lists none / in range / out of range / negative / duplicate / unsorted must be what
the table says, and re-deriving the row must reproduce it. Wheels come from the cache, downloaded
when missing; without network the tier skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from specctl.engines.sglang.capture import ConventionTable, load_table
from tests.engines.sglang.conftest import _wheels_module, locked_wheels
from tests.engines.sglang.test_flag_catalog import SAMPLE as FLAG_SAMPLE

pytestmark = pytest.mark.conformance

REPO = Path(__file__).resolve().parents[3]
LAYER_COUNTS = (32, 61)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_sglang_conventions", REPO / "scripts" / "gen_sglang_conventions.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def change_points(table: ConventionTable) -> list[tuple[str, str]]:
    """(architecture, release) pairs: the first release of every supported row, and the newest release."""
    pairs = {(row.architecture, row.first) for row in table.rows if row.supported}
    pairs |= {(arch, table.releases[-1]) for arch in table.architectures() if table.versions_supporting(arch)}
    return sorted(pairs, key=lambda p: (p[0], table.releases.index(p[1])))


def id_lists(n: int) -> dict[str, list[int] | None]:
    h = n // 2
    return {
        "none": None,
        "in range": [1, h - 1, n - 4],
        "out of range": [1, h - 1, n],
        "beyond by two": [2, h, n + 1],
        "negative": [-1, h - 1, n - 4],
        "duplicate": [1, 1, h - 1],
        "unsorted": [n - 4, 1, h - 1],
    }


SAMPLE = change_points(load_table())


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _generator()


@pytest.fixture(scope="module")
def cache_dir() -> Path:
    return locked_wheels().directory


@pytest.fixture(scope="module")
def release(gen: ModuleType, cache_dir: Path) -> Any:
    @cache
    def read(version: str) -> Any:
        return gen.read_release(gen.cached_wheel(cache_dir, version), version)

    return read


def test_the_locked_wheels_hold_every_release_the_conformance_tier_reads() -> None:
    """wheels.lock, which `make test` fetches, names every release of the sample and of the other checks."""
    locked = set(_wheels_module().read_lock())
    needed = {v for _, v in SAMPLE} | {"0.5.12.post1", "0.5.13", "0.5.23"} | set(FLAG_SAMPLE)
    assert needed <= locked, f"add {sorted(needed - locked)} to scripts/sglang-cpu/wheels.lock"


def test_the_sample_covers_every_change_of_every_architecture() -> None:
    table = load_table()
    for arch in table.architectures():
        supported = [r for r in table.rows if r.architecture == arch and r.supported]
        assert {r.first for r in supported} <= {v for a, v in SAMPLE if a == arch}, arch


@pytest.mark.slow
@pytest.mark.parametrize(("architecture", "version"), SAMPLE, ids=[f"{a}@{v}" for a, v in SAMPLE])
def test_the_table_is_what_the_release_code_does(
    gen: ModuleType, release: Any, architecture: str, version: str
) -> None:
    table = load_table()
    row = table.rule_for(version, architecture)
    assert row is not None and row.supported
    rel = release(version)
    derived = gen.derive(rel, architecture)
    assert gen.replace(derived, first=row.first, last=row.last) == row, f"{architecture} @ {version}"
    if row.method.startswith("read"):
        return  # re-deriving found the forward still undrivable on stand-ins (the reason is in `method`)
    for n in LAYER_COUNTS:
        for label, ids in id_lists(n).items():
            obs = gen.execute_ids(rel, architecture, ids, n)
            key = (n, None if ids is None else tuple(ids))
            assert gen._agrees_executed(row, key, obs), (
                f"{architecture} @ {version}, N={n}, {label} ids {ids}: table says "
                f"{gen.capture(row, ids, n)}, the release did requested={obs.requested} setter_error={obs.error} "
                f"forward={obs.executed}"
            )


def test_generator_fails_loudly_when_no_rule_fits(
    gen: ModuleType, release: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # with the deepseek rule of #25454 removed, 0.5.23's DeepseekV3 code must match no remaining rule
    from specctl.engines.sglang import capture as capture_module

    reduced = {k: v for k, v in capture_module.EXPLICIT_RULES.items() if k != "plus_one_if_first_is_one"}
    monkeypatch.setattr(gen, "EXPLICIT_RULES", reduced)
    with pytest.raises(gen.DerivationError, match="named rules reproduce"):
        gen.derive(release("0.5.23"), "DeepseekV3ForCausalLM")


def test_the_real_packer_rejects_a_duplicate(gen: ModuleType, release: Any) -> None:
    """Executed: 0.5.23's DeepSeek forward with its own AuxHiddenStatePacker, ids [1, 1, 15] (positions
    2, 2, 16): the loop fills two of three slots and finalize() raises, as the table's packer row says."""
    obs = gen.execute_ids(release("0.5.23"), "DeepseekV3ForCausalLM", [1, 1, 15], 32)
    assert obs.requested == [2, 2, 16]
    assert obs.executed.error == "RuntimeError: captured 2 of 3 aux hidden states"
    assert load_table().rule_for("0.5.23", "DeepseekV3ForCausalLM").unmatched == "error"  # type: ignore[union-attr]


def test_the_http_contract_matches_the_release_code(cache_dir: Path) -> None:
    """Chat completions honour return_meta_info from 0.5.13 on, as data/http.json says."""
    spec = importlib.util.spec_from_file_location("gen_sglang_http", REPO / "scripts" / "gen_sglang_http.py")
    assert spec is not None and spec.loader is not None
    http = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(http)
    from specctl.engines import get_engine

    for version in ("0.5.12.post1", "0.5.13", "0.5.23"):
        [wheel] = sorted(cache_dir.glob(f"sglang-{version}-*.whl"))[:1]
        assert http.features_of(wheel)["chat_meta_info"] == get_engine("sglang").http_contract(version).chat_meta_info
    for version in ("0.5.5.post1", "0.5.6"):  # either side of /server_info (only /get_server_info before it)
        [wheel] = sorted(cache_dir.glob(f"sglang-{version}-*.whl"))[:1]
        served = http.features_of(wheel)["server_info_route"]
        assert served == (get_engine("sglang").http_contract(version).server_info_path == "/server_info"), version
