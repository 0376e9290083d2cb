"""Unit tests of the sglang capture-convention rules, capture(), ids_for() and the shipped table."""

from __future__ import annotations

import dataclasses

import pytest

from specctl.engines.sglang.capture import (
    EXPLICIT_RULES,
    CaptureRule,
    ConventionTable,
    capture,
    evaluate_formula,
    ids_for,
    load_table,
)

DEFAULT = ("2", "N//2", "N-3")


def rule(explicit: str = "plus_one", **changes: object) -> CaptureRule:
    base = CaptureRule(
        "X",
        "1.0.0",
        "1.0.0",
        "x.py:X.set_eagle3_layers_to_capture",
        True,
        DEFAULT,
        explicit,
        "N-1",
        "dropped",
        "dropped",
        "captured",
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


LOOP = rule()
MARKED = rule(beyond="error", negative="wrap")
DEEPSEEK_NEW = rule("plus_one_if_first_is_one")
GPT_OSS_NEW = rule("plus_one_unless_max_is_n", max_position="N")


# --- formulas --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("formula", "n", "value"),
    [
        ("2", 61, 2),
        ("N//2", 61, 30),
        ("N-3", 61, 58),
        ("N-1", 32, 31),
        ("N//2-1", 32, 15),
        ("(N+1)//2", 5, 3),
        ("-1", 8, -1),
        ("N - 4", 94, 90),
    ],
)
def test_formula_values(formula: str, n: int, value: int) -> None:
    assert evaluate_formula(formula, n) == value


@pytest.mark.parametrize("formula", ["__import__('os')", "N*2", "N//", "", "2 3", "(N"])
def test_formula_refuses_anything_else(formula: str) -> None:
    with pytest.raises(ValueError):
        evaluate_formula(formula, 8)


# --- named rules ------------------------------------------------------------------------------------


def test_rules_on_the_specforge_default() -> None:
    ids, n, default = [1, 29, 57], 61, [2, 30, 58]
    assert EXPLICIT_RULES["plus_one"](ids, n, default) == [2, 30, 58]
    assert EXPLICIT_RULES["plus_one_if_first_is_one"](ids, n, default) == [2, 30, 58]
    assert EXPLICIT_RULES["plus_one_if_first_is_one"]([2, 30, 58], n, default) == [2, 30, 58]
    assert EXPLICIT_RULES["plus_one_if_first_is_one"]([0, 30, 58], n, default) == [0, 30, 58]
    assert EXPLICIT_RULES["plus_one_if_first_is_one"]([30, 1, 58], n, default) == [30, 1, 58]
    assert EXPLICIT_RULES["plus_one_unless_max_is_n"]([1, 17, 36], 36, default) == [1, 17, 36]
    assert EXPLICIT_RULES["plus_one_unless_max_is_n"]([1, 17, 35], 36, default) == [2, 18, 36]
    assert EXPLICIT_RULES["ignores_ids"]([7, 8], 32, [2, 16, 29]) == [2, 16, 29]
    assert EXPLICIT_RULES["plus_one_if_first_is_one"]([], n, default) == []


# --- capture() ---------------------------------------------------------------------------------------


def test_default_when_ids_absent() -> None:
    out = capture(LOOP, None, 32)
    assert out.ids is None
    assert out.requested == (2, 16, 29) and out.captured == (2, 16, 29) and out.error is None


def test_unsorted_and_duplicate_ids_collapse_in_ascending_order_and_the_duplicate_is_said() -> None:
    out = capture(LOOP, [28, 1, 1, 15], 32)
    assert out.requested == (29, 2, 2, 16)
    assert out.captured == (2, 16, 29)
    assert [p for p, _ in out.dropped] == [2] and "requested twice" in out.dropped[0][1]


def test_a_packer_forward_fails_at_start_up_on_what_a_loop_would_drop() -> None:
    """DeepSeek/Kimi from sglang 0.5.17 preallocate one slot per requested position and finalize()
    requires all filled: a position matching no layer, or one requested twice, stops the server."""
    packer = dataclasses.replace(LOOP, unmatched="error")
    for ids in ([-2, 15, 20], [1, 1, 15], [1, 15, 31]):
        out = capture(packer, ids, 32)
        assert out.error is not None and "captured 2 of 3 aux hidden states" in out.error and out.captured == ()
    assert capture(packer, [1, 15, 20], 32).error is None


def test_the_seeds_ids_on_kimi_crash_from_0_5_17_and_are_dropped_before() -> None:
    table = load_table()
    seed = [-1, 2, 30]
    before = capture(table.rule_for("0.5.16", "KimiK25ForConditionalGeneration"), seed, 61)  # type: ignore[arg-type]
    assert before.error is None and [p for p, _ in before.dropped] == [-1]
    for version in ("0.5.17", "0.5.20", "0.5.23"):
        rule = table.rule_for(version, "KimiK25ForConditionalGeneration")
        assert rule is not None and rule.unmatched == "error"
        assert "captured 2 of 3" in (capture(rule, seed, 61).error or "")
    for architecture in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM"):
        rule = table.rule_for("0.5.23", architecture)
        assert rule is not None and "captured 2 of 3" in (capture(rule, [2, 2, 30], 61).error or "")
    llama = table.rule_for("0.5.23", "LlamaForCausalLM")
    assert llama is not None and llama.unmatched is None and capture(llama, [1, 1, 15], 32).error is None


def test_loop_model_drops_beyond_and_negative() -> None:
    out = capture(LOOP, [-2, 15, 31], 32)  # positions -1, 16, 32
    assert out.captured == (16,)
    assert [p for p, _ in out.dropped] == [-1, 32]
    assert "negative" in out.dropped[0][1] and "31" in out.dropped[1][1]
    assert out.error is None


def test_marked_model_raises_beyond_and_wraps_negative() -> None:
    err = capture(MARKED, [1, 15, 31], 32)
    assert err.error is not None and err.error.startswith("IndexError") and err.captured == ()
    wrap = capture(MARKED, [-2, 15], 32)  # position -1 flags layers[-1], the input of layer 31
    assert wrap.captured == (16, 31) and wrap.remapped == ((-1, 31),) and wrap.dropped == ()


def test_embedding_position_crashes_where_the_loop_adds_a_none_residual() -> None:
    assert capture(LOOP, [-1, 15], 32).captured == (0, 16)
    crash = capture(rule(embedding="error"), [-1, 15], 32)
    assert crash.error is not None and crash.error.startswith("TypeError")


def test_gpt_oss_captures_the_final_boundary() -> None:
    assert capture(GPT_OSS_NEW, [1, 17, 36], 36).captured == (1, 17, 36)
    assert capture(GPT_OSS_NEW, [1, 17, 35], 36).captured == (2, 18, 36)
    assert capture(GPT_OSS_NEW, [1, 17, 37], 36).dropped == ((38, "beyond the last capturable position 36"),)


def test_unsupported_rule_is_an_error() -> None:
    out = capture(rule(supported=False, explicit=None), [1, 2, 3], 32)
    assert out.error is not None and "not supported" in out.error and out.captured == ()


# --- ids_for() -----------------------------------------------------------------------------------------


def test_ids_for_prefers_output_of_layer_style() -> None:
    assert ids_for(LOOP, [2, 16, 29], 32) == [1, 15, 28]
    assert ids_for(DEEPSEEK_NEW, [2, 30, 58], 61) == [1, 29, 57]
    assert ids_for(DEEPSEEK_NEW, [3, 31, 59], 61) == [3, 31, 59]


def test_ids_for_uses_order_when_the_rule_looks_at_the_first_id() -> None:
    # position 1 cannot be written first under the new deepseek rule (id 1 turns on +1): reorder instead
    ids = ids_for(DEEPSEEK_NEW, [1, 5, 9], 61)
    assert ids is not None and ids[0] != 1
    assert capture(DEEPSEEK_NEW, ids, 61).captured == (1, 5, 9)


def test_ids_for_round_trips() -> None:
    for r in (LOOP, MARKED, DEEPSEEK_NEW, GPT_OSS_NEW):
        for positions in ([2, 16, 29], [1, 2, 3], [5], [3, 20, 31]):
            ids = ids_for(r, positions, 32)
            assert ids is not None, (r.explicit, positions)
            out = capture(r, ids, 32)
            assert out.captured == tuple(positions) and not out.dropped and out.error is None


def test_ids_for_returns_none_when_nothing_can_express_the_positions() -> None:
    assert ids_for(LOOP, [16, 32], 32) is None  # position N on a loop model
    assert ids_for(MARKED, [16, 32], 32) is None
    assert ids_for(rule(embedding="error"), [0, 16], 32) is None  # embedding where it crashes
    assert ids_for(rule("ignores_ids"), [3, 16, 29], 32) is None  # only the default is reachable
    assert ids_for(rule("ignores_ids"), [2, 16, 29], 32) is not None
    assert ids_for(rule(supported=False), [2], 32) is None
    # under the new deepseek rule position 0 is reachable only as raw id 0, and never next to id 1
    assert ids_for(DEEPSEEK_NEW, [0, 30, 58], 61) == [0, 30, 58]


# --- the shipped table: the truths ------------------------------------------------------------


@pytest.fixture(scope="module")
def table() -> ConventionTable:
    return load_table()


def _rule(table: ConventionTable, version: str, arch: str) -> CaptureRule:
    found = table.rule_for(version, arch)
    assert found is not None, (version, arch)
    return found


def test_kimi_k2_and_k25_under_0_5_23(table: ConventionTable) -> None:
    for arch in ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"):
        r = _rule(table, "0.5.23", arch)
        assert r.explicit == "plus_one_if_first_is_one"
        assert capture(r, [2, 30, 58], 61).captured == (2, 30, 58)  # outputs of layers 1, 29, 57
        assert capture(r, [1, 29, 57], 61).captured == (2, 30, 58)
        assert ids_for(r, [3, 31, 59], 61) == [3, 31, 59]


def test_llama_under_0_5_23_adds_one_everywhere(table: ConventionTable) -> None:
    r = _rule(table, "0.5.23", "LlamaForCausalLM")
    assert capture(r, [2, 30, 58], 80).captured == (3, 31, 59)  # outputs of layers 2, 30, 58: no overlay
    assert capture(r, None, 32).captured == (2, 16, 29)
    assert capture(r, [1, 15, 31], 32).captured == (2, 16)  # last layer silently dropped
    assert ids_for(r, [2, 16, 32], 32) is None


def test_qwen_moe_raises_on_the_last_layer(table: ConventionTable) -> None:
    for arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        out = capture(_rule(table, "0.5.23", arch), [1, 46, 93], 94)
        assert out.error is not None and out.error.startswith("IndexError")


def test_deepseek_added_one_unconditionally_before_the_change(table: ConventionTable) -> None:
    r = _rule(table, "0.5.10", "DeepseekV3ForCausalLM")
    assert r.explicit == "plus_one"
    assert capture(r, [2, 30, 58], 61).captured == (3, 31, 59)


def test_gpt_oss_0_5_23_reaches_the_final_boundary(table: ConventionTable) -> None:
    r = _rule(table, "0.5.23", "GptOssForCausalLM")
    assert capture(r, [1, 17, 36], 36).captured == (1, 17, 36)
    assert ids_for(r, [2, 18, 36], 36) == [1, 17, 35]


def test_table_lookup_distinguishes_unknown_version_and_architecture(table: ConventionTable) -> None:
    assert table.releases[0] == "0.4.0" and "0.5.23" in table.releases
    assert table.covers_version("0.5.23") and table.covers_version("v0.5.23")
    assert not table.covers_version("0.3.6") and not table.covers_version("9.9.9")
    assert table.rule_for("9.9.9", "LlamaForCausalLM") is None
    assert table.rule_for("0.5.23", "NoSuchForCausalLM") is None
    assert "NoSuchForCausalLM" not in table.architectures()
    assert not _rule(table, "0.4.0", "LlamaForCausalLM").supported
    supporting = table.versions_supporting("KimiK25ForConditionalGeneration")
    assert supporting and supporting[-1] == "0.5.23" and "0.4.9" not in supporting


def test_table_rows_tile_the_releases_without_gaps(table: ConventionTable) -> None:
    index = {v: i for i, v in enumerate(table.releases)}
    for arch in table.architectures():
        rows = sorted((r for r in table.rows if r.architecture == arch), key=lambda r: index[r.first])
        assert index[rows[0].first] == 0 and index[rows[-1].last] == len(table.releases) - 1
        for before, after in zip(rows, rows[1:], strict=False):
            assert index[after.first] == index[before.last] + 1
        for r in rows:
            if r.supported:
                assert r.explicit in EXPLICIT_RULES and r.default and r.max_position in ("N-1", "N")


def test_the_http_contract_per_version() -> None:
    """From data/http.json (scripts/gen_sglang_http.py reads every release's code): chat completions
    return meta_info from 0.5.13; before that only the native /generate does."""
    from specctl.engines import get_engine

    sglang = get_engine("sglang")
    old, new = sglang.http_contract("0.5.12.post1"), sglang.http_contract("0.5.23")
    assert not old.chat_meta_info and old.spec_counters and old.e2e_latency
    assert new.chat_meta_info and new.spec_counters
    assert not sglang.http_contract("0.4.1").spec_counters  # spec_verify_ct from 0.4.2
    assert sglang.http_contract("0.6.0").chat_meta_info  # newer than the table: the newest contract
    assert sglang.http_contract("0.5.5.post3").server_info_path == "/get_server_info"  # /server_info from 0.5.6
    assert sglang.http_contract("0.5.6").server_info_path == "/server_info"
