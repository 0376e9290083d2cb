"""Drafter configs the engine would not read as their authors meant: formats and classes sglang
cannot load as EAGLE-3 drafters, and ids that are not plain integers. The published configs come
from tests/data/reference/eagle3-configs (byte-exact copies of public files); the conformance test
asks the real sglang 0.5.23 (its config loader and model registry) the same questions."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specctl.engines import get_engine
from specctl.engines.sglang.engine import _eagle3_since
from tests.engines.sglang.conftest import Wheels, script

SGLANG = get_engine("sglang")
PUBLISHED = Path(__file__).resolve().parents[2] / "data" / "reference" / "eagle3-configs"
SPECULATORS = {
    "architectures": ["Eagle3Speculator"],
    "speculators_config": {"algorithm": "eagle3"},
    "transformer_layer_config": {"hidden_size": 64},
}


def published() -> dict[str, dict[str, Any]]:
    configs = {p.name: json.loads(p.read_text()) for p in sorted(PUBLISHED.glob("*.json"))}
    assert len(configs) >= 9, f"the published configs are missing from {PUBLISHED}"
    return configs


def codes(version: str, config: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(p.code, p.error) for p in SGLANG.drafter_problems(version, "EAGLE3", config)]


def test_every_published_sglang_layout_loads_and_safeailabs_plain_llama_class_does_not() -> None:
    for name, config in published().items():
        found = codes("0.5.23", config)
        if config["architectures"] == ["LlamaForCausalLM"]:  # SafeAILab's EAGLE-3 training config
            assert found == [("drafter-format", True)], name
            [problem] = SGLANG.drafter_problems("0.5.23", "EAGLE3", config)
            assert "LlamaForCausalLMEagle3" in problem.fix and "plain model class" in problem.message
        else:
            assert found == [], (name, found)


def test_a_drafter_class_newer_than_the_pinned_release_names_the_release_that_has_it() -> None:
    config = published()["torchspec__kimi_k25_eagle3_mla.json"]
    assert codes("0.5.12", config) == []
    [problem] = SGLANG.drafter_problems("0.5.11", "EAGLE3", config)
    assert problem.code == "drafter-format" and "0.5.12" in problem.message and "0.5.12" in problem.fix


def test_the_speculators_format_is_refused_with_how_to_serve_it() -> None:
    [problem] = SGLANG.drafter_problems("0.5.23", "EAGLE3", SPECULATORS)
    assert problem.code == "drafter-format" and problem.error
    assert "speculators" in problem.message and "model_type" in problem.message and "vLLM" in problem.fix


def test_other_algorithms_are_not_judged_by_eagle3_rules() -> None:
    assert SGLANG.drafter_problems("0.5.23", "EAGLE", SPECULATORS) == []


@pytest.mark.parametrize(
    ("ids", "read", "error"),
    [
        ([True, 15, 28], [1, 15, 28], False),  # a bool is a number to sglang: true + 1 == 2
        (
            [1.0, 15, 28],
            [1, 15, 28],
            True,
        ),  # a whole float: an int where code adds and compares, a TypeError where it indexes
        ([1.5, 15, 28], None, True),  # no layer index equals it
        (["1", 15, 28], None, True),  # "1" + 1: TypeError at start-up
        ("1,15,28", None, True),
        ([1, 15, 28], [1, 15, 28], None),  # plain integers: nothing to say
    ],
)
def test_ids_that_are_not_plain_integers_are_read_as_sglang_reads_them(
    ids: Any, read: list[int] | None, error: bool | None
) -> None:
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
    }
    assert SGLANG.drafter_ids(config) == read
    found = [(p.code, p.error) for p in SGLANG.drafter_problems("0.5.23", "EAGLE3", config)]
    assert found == ([] if error is None else [("drafter-ids-type", error)])


# what the real sglang does with each config: its config loader, then its model registry
ASK = r"""
import json, sys, tempfile, os, warnings
warnings.simplefilter("ignore")
from sglang.srt.utils.hf_transformers_utils import get_config
from sglang.srt.models.registry import ModelRegistry
out = {"eagle3_classes": sorted(a for a in ModelRegistry.get_supported_archs() if "eagle3" in a.lower()), "configs": {}}
for name, config in json.load(sys.stdin).items():
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
        try:
            archs = get_config(d, trust_remote_code=False).architectures
            out["configs"][name] = {"class": ModelRegistry.resolve_model_cls(archs)[0].__name__}
        except Exception as exc:
            out["configs"][name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
print(json.dumps(out))
"""


@pytest.mark.conformance
def test_the_real_sglang_agrees(sglang_python: str) -> None:
    configs = {**published(), "speculators": SPECULATORS}
    done = subprocess.run(
        [sglang_python, "-c", ASK],
        input=json.dumps(configs),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["eagle3_classes"] == sorted(n for n, first in _eagle3_since().items())  # all registered by 0.5.23
    for name, config in configs.items():
        real = answer["configs"][name]
        refused = bool(codes("0.5.23", config))
        loads_as_drafter = "class" in real and "eagle3" in real["class"].lower()
        assert refused == (not loads_as_drafter), (name, real)
    assert "model_type" in answer["configs"]["speculators"]["error"]


@pytest.mark.conformance
def test_the_shipped_drafter_classes_are_what_every_cached_release_registers(cached_wheels: Wheels) -> None:
    gen = script("gen_sglang_drafters")
    for version in cached_wheels.releases:  # per release: a cache of the conformance sample still checks
        expected = {name for name, first in _eagle3_since().items() if cached_wheels.newer(version, first)}
        assert gen.eagle3_classes(cached_wheels.wheel(version)) == expected, version
