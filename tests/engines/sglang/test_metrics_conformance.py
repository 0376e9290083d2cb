"""engines/sglang/metrics.py against the code of the sampled releases: each wheel of
scripts/sglang-cpu/wheels.lock is read (its metrics collector module, parsed, never imported) for every
Prometheus metric it defines, with its type, HELP text and label names; the shipped table must say what
that release's code says. The sample holds both sides of every boundary the table draws: 0.5.2 | 0.5.4.post2
(spec_accept_rate; prefill counted), 0.5.6 | 0.5.9 (realtime_tokens_total, moe_ep_rank), 0.5.10 | 0.5.11 (HELP
texts, the tokenizer's engine_type), 0.5.12.post1 | 0.5.13 (spec_verify_calls_total, spec_num_steps),
0.5.14 | 0.5.17 (is_streaming) and 0.4.9 | 0.5.1 (rank labels)."""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from specctl.engines.sglang import metrics
from tests.engines.sglang.conftest import Wheels

COLLECTORS = ("sglang/srt/metrics/collector.py", "sglang/srt/observability/metrics_collector.py")
BOUNDARIES = [
    ("0.4.9", "0.5.1"),
    ("0.5.2", "0.5.4.post2"),
    ("0.5.6", "0.5.9"),
    ("0.5.10", "0.5.11"),
    ("0.5.12.post1", "0.5.13"),
    ("0.5.14", "0.5.17"),
]


@dataclass(frozen=True)
class Defined:
    """A metric as the collector module constructs it."""

    type: str
    help: str
    labelnames: str  # the labelnames argument's source text


def collector_source(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        present = [name for name in COLLECTORS if name in archive.namelist()]
        assert len(present) == 1, (wheel.name, present)
        return archive.read(present[0]).decode("utf-8")


def defined_metrics(source: str) -> dict[str, Defined]:
    """Every `Gauge(name="sglang:...", documentation=..., labelnames=...)` (and Counter, Histogram) call."""
    found: dict[str, Defined] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id not in ("Gauge", "Counter", "Histogram", "Summary"):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        name = keywords.get("name")
        if not (isinstance(name, ast.Constant) and str(name.value).startswith("sglang:")):
            continue
        doc = keywords["documentation"]  # implicit concatenation is one constant; an f-string is not
        text = str(doc.value) if isinstance(doc, ast.Constant) else ast.unparse(doc)
        labels = ast.unparse(keywords["labelnames"]) if "labelnames" in keywords else ""
        found[str(name.value)] = Defined(node.func.id.lower(), text, labels)
    return found


def test_collector_parsing_reads_concatenated_help_and_labels() -> None:
    source = 'x = Counter(name="sglang:a_total", documentation=("one " "two."), labelnames=list(l) + ["mode"])'
    assert defined_metrics(source) == {"sglang:a_total": Defined("counter", "one two.", "list(l) + ['mode']")}


@pytest.mark.conformance
def test_every_sampled_release_defines_what_the_table_says(cached_wheels: Wheels) -> None:
    for version in cached_wheels.releases:
        defined = defined_metrics(collector_source(cached_wheels.wheel(version)))
        listed = metrics.metric_names(version)
        assert {n for n in metrics.METRICS if n in defined} == set(listed), version
        spec = metrics.spec_metrics(version)
        for name in listed:
            metric, code = metrics.METRICS[name], defined[name]
            assert code.type == metric.type, (version, name)
            assert code.help == metrics.help_text(name, version), (version, name)
            for label in metric.extra_labels:
                assert repr(label) in code.labelnames, (version, name, label)
            streaming = "'is_streaming'" in code.labelnames
            assert streaming == (spec.is_streaming and name in metrics.STREAMING_COUNTERS), (version, name)


@pytest.mark.conformance
def test_label_names_and_prefill_counting_match_the_code(cached_wheels: Wheels) -> None:
    """Rank labels are where the release's code builds its scheduler labels; a release counts prefill
    batches in the accept length where `run_batch` adds `num_accepted_tokens + bs` for every batch."""
    for version in cached_wheels.releases:
        with zipfile.ZipFile(cached_wheels.wheel(version)) as archive:
            code = "\n".join(
                archive.read(n).decode("utf-8")
                for n in archive.namelist()
                if n.startswith("sglang/srt/") and n.endswith(".py") and ("schedul" in n or "metrics" in n)
            )
        spec = metrics.spec_metrics(version)
        for label in ("tp_rank", "pp_rank", "moe_ep_rank"):
            assert bool(re.search(rf'"{label}":', code)) == (label in spec.scheduler_labels), (version, label)
        counted_in_run_batch = bool(re.search(r"spec_num_total_accepted_tokens \+= \(?\s*num_accepted_tokens \+", code))
        assert counted_in_run_batch == spec.counts_prefill, version


@pytest.mark.conformance
def test_the_sample_holds_both_sides_of_every_boundary(cached_wheels: Wheels) -> None:
    for before, after in BOUNDARIES:
        assert {before, after} <= set(cached_wheels.releases)
        assert metrics.spec_metrics(before) != replace(metrics.spec_metrics(after), version=before), (before, after)
