"""The tune grid: the incumbent first, what the engine would rewrite, reject or not run left out
with the reason, each candidate the profile with only `speculative` replaced; the heat map's axes."""

from __future__ import annotations

from typing import Any

from specctl.engines import get_engine
from specctl.plan.candidates import candidate_profile, grid, heat_map
from specctl.profile.profile import Profile

ARCH = "LlamaForCausalLM"


def profile(
    tune: dict[str, Any] | None = None, speculative: dict[str, Any] | None = None, version: str = "0.5.23"
) -> Profile:
    data: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "metadata": {"name": "p", "version": 3},
        "target": {"model": "/models/target"},
        "drafter": {"model": "/models/drafter", "manifest": "m.yaml"},
        "speculative": speculative or {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
        "hardware": {"gpu": "h100", "gpus_per_node": 1},
        "engine": {"name": "sglang", "version": version},
    }
    if tune is not None:
        data["tune"] = tune
    return Profile.model_validate(data)


def test_the_incumbent_comes_first_and_is_not_measured_twice() -> None:
    found, dropped = grid(profile({"num_steps": [1, 3, 5]}), get_engine("sglang"), ARCH)
    assert [c.key for c in found] == ["steps=3 topk=1 draft=4", "steps=1 topk=1 draft=2", "steps=5 topk=1 draft=6"]
    assert found[0].incumbent and not dropped


def test_defaults_search_steps_one_to_five_with_topk_one() -> None:
    found, _ = grid(profile(), get_engine("sglang"), ARCH)
    assert sorted(c.speculative.num_steps or 0 for c in found) == [1, 2, 3, 4, 5]
    assert {c.speculative.eagle_topk for c in found} == {1} and not any(c.speculative.adaptive for c in found)


def test_what_the_engine_would_rewrite_or_cannot_run_is_dropped_with_the_reason() -> None:
    found, dropped = grid(
        profile({"num_steps": [2], "eagle_topk": [1, 4], "num_draft_tokens": [3, 8]}), get_engine("sglang"), ARCH
    )
    keys = {c.key for c in found}
    assert "steps=2 topk=1 draft=3" in keys and "steps=2 topk=4 draft=8" in keys
    [rewritten] = [d for d in dropped if d.key == "steps=2 topk=1 draft=8"]
    assert "rewrite" in rewritten.reason and "num_steps + 1" in rewritten.reason
    no_tokens, _ = grid(profile({"num_steps": [2], "eagle_topk": [4]}), get_engine("sglang"), ARCH)
    assert [c.key for c in no_tokens] == ["steps=3 topk=1 draft=4"]  # topk 4 needs listed draft tokens


def test_adaptive_is_dropped_where_the_engine_cannot_run_it() -> None:
    found, dropped = grid(
        profile({"num_steps": [3], "adaptive": [False, True]}, version="0.4.0"), get_engine("sglang"), ARCH
    )
    assert [c.key for c in found] == ["steps=3 topk=1 draft=4"]
    assert dropped[0].key.endswith("adaptive") and "adaptive speculation would not run" in dropped[0].reason
    ok, _ = grid(profile({"num_steps": [3], "adaptive": [False, True]}), get_engine("sglang"), ARCH)
    assert [c.key for c in ok] == ["steps=3 topk=1 draft=4", "steps=3 topk=1 draft=4 adaptive"]


def test_a_candidate_is_the_profile_with_only_speculative_replaced() -> None:
    p = profile({"num_steps": [5]})
    [_, five], _ = grid(p, get_engine("sglang"), ARCH)
    copy = candidate_profile(p, five, "RUN-1")
    assert copy.speculative.num_steps == 5 and copy.metadata.name == p.metadata.name and copy.metadata.version == 3
    assert "RUN-1" in copy.metadata.description
    assert copy.model_dump(exclude={"speculative", "metadata"}) == p.model_dump(exclude={"speculative", "metadata"})


def test_the_tune_section_is_not_part_of_what_is_served() -> None:
    assert profile({"num_steps": [5]}).model_dump() == profile().model_dump()


def test_the_heat_map_puts_steps_down_and_the_varying_setting_across() -> None:
    rows = [
        {"speculative": {"num_steps": s, "eagle_topk": 1, "num_draft_tokens": s + 1, "adaptive": a}, "estimate": e}
        for s, a, e in ((1, False, 400.0), (3, False, 600.0), (3, True, 550.0), (5, True, None))
    ]
    heat = heat_map(rows)
    assert heat["columns"] == "adaptive" and heat["row_values"] == [1, 3, 5] and heat["column_values"] == [False, True]
    assert heat["cells"] == [[400.0, None], [600.0, 550.0], [None, None]]


def test_draft_tokens_that_follow_the_steps_are_no_axis() -> None:
    rows = [
        {
            "speculative": {"num_steps": s, "eagle_topk": 1, "num_draft_tokens": s + 1, "adaptive": False},
            "estimate": 100.0 * s,
        }
        for s in (1, 2)
    ]
    heat = heat_map(rows)
    assert heat["columns"] == "eagle_topk" and heat["cells"] == [[100.0], [200.0]]
