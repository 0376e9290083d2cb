"""The Prometheus metrics (`--enable-metrics`, `GET /metrics`) sglang shows speculative acceptance in, per release.

`specctl watch` parses them from a serving engine; the reference engine's exporter
(engines/reference/metrics.py) writes them from this same table, so the two never disagree. Every row
comes from the releases' code (`sglang/srt/metrics/collector.py` up to 0.5.9,
`sglang/srt/observability/metrics_collector.py` from 0.5.10; the spec counters are fed from
`scheduler.py::run_batch` up to 0.5.2, from `update_spec_metrics` on decode batches after) and is checked
against the sampled wheels by the conformance tier (tests/engines/sglang/test_metrics_conformance.py).
A first release is the first sampled wheel that has the metric: the true first may be an unsampled release
just before it. Other metrics sglang exports (queue times, latency histograms, cache) are not listed.

What the numbers mean, in every release:
- `sglang:spec_accept_length` is a gauge set every `--decode-log-interval` (default 40) decode batches on the
  scheduler to (accepted drafts + one bonus token per request) / requests verified, summed over those
  batches, then the sums restart. It keeps its value in between and when idle; 0.0 before the first
  decode log (and always without speculation): 0 means no data, not zero acceptance. Up to 0.5.2 prefill
  batches count too, each prefilled request as 1/1, which pulls it toward 1.
- The tokenizer counters move once per finished request (`generation_tokens_total` by its completion
  tokens, the first one from prefill included; `spec_verify_calls_total` by its verify steps), so
  `Δ generation_tokens_total / Δ spec_verify_calls_total` over a window is that window's exact mean accept
  length as meta_info defines it (0.5.13 on). From 0.5.17 the first three carry `is_streaming`; the
  verify counter does not, so sum over it before dividing.
- `sglang:realtime_tokens_total{mode="decode"}` (0.5.9 on) grows every decode step by that step's accept
  numerator (accepted drafts + batch size), with no matching denominator.

Pure stdlib: `watch` reads this without the reference engine (or torch) loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from specctl.engines.sglang.serving import _since as since

__all__ = [
    "DECODE_LOG_INTERVAL",
    "METRICS",
    "STREAMING_COUNTERS",
    "Metric",
    "STREAMING_LABEL",
    "SpecMetrics",
    "accept_rate",
    "help_text",
    "label_values",
    "metric_names",
    "scheduler_labels",
    "spec_metrics",
    "tokenizer_labels",
]

DECODE_LOG_INTERVAL = 40  # `--decode-log-interval`'s default in every release
OLDEST = "0.4.4.post2"  # the first release with EAGLE-3 (and the oldest wheel read): older ones are not described
ACCEPT_LENGTH = "sglang:spec_accept_length"
ACCEPT_RATE = "sglang:spec_accept_rate"
NUM_STEPS = "sglang:spec_num_steps"
NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
GENERATION_TOKENS = "sglang:generation_tokens_total"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
REQUESTS = "sglang:num_requests_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
REALTIME_TOKENS = "sglang:realtime_tokens_total"
STREAMING_LABEL = "is_streaming"

Collector = Literal["scheduler", "tokenizer"]


@dataclass(frozen=True)
class Metric:
    """One metric: its type, the process that writes it, its first release and its `# HELP` text.

    `help_from` lists later HELP texts with the first release of each; `extra_labels` follow the
    collector's labels (`is_streaming` is added by release, see `SpecMetrics.is_streaming`).
    """

    type: Literal["gauge", "counter"]
    collector: Collector
    first: str
    help: str
    help_from: tuple[tuple[str, str], ...] = ()
    extra_labels: tuple[str, ...] = ()


def _gauge(first: str, text: str, *later: tuple[str, str]) -> Metric:
    return Metric("gauge", "scheduler", first, text, later)


DSPARK_CAP = (
    "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled)."
)
DSPARK_BLOCK = (
    "Mean uncapped full-block accept length per verify step "
    "(accept + cap-trimmed drafts; exact only in DSpark cap-accept mode)."
)
OLD_RATE = "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch)."
REALTIME_HELP = (
    "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode."
)

METRICS: Mapping[str, Metric] = {
    # SchedulerMetricsCollector gauges: set at each prefill log, each decode log and when idle
    "sglang:num_running_reqs": _gauge(OLDEST, "The number of running requests."),
    "sglang:num_queue_reqs": _gauge(OLDEST, "The number of requests in the waiting queue."),
    "sglang:gen_throughput": _gauge(OLDEST, "The generation throughput (token/s)."),
    ACCEPT_LENGTH: _gauge(
        OLDEST,
        "The average acceptance length of speculative decoding.",
        ("0.5.11", "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)."),
    ),
    ACCEPT_RATE: _gauge(
        "0.5.4.post2",
        OLD_RATE,
        ("0.5.11", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
    ),
    "sglang:spec_cap_length": _gauge("0.5.17", DSPARK_CAP),
    "sglang:spec_block_accept_length": _gauge("0.5.17", DSPARK_BLOCK),
    NUM_STEPS: _gauge("0.5.13", "Currently active speculative_num_steps."),
    NUM_DRAFT_TOKENS: _gauge(
        "0.5.13", "Currently active speculative_num_draft_tokens (decouples from steps under topk>1)."
    ),
    # a SchedulerMetricsCollector counter, counted on every prefill and decode step
    REALTIME_TOKENS: Metric("counter", "scheduler", "0.5.9", REALTIME_HELP, extra_labels=("mode",)),
    # TokenizerMetricsCollector counters, counted when a request finishes
    PROMPT_TOKENS: Metric("counter", "tokenizer", OLDEST, "Number of prefill tokens processed."),
    GENERATION_TOKENS: Metric("counter", "tokenizer", OLDEST, "Number of generation tokens processed."),
    VERIFY_CALLS: Metric("counter", "tokenizer", "0.5.13", "Number of speculative decoding verification calls."),
    REQUESTS: Metric("counter", "tokenizer", OLDEST, "Number of requests processed."),
}
STREAMING_SINCE = "0.5.17"  # prompt/generation tokens and requests gain `is_streaming`; the verify counter does not
STREAMING_COUNTERS = frozenset({PROMPT_TOKENS, GENERATION_TOKENS, REQUESTS})


@dataclass(frozen=True)
class SpecMetrics:
    """The metric names one sglang release exports for speculative acceptance, and how to read them.

    Attributes:
        version: the sglang release.
        accept_length: the gauge of the last decode-log interval's mean accept length (every release).
        accept_rate: its acceptance-rate gauge (0.5.4.post2 on; drafts only from 0.5.11), else None.
        num_steps, num_draft_tokens: gauges of the active speculative settings (0.5.13 on), else None.
        generation_tokens, prompt_tokens, requests: the tokenizer's per-finished-request counters.
        verify_calls: the verify-step counter (0.5.13 on), else None: with `generation_tokens`, exact windows.
        decode_tokens: the counter whose `decode_mode` series is the accept numerator (0.5.9 on), else None.
        decode_mode: that series' label (name, value).
        is_streaming: whether generation_tokens, prompt_tokens and requests carry `is_streaming` (0.5.17 on).
        scheduler_labels: the label names of the scheduler's metrics (gauges, decode_tokens without `mode`),
            with default flags; `dp_rank` joins with --dp-size > 1, `priority` with priority scheduling.
        tokenizer_labels: the label names of the tokenizer's counters (without `is_streaming`).
        counts_prefill: whether prefill batches count in accept_length (each request as 1/1; up to 0.5.2).
        decode_log_interval: batches per accept_length value with default flags (`--decode-log-interval`).
    """

    version: str
    accept_length: str
    accept_rate: str | None
    num_steps: str | None
    num_draft_tokens: str | None
    generation_tokens: str
    prompt_tokens: str
    requests: str
    verify_calls: str | None
    decode_tokens: str | None
    decode_mode: tuple[str, str]
    is_streaming: bool
    scheduler_labels: tuple[str, ...]
    tokenizer_labels: tuple[str, ...]
    counts_prefill: bool
    decode_log_interval: int = DECODE_LOG_INTERVAL


def metric_names(version: str) -> tuple[str, ...]:
    """The table's metrics that sglang `version` exports, in table order."""
    return tuple(name for name, metric in METRICS.items() if since(version, metric.first))


def _present(name: str, version: str) -> str | None:
    return name if since(version, METRICS[name].first) else None


def help_text(name: str, version: str) -> str:
    """The `# HELP` text of `name` in sglang `version` (KeyError for a metric the table does not list)."""
    metric = METRICS[name]
    text = metric.help
    for first, later in metric.help_from:
        if since(version, first):
            text = later
    return text


def scheduler_labels(version: str) -> tuple[str, ...]:
    labels = ["model_name", "engine_type"]
    if since(version, "0.5.1"):
        labels += ["tp_rank", "pp_rank"]
    if since(version, "0.5.9"):
        labels.append("moe_ep_rank")
    return tuple(labels)


def tokenizer_labels(version: str) -> tuple[str, ...]:
    return ("model_name", "engine_type") if since(version, "0.5.11") else ("model_name",)


def label_values(version: str, collector: Collector, model_name: str) -> dict[str, str]:
    """The labels of a one-GPU server with default flags: its served model name, engine type
    "unified" and every rank 0."""
    names = scheduler_labels(version) if collector == "scheduler" else tokenizer_labels(version)
    values = {"model_name": model_name, "engine_type": "unified"}
    return {name: values.get(name, "0") for name in names}


def spec_metrics(version: str) -> SpecMetrics:
    """What sglang `version` exports for speculative acceptance (a version newer than all known is the newest)."""
    return SpecMetrics(
        version=version,
        accept_length=ACCEPT_LENGTH,
        accept_rate=_present(ACCEPT_RATE, version),
        num_steps=_present(NUM_STEPS, version),
        num_draft_tokens=_present(NUM_DRAFT_TOKENS, version),
        generation_tokens=GENERATION_TOKENS,
        prompt_tokens=PROMPT_TOKENS,
        requests=REQUESTS,
        verify_calls=_present(VERIFY_CALLS, version),
        decode_tokens=_present(REALTIME_TOKENS, version),
        decode_mode=("mode", "decode"),
        is_streaming=since(version, STREAMING_SINCE),
        scheduler_labels=scheduler_labels(version),
        tokenizer_labels=tokenizer_labels(version),
        counts_prefill=not since(version, "0.5.4.post2"),
    )


def accept_rate(version: str, accepted_tokens: int, forward_ct: int, num_steps: int, num_draft_tokens: int) -> float:
    """`sglang:spec_accept_rate` for one decode-log interval, by the formula of `version` (0.5.4.post2 on).

    `accepted_tokens` is the interval's accept numerator (accepted drafts + bonus tokens), `forward_ct` its
    requests verified; `num_steps`/`num_draft_tokens` are the server's static arguments (0 when unset).
    """
    if since(version, "0.5.11"):  # drafts only: (accepted - bonus) / proposed
        per_round = num_draft_tokens - 1 if num_draft_tokens else num_steps
        proposed = forward_ct * per_round
        return (accepted_tokens - forward_ct) / proposed if proposed > 0 else 0.0
    if since(version, "0.5.6"):  # bonus included, over num_draft_tokens
        per_round = num_draft_tokens or num_steps + 1
    else:  # 0.5.4.post2-0.5.5.post1: bonus included, over num_steps + 1
        per_round = num_steps + 1
    total = forward_ct * per_round
    return accepted_tokens / total if total > 0 else 0.0
