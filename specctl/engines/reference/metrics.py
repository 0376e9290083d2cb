"""The reference engine's `GET /metrics` (with `--enable-metrics`): the emulated sglang release's Prometheus
metrics for speculative acceptance, counted as that release counts them and written as prometheus_client
writes them.

Which metrics, labels and HELP texts a release has comes from engines/sglang/metrics.py, the table
`specctl watch` reads them by. The scheduler reports each step (`step`), the HTTP side each finished
request (`finished`):
- gauges (`num_running_reqs`, `num_queue_reqs`, `gen_throughput`, `spec_accept_length`, `spec_accept_rate`,
  `spec_num_steps`, `spec_num_draft_tokens`, `spec_cap_length`, `spec_block_accept_length`) are published
  at every prefill batch (the spec ones as they stand), every `decode_log_interval` decode batches (the spec
  ones recomputed over those batches, whose sums then restart), and when the engine has been idle 30 s
  after the last publication (no running request, throughput 0). They appear with the first prefill.
- `realtime_tokens_total` grows at each prefill (mode prefill_compute: its prompt tokens; there is no
  prefix cache, so never prefill_cache) and each decode step (mode decode: accepted drafts + batch size).
- the tokenizer counters grow when a request that logs metrics finishes (health checks do not).
Up to 0.5.2 each prefilled request counts as 1/1 in the accept-length sums, as those releases count
extend batches. Without a drafter the spec gauges stay 0.

Not emulated: the other metrics sglang exports (latency histograms, token usage, cache), per-priority and
dp_rank series, the 0.5.23 rule that publishes an idle running-request count at once, and OpenMetrics
content negotiation (the body is always text format 0.0.4, what sglang sends without an Accept header).

Pure stdlib: the exporter is tested without torch.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from specctl.engines.sglang import metrics as table

__all__ = ["CONTENT_TYPE", "IDLE_PUBLISH_S", "Exporter", "Step", "exposition", "go_float"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
IDLE_PUBLISH_S = 30.0  # sglang republishes its scheduler gauges when idle this long after the last publication


@dataclass(frozen=True)
class Step:
    """One scheduler step as the metrics count it.

    Attributes:
        kind: a prefill of newly admitted requests, or one decode (verify) step of the running batch.
        batch_size: requests in the step.
        tokens: prefill: prompt tokens computed; decode: tokens generated (accepted drafts + batch size).
        accepted_drafts: drafts the verify accepted, summed over the batch (0 without speculation).
        draft_steps: drafts proposed per request (0: this step drafted nothing).
        running: requests in the running batch beside a prefill (a decode step's is its batch);
        waiting: requests queued.
    """

    kind: Literal["prefill", "decode"]
    batch_size: int
    tokens: int
    running: int
    waiting: int
    accepted_drafts: int = 0
    draft_steps: int = 0


def go_float(value: float) -> str:
    """A sample value as prometheus_client writes it (Go's formatting): 3.0, 0.5, 1.23456789e+08, NaN, +Inf."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    point = text.find(".")
    if value > 0 and point > 6:  # Go writes an exponent from 1e+06 on, Python's repr only from 1e+16
        digits = (text[:point] + text[point + 1 :]).rstrip("0")
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{mantissa}e+{point - 1:02d}"
    return text


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _label_value(value: str) -> str:
    return _help(value).replace('"', '\\"')


@dataclass(frozen=True)
class Family:
    """One metric as it is written: name, type, HELP text and its samples (labels, value)."""

    name: str
    type: str
    help: str
    samples: tuple[tuple[Mapping[str, str], float], ...]


def exposition(families: Iterable[Family]) -> str:
    """Prometheus text format 0.0.4: HELP and TYPE lines, then one line per sample with its labels sorted."""
    lines = []
    for family in families:
        lines.append(f"# HELP {family.name} {_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples:
            pairs = ",".join(f'{k}="{_label_value(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{family.name}{{{pairs}}} {go_float(value)}" if pairs else f"{family.name} {go_float(value)}")
    return "".join(line + "\n" for line in lines)


class Exporter:
    """The counters and gauges of one emulated sglang server (thread-safe: the scheduler thread reports
    steps, the event loop finished requests and scrapes).

    Args:
        version: the emulated sglang release.
        model_name: the served model name (label `model_name`).
        speculative: whether a drafter runs (without one the spec gauges stay 0).
        num_steps, num_draft_tokens: the server's static speculative arguments (for the accept rate).
        decode_log_interval: `--decode-log-interval`.
        clock: seconds, monotonic (time.perf_counter); tests pass their own.
    """

    def __init__(
        self,
        version: str,
        model_name: str,
        *,
        speculative: bool,
        num_steps: int = 0,
        num_draft_tokens: int = 0,
        decode_log_interval: int = table.DECODE_LOG_INTERVAL,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.version = version
        self.spec = table.spec_metrics(version)
        self.names = table.metric_names(version)
        self.speculative = speculative
        self.num_steps = num_steps
        self.num_draft_tokens = num_draft_tokens
        self.interval = decode_log_interval
        self.clock = clock
        self.labels = {c: table.label_values(version, c, model_name) for c in ("scheduler", "tokenizer")}
        self._lock = threading.Lock()
        # what the scheduler's stats hold, and what the gauges last published (None: not created yet)
        self._stats = dict.fromkeys((n for n in self.names if table.METRICS[n].type == "gauge"), 0.0)
        self._published: dict[str, float] | None = None
        self._last_publish = clock()
        self._last_decode_log = clock()
        # the current decode-log interval's sums
        self._decode_batches = 0
        self._accepted = 0
        self._forward_ct = 0
        self._generated = 0
        self._active_steps = num_steps
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    # --- the scheduler thread ---------------------------------------------------------------------

    def step(self, step: Step) -> None:
        with self._lock:
            if step.kind == "prefill":
                self._prefill(step)
            else:
                self._decode(step)

    def _prefill(self, step: Step) -> None:
        if self.speculative and self.spec.counts_prefill:  # extend batches verify nothing: 0 drafts + 1 each
            self._accepted += step.batch_size
            self._forward_ct += step.batch_size
        self._count_realtime("prefill_compute", step.tokens)
        self._stats["sglang:num_running_reqs"] = float(step.running)
        self._stats["sglang:num_queue_reqs"] = float(step.waiting)
        self._publish()

    def _decode(self, step: Step) -> None:
        self._decode_batches += 1
        self._generated += step.tokens
        if self.speculative:  # each request verified: its accepted drafts + the bonus token
            self._accepted += step.accepted_drafts + step.batch_size
            self._forward_ct += step.batch_size
            self._active_steps = step.draft_steps or self._active_steps
        self._count_realtime("decode", step.tokens)
        if self._decode_batches % self.interval:
            return
        now = self.clock()
        gap, self._last_decode_log = now - self._last_decode_log, now
        stats = self._stats
        stats["sglang:gen_throughput"] = self._generated / gap if gap > 0 else 0.0
        self._generated = 0
        stats["sglang:num_running_reqs"] = float(step.batch_size)
        stats["sglang:num_queue_reqs"] = float(step.waiting)
        if self.speculative and self._forward_ct:
            stats[self.spec.accept_length] = self._accepted / self._forward_ct
            if self.spec.accept_rate is not None:
                stats[self.spec.accept_rate] = table.accept_rate(
                    self.version, self._accepted, self._forward_ct, self.num_steps, self.num_draft_tokens
                )
            if self.spec.num_steps is not None and self.spec.num_draft_tokens is not None:
                adapted = self._active_steps != self.num_steps  # adaptive speculation moved it (chains: +1)
                stats[self.spec.num_steps] = float(self._active_steps)
                stats[self.spec.num_draft_tokens] = float(self._active_steps + 1 if adapted else self.num_draft_tokens)
        self._accepted = self._forward_ct = 0
        self._publish()

    def _count_realtime(self, mode: str, tokens: int) -> None:
        if self.spec.decode_tokens is not None and tokens:  # sglang skips a zero delta: no series appears
            self._add(self.spec.decode_tokens, (("mode", mode),), tokens)

    def _publish(self) -> None:
        self._published = dict(self._stats)
        self._last_publish = self.clock()

    # --- the event loop ---------------------------------------------------------------------------

    def finished(self, prompt_tokens: int, completion_tokens: int, verify_ct: int, *, streaming: bool) -> None:
        """A request finished (one that logs metrics: not a health check)."""
        stream = ((table.STREAMING_LABEL, "true" if streaming else "false"),) if self.spec.is_streaming else ()
        with self._lock:
            self._add(self.spec.prompt_tokens, stream, prompt_tokens)
            self._add(self.spec.generation_tokens, stream, completion_tokens)
            if self.spec.verify_calls is not None and verify_ct > 0:
                self._add(self.spec.verify_calls, (), verify_ct)
            self._add(self.spec.requests, stream, 1)

    def flush_cache(self) -> None:
        """/flush_cache: the interval's accept sums restart, as sglang's flush resets them."""
        with self._lock:
            self._accepted = self._forward_ct = 0

    def _add(self, name: str, extra: tuple[tuple[str, str], ...], amount: float) -> None:
        key = (name, extra)
        self._counters[key] = self._counters.get(key, 0.0) + amount

    def render(self, idle: bool = False) -> str:
        """The /metrics body; `idle` (nothing running or queued) lets the 30-second idle publication happen."""
        with self._lock:
            if idle and self._published is not None and self.clock() - self._last_publish > IDLE_PUBLISH_S:
                self._stats.update({"sglang:num_running_reqs": 0.0, "sglang:num_queue_reqs": 0.0})
                self._stats["sglang:gen_throughput"] = 0.0
                self._publish()
            return exposition(self._families())

    def _families(self) -> Iterable[Family]:
        for name in self.names:
            metric = table.METRICS[name]
            labels = self.labels[metric.collector]
            if metric.type == "gauge":
                if self._published is None:
                    continue
                samples: tuple[tuple[Mapping[str, str], float], ...] = ((labels, self._published[name]),)
            else:
                samples = tuple(({**labels, **dict(extra)}, v) for (n, extra), v in self._counters.items() if n == name)
            if samples:
                yield Family(name, metric.type, table.help_text(name, self.version), samples)
