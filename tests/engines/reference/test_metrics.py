"""The reference engine's /metrics on a real server, per emulated sglang release: the names, types, HELP texts
and labels of engines/sglang/metrics.py in text format 0.0.4; the counters equal the sums of the answers'
meta_info; the accept-length gauge equals accepted / verified over the last 40 decode batches, reconstructed
step by step from streamed answers; no /metrics without --enable-metrics; and the windowed accept length
falls when the traffic moves from chat-small to the text-tasks workload."""

from __future__ import annotations

import http.client
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from specctl.engines.sglang import metrics
from tests.engines.reference.test_server import MODELS, events, generate_body, post, started

ROOT = Path(__file__).resolve().parents[3]
WORKLOADS = ROOT / "specctl" / "verdict" / "workloads"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[a-zA-Z_]+="(?:[^"\\]|\\.)*",?)*)\})? (\S+)$')
Labels = frozenset[tuple[str, str]]


def scrape(url: str) -> tuple[int, str, str]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        connection.close()


class Exposition:
    """A text-format 0.0.4 body, parsed strictly: every family HELP, then TYPE, then its samples."""

    def __init__(self, body: str) -> None:
        self.help: dict[str, str] = {}
        self.type: dict[str, str] = {}
        self.samples: dict[str, dict[Labels, float]] = defaultdict(dict)
        assert body.endswith("\n")
        current = None
        for line in body.splitlines():
            if line.startswith("# HELP "):
                current, text = line.removeprefix("# HELP ").split(" ", 1)
                self.help[current] = text
            elif line.startswith("# TYPE "):
                name, kind = line.removeprefix("# TYPE ").split(" ")
                assert name == current and name not in self.type
                self.type[name] = kind
            else:
                match = SAMPLE.match(line)
                assert match is not None and match[1] == current, line
                pairs = re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', match[2] or "")
                assert [k for k, _ in pairs] == sorted(k for k, _ in pairs), line  # labels come out sorted
                self.samples[current][frozenset(pairs)] = float(match[3])

    def total(self, name: str, **where: str) -> float:
        return sum(v for labels, v in self.samples[name].items() if set(where.items()) <= labels)

    def value(self, name: str) -> float:
        (only,) = self.samples[name].values()
        return only


def streamed(url: str, prompt: str) -> tuple[list[int], dict[str, Any]]:
    """One streamed /generate: the drafts each verify step accepted, in order, and the final meta_info.
    Every step but the last shows all its tokens (accepted drafts + the bonus); the last may be cut at the
    stop or the length, so its drafts are the request's total less the others."""
    status, _, body = post(url, "/generate", generate_body(prompt, max_new=64, stream=True))
    assert status == 200
    chunks = events(body)
    lengths = [len(c["output_ids"]) for c in chunks]
    meta = chunks[-1]["meta_info"]
    accepted = [b - a - 1 for a, b in zip(lengths, lengths[1:-1], strict=False)]
    accepted.append(meta["spec_num_correct_drafts"] - sum(accepted))
    assert len(accepted) == meta["spec_verify_ct"]
    return accepted, meta


def last_interval(steps: list[list[int]], counts_prefill: bool, before: int, interval: int = 40) -> tuple[int, int]:
    """(accepted drafts + bonus tokens, requests verified) over the last complete interval of decode batches,
    for requests served one at a time (each a prefill, then its verify steps) after `before` decode batches."""
    accepted = verified = 0
    decodes = before
    last = (0, 0)
    for request in steps:
        if counts_prefill:
            accepted, verified = accepted + 1, verified + 1
        for drafts in request:
            accepted, verified, decodes = accepted + drafts + 1, verified + 1, decodes + 1
            if decodes % interval == 0:
                last, accepted, verified = (accepted, verified), 0, 0
    return last


PROMPTS = [
    f"User: {q}\nAssistant: "
    for q in (
        "Count from 3 to 40.",
        "List 9 animals.",
        "What is the capital of Torazu?",
        "Spell the word castle.",
        "Count down from 30 to 2.",
        "Describe Miquora.",
        "List 7 days of the week.",
        "Say the alphabet from a to z.",
    )
]


@pytest.mark.parametrize("version", ["0.5.23", "0.5.13", "0.5.4.post2", "0.4.9"])
def test_metrics_are_the_emulated_releases_and_count_as_it_does(version: str) -> None:
    spec = metrics.spec_metrics(version)
    model = str(MODELS / "tiny-llama")
    # releases up to 0.5.10 would replay CUDA graphs captured at the default (narrower) layers
    with started("--emulate-sglang-version", version, "--disable-cuda-graph") as (url, _):
        plain = [post(url, "/generate", generate_body(p, max_new=32)) for p in PROMPTS[:2]]
        metas = [json.loads(body)["meta_info"] for status, _, body in plain if status == 200]
        steps = []
        for prompt in PROMPTS:
            accepted, meta = streamed(url, prompt)
            steps.append(accepted)
            metas.append(meta)
        status, kind, body = scrape(url)
    assert status == 200 and kind == CONTENT_TYPE
    shown = Exposition(body)
    assert sorted(shown.type) == sorted(metrics.metric_names(version))
    for name, kind in shown.type.items():
        metric = metrics.METRICS[name]
        assert kind == metric.type and shown.help[name] == metrics.help_text(name, version)
        names = spec.scheduler_labels if metric.collector == "scheduler" else spec.tokenizer_labels
        extra = set(metric.extra_labels) | (
            {"is_streaming"} if spec.is_streaming and name in metrics.STREAMING_COUNTERS else set()
        )
        for labels in shown.samples[name]:
            assert {k for k, _ in labels} == set(names) | extra, (name, labels)
            assert dict(labels)["model_name"] == model and dict(labels).get("engine_type", "unified") == "unified"
    # the tokenizer's counters: every finished request, health checks excepted
    assert shown.total(spec.generation_tokens) == sum(m["completion_tokens"] for m in metas)
    assert shown.total(spec.prompt_tokens) == sum(m["prompt_tokens"] for m in metas)
    assert shown.total(spec.requests) == len(metas) == len(PROMPTS) + 2
    if spec.is_streaming:
        streamed_tokens = sum(m["completion_tokens"] for m in metas[2:])
        assert shown.total(spec.generation_tokens, is_streaming="true") == streamed_tokens
    if spec.verify_calls is not None:
        assert shown.value(spec.verify_calls) == sum(m["spec_verify_ct"] for m in metas)
    if spec.decode_tokens is not None:  # each verify step: its accepted drafts + the bonus token
        decoded = sum(m["spec_num_correct_drafts"] + m["spec_verify_ct"] for m in metas)
        assert shown.total(spec.decode_tokens, mode="decode") == decoded
        assert shown.total(spec.decode_tokens, mode="prefill_compute") > sum(m["prompt_tokens"] for m in metas)
    # the gauges: the last 40 decode batches (all within the streamed requests: at least 80 of them)
    assert sum(len(s) for s in steps) >= 80
    accepted, verified = last_interval(steps, spec.counts_prefill, before=sum(m["spec_verify_ct"] for m in metas[:2]))
    assert shown.value(spec.accept_length) == pytest.approx(accepted / verified)
    if spec.accept_rate is not None:
        expected = metrics.accept_rate(version, accepted, verified, num_steps=3, num_draft_tokens=4)
        assert shown.value(spec.accept_rate) == pytest.approx(expected)
    if spec.num_steps is not None and spec.num_draft_tokens is not None:
        assert (shown.value(spec.num_steps), shown.value(spec.num_draft_tokens)) == (3.0, 4.0)


def test_no_metrics_without_enable_metrics() -> None:
    with started(metrics=False) as (url, _):
        status, _, _ = scrape(url)
    assert status == 404


def chat(url: str, messages: list[dict[str, str]]) -> None:
    status, _, _ = post(url, "/v1/chat/completions", {"messages": messages, "max_tokens": 64, "temperature": 0})
    assert status == 200


def test_acceptance_falls_when_the_traffic_moves_to_text_tasks() -> None:
    """What `specctl watch` reads: Δ generation tokens / Δ verify calls over each workload's window, and the
    gauge after it. The tiny drafter learnt chat-small's domain; text tasks (summarise, proofread, extract,
    translate) are outside it, and about as many tokens are accepted per verify as plain decoding gives."""
    spec = metrics.spec_metrics("0.5.23")
    assert spec.verify_calls is not None
    windows = {}
    gauges = {}
    with started() as (url, _):
        for workload in ("chat-small", "text-tasks"):
            before = Exposition(scrape(url)[2])
            for line in (WORKLOADS / f"{workload}.jsonl").read_text().splitlines():
                chat(url, json.loads(line)["messages"])
            after = Exposition(scrape(url)[2])
            tokens = after.total(spec.generation_tokens) - before.total(spec.generation_tokens)
            windows[workload] = tokens / (after.total(spec.verify_calls) - before.total(spec.verify_calls))
            gauges[workload] = after.value(spec.accept_length)
    assert windows["chat-small"] >= 3.2 and gauges["chat-small"] >= 3.0
    assert windows["text-tasks"] <= 2.2 and gauges["text-tasks"] <= 2.5
    assert windows["text-tasks"] <= 0.65 * windows["chat-small"]
