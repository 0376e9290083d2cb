"""engines/sglang/metrics.py, release by release (its names, types and HELP texts are checked against the
sampled wheels in test_metrics_conformance.py), and the reference engine's exporter written from it
(engines/reference/metrics.py, pure: no torch, no server; the served /metrics is in
tests/engines/reference/test_metrics.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specctl.engines.reference.metrics import Exporter, Step, go_float
from specctl.engines.sglang import metrics
from specctl.engines.sglang.metrics import accept_rate, help_text, metric_names, spec_metrics

LENGTH, RATE = "sglang:spec_accept_length", "sglang:spec_accept_rate"


def test_spec_metrics_name_what_each_release_has() -> None:
    old, mid, new = spec_metrics("0.4.9"), spec_metrics("0.5.9"), spec_metrics("0.5.23")
    assert old.accept_length == mid.accept_length == new.accept_length == LENGTH
    assert old.generation_tokens == new.generation_tokens == "sglang:generation_tokens_total"
    assert old.requests == new.requests == "sglang:num_requests_total"
    assert (old.accept_rate, spec_metrics("0.5.2").accept_rate, spec_metrics("0.5.4.post2").accept_rate) == (
        None,
        None,
        RATE,
    )
    assert (mid.verify_calls, spec_metrics("0.5.12.post1").verify_calls) == (None, None)
    assert spec_metrics("0.5.13").verify_calls == new.verify_calls == "sglang:spec_verify_calls_total"
    assert (spec_metrics("0.5.6").decode_tokens, mid.decode_tokens) == (None, "sglang:realtime_tokens_total")
    assert new.decode_mode == ("mode", "decode")
    assert (spec_metrics("0.5.12.post1").num_steps, spec_metrics("0.5.13").num_steps) == (None, "sglang:spec_num_steps")
    assert (spec_metrics("0.5.14").is_streaming, spec_metrics("0.5.17").is_streaming) == (False, True)
    assert (spec_metrics("0.5.2").counts_prefill, spec_metrics("0.5.4.post2").counts_prefill) == (True, False)
    assert new.decode_log_interval == 40


def test_label_names_grow_with_the_releases() -> None:
    assert spec_metrics("0.4.9").scheduler_labels == ("model_name", "engine_type")
    assert spec_metrics("0.5.1").scheduler_labels == ("model_name", "engine_type", "tp_rank", "pp_rank")
    assert spec_metrics("0.5.9").scheduler_labels[-1] == "moe_ep_rank"
    assert spec_metrics("0.5.10").tokenizer_labels == ("model_name",)
    assert spec_metrics("0.5.11").tokenizer_labels == ("model_name", "engine_type")
    assert metrics.label_values("0.5.23", "scheduler", "m") == {
        "model_name": "m",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }


def test_a_release_newer_than_the_table_is_read_as_the_newest() -> None:
    assert spec_metrics("0.9.0") == replace(spec_metrics("0.5.23"), version="0.9.0")
    assert metric_names("0.9.0") == metric_names("0.5.23")


def test_help_texts_change_at_0_5_11() -> None:
    assert help_text(LENGTH, "0.5.10") == "The average acceptance length of speculative decoding."
    assert help_text(LENGTH, "0.5.11").startswith("Mean acceptance length of speculative decoding (accepted drafts")
    assert "accepted tokens / total draft tokens" in help_text(RATE, "0.5.10")
    assert "accepted drafts / proposed drafts" in help_text(RATE, "0.5.23")


def test_accept_rate_follows_each_releases_formula() -> None:
    # 40 verifies of 3 drafts each, 100 drafts accepted: numerator 140 (bonus tokens included)
    assert accept_rate("0.5.4.post2", 140, 40, num_steps=3, num_draft_tokens=4) == pytest.approx(140 / 160)
    assert accept_rate("0.5.5.post1", 140, 40, num_steps=3, num_draft_tokens=8) == pytest.approx(140 / 160)
    assert accept_rate("0.5.6", 140, 40, num_steps=3, num_draft_tokens=8) == pytest.approx(140 / 320)
    assert accept_rate("0.5.10", 140, 40, num_steps=3, num_draft_tokens=0) == pytest.approx(140 / 160)
    assert accept_rate("0.5.11", 140, 40, num_steps=3, num_draft_tokens=4) == pytest.approx(100 / 120)
    assert accept_rate("0.5.23", 140, 40, num_steps=5, num_draft_tokens=0) == pytest.approx(100 / 200)
    assert accept_rate("0.5.23", 0, 0, num_steps=3, num_draft_tokens=4) == 0.0


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0.0"),
        (3, "3.0"),
        (3.5, "3.5"),
        (12345, "12345.0"),
        (999999, "999999.0"),
        (1e6, "1e+06"),
        (1234567, "1.234567e+06"),
        (123456789, "1.23456789e+08"),
        (1e-05, "1e-05"),
        (float("nan"), "NaN"),
        (float("inf"), "+Inf"),
    ],
)
def test_values_are_written_as_prometheus_client_writes_them(value: float, text: str) -> None:
    assert go_float(value) == text


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def decode(accepted: int, batch: int = 1, steps: int = 3, waiting: int = 0) -> Step:
    return Step("decode", batch, accepted + batch, batch, waiting, accepted, steps)


def samples(text: str) -> dict[str, float]:
    """Sample lines by their name and labels as written."""
    lines = [line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#")]
    return {key: float(value) for key, value in lines}


def test_the_exposition_of_0_5_23_after_one_interval() -> None:
    clock = Clock()
    exporter = Exporter("0.5.23", "tiny", speculative=True, num_steps=3, num_draft_tokens=4, clock=clock)
    assert exporter.render() == ""  # nothing is written before the first step, as in multiprocess mode
    exporter.step(Step("prefill", 1, 12, 0, 0))
    for accepted in [3, 2, 1, 0] * 10:  # 40 decode batches: 60 drafts + 40 bonus tokens
        exporter.step(decode(accepted))
    clock.now += 2.0
    exporter.step(decode(3))  # the 41st counts toward the next interval
    exporter.finished(12, 101, 40, streaming=False)
    ranks = 'model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    scheduler = f'engine_type="unified",{ranks}'
    assert exporter.render() == (
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        f"sglang:num_running_reqs{{{scheduler}}} 1.0\n"
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
        "# TYPE sglang:num_queue_reqs gauge\n"
        f"sglang:num_queue_reqs{{{scheduler}}} 0.0\n"
        "# HELP sglang:gen_throughput The generation throughput (token/s).\n"
        "# TYPE sglang:gen_throughput gauge\n"
        f"sglang:gen_throughput{{{scheduler}}} 0.0\n"  # the clock did not move during the interval
        "# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding "
        "(accepted drafts + bonus token per forward).\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        f"sglang:spec_accept_length{{{scheduler}}} 2.5\n"
        "# HELP sglang:spec_accept_rate Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).\n"
        "# TYPE sglang:spec_accept_rate gauge\n"
        f"sglang:spec_accept_rate{{{scheduler}}} 0.5\n"
        "# HELP sglang:spec_cap_length Mean DSpark confidence-scheduled verify window per verify step, incl the "
        "bonus slot (0 when no cap is scheduled).\n"
        "# TYPE sglang:spec_cap_length gauge\n"
        f"sglang:spec_cap_length{{{scheduler}}} 0.0\n"
        "# HELP sglang:spec_block_accept_length Mean uncapped full-block accept length per verify step "
        "(accept + cap-trimmed drafts; exact only in DSpark cap-accept mode).\n"
        "# TYPE sglang:spec_block_accept_length gauge\n"
        f"sglang:spec_block_accept_length{{{scheduler}}} 0.0\n"
        "# HELP sglang:spec_num_steps Currently active speculative_num_steps.\n"
        "# TYPE sglang:spec_num_steps gauge\n"
        f"sglang:spec_num_steps{{{scheduler}}} 3.0\n"
        "# HELP sglang:spec_num_draft_tokens Currently active speculative_num_draft_tokens "
        "(decouples from steps under topk>1).\n"
        "# TYPE sglang:spec_num_draft_tokens gauge\n"
        f"sglang:spec_num_draft_tokens{{{scheduler}}} 4.0\n"
        "# HELP sglang:realtime_tokens_total Total number of tokens processed (updated on each log interval). "
        "mode: prefill_compute, prefill_cache, decode.\n"
        "# TYPE sglang:realtime_tokens_total counter\n"
        f'sglang:realtime_tokens_total{{engine_type="unified",mode="prefill_compute",{ranks}}} 12.0\n'
        f'sglang:realtime_tokens_total{{engine_type="unified",mode="decode",{ranks}}} 104.0\n'
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE sglang:prompt_tokens_total counter\n"
        'sglang:prompt_tokens_total{engine_type="unified",is_streaming="false",model_name="tiny"} 12.0\n'
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
        "# TYPE sglang:generation_tokens_total counter\n"
        'sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="tiny"} 101.0\n'
        "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.\n"
        "# TYPE sglang:spec_verify_calls_total counter\n"
        'sglang:spec_verify_calls_total{engine_type="unified",model_name="tiny"} 40.0\n'
        "# HELP sglang:num_requests_total Number of requests processed.\n"
        "# TYPE sglang:num_requests_total counter\n"
        'sglang:num_requests_total{engine_type="unified",is_streaming="false",model_name="tiny"} 1.0\n'
    )


def test_the_gauge_covers_the_last_interval_and_holds_until_the_next() -> None:
    clock = Clock()
    exporter = Exporter("0.5.13", "m", speculative=True, num_steps=3, num_draft_tokens=4, clock=clock)
    exporter.step(Step("prefill", 2, 20, 0, 0))
    key = 'sglang:spec_accept_length{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
    assert samples(exporter.render())[key] == 0.0  # created by the prefill, before any decode log
    for _ in range(40):
        exporter.step(decode(6, batch=2))  # 2 requests, 3 drafts each accepted
    assert samples(exporter.render())[key] == 4.0
    clock.now += 10
    for _ in range(39):
        exporter.step(decode(0, batch=2))
    exporter.step(Step("prefill", 1, 5, 2, 0))  # a prefill republishes, unchanged
    assert samples(exporter.render(idle=True))[key] == 4.0
    exporter.step(decode(2, batch=2))  # the 80th: (2 + 80) / 80
    shown = samples(exporter.render())
    assert shown[key] == pytest.approx(82 / 80)
    assert shown[key.replace("accept_length", "accept_rate")] == pytest.approx(2 / 240)
    assert shown[key.replace("spec_accept_length", "gen_throughput")] == pytest.approx(82 / 10)
    assert 'is_streaming="' not in exporter.render()  # before 0.5.17


def test_idle_for_30_s_zeroes_running_and_throughput_but_keeps_the_accept_length() -> None:
    clock = Clock()
    exporter = Exporter("0.5.23", "m", speculative=True, num_steps=3, num_draft_tokens=4, clock=clock)
    exporter.step(Step("prefill", 1, 4, 0, 0))
    for _ in range(40):
        clock.now += 0.01
        exporter.step(decode(3))
    before = {k.split("{")[0]: v for k, v in samples(exporter.render(idle=True)).items()}
    assert before["sglang:num_running_reqs"] == 1 and before["sglang:gen_throughput"] > 0
    clock.now += 31
    busy = {k.split("{")[0]: v for k, v in samples(exporter.render(idle=False)).items()}
    assert busy["sglang:num_running_reqs"] == 1  # requests running or queued: no idle publication
    after = {k.split("{")[0]: v for k, v in samples(exporter.render(idle=True)).items()}
    assert after["sglang:num_running_reqs"] == after["sglang:gen_throughput"] == 0.0
    assert after[LENGTH] == before[LENGTH] == 4.0


def test_up_to_0_5_2_prefills_count_in_the_accept_length() -> None:
    exporter = Exporter("0.5.2", "m", speculative=True, num_steps=3, num_draft_tokens=4, clock=Clock())
    exporter.step(Step("prefill", 4, 40, 0, 0))  # 4 requests: 4/4
    for _ in range(40):
        exporter.step(decode(3))  # 40 x 4/1
    text = exporter.render()
    assert samples(text)[f'{LENGTH}{{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"}}'] == 164 / 44
    assert "spec_accept_rate" not in text and "realtime_tokens" not in text and "verify_calls" not in text


def test_0_4_9_labels_and_names() -> None:
    exporter = Exporter("0.4.9", "m", speculative=True, num_steps=3, num_draft_tokens=4, clock=Clock())
    exporter.step(Step("prefill", 1, 5, 0, 0))
    exporter.finished(5, 9, 3, streaming=True)
    shown = samples(exporter.render())
    assert shown[f'{LENGTH}{{engine_type="unified",model_name="m"}}'] == 0.0
    assert shown['sglang:generation_tokens_total{model_name="m"}'] == 9.0
    assert shown['sglang:num_requests_total{model_name="m"}'] == 1.0


def test_streaming_requests_count_apart_from_0_5_17_and_flush_cache_restarts_the_sums() -> None:
    exporter = Exporter("0.5.17", "m", speculative=True, num_steps=3, num_draft_tokens=4, clock=Clock())
    exporter.finished(5, 9, 3, streaming=True)
    exporter.finished(5, 7, 0, streaming=False)  # no verify step (one token): no verify calls counted
    shown = samples(exporter.render())
    assert shown['sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"}'] == 9
    assert shown['sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"}'] == 7
    assert shown['sglang:spec_verify_calls_total{engine_type="unified",model_name="m"}'] == 3
    exporter.step(Step("prefill", 1, 5, 0, 0))
    for _ in range(20):
        exporter.step(decode(0))
    exporter.flush_cache()
    for _ in range(20):
        exporter.step(decode(3))
    assert (
        samples(exporter.render())[
            f'{LENGTH}{{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"}}'
        ]
        == 4.0
    )


def test_without_a_drafter_the_spec_gauges_stay_zero() -> None:
    exporter = Exporter("0.5.23", "m", speculative=False, clock=Clock())
    exporter.step(Step("prefill", 1, 5, 0, 0))
    for _ in range(40):
        exporter.step(Step("decode", 1, 1, 1, 0))
    shown = {k.split("{")[0]: v for k, v in samples(exporter.render()).items()}
    assert shown[LENGTH] == shown[RATE] == shown["sglang:spec_num_steps"] == 0.0
