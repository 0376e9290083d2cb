"""`watch` reads each sglang release's own metric names: the reference exporter writes a release's
page from engines/sglang/metrics.py (checked against the wheels' code by the conformance tier), and
the window formed from it through the sglang engine's `watch_source` is exact where the release
counts verify calls (0.5.13 on) and the weighted gauge before."""

from __future__ import annotations

import pytest

from specctl.engines import get_engine
from specctl.engines.reference.metrics import Exporter, Step
from specctl.verdict.prometheus import parse
from specctl.verdict.window import Scrape, from_scrapes


def _serve(exporter: Exporter) -> None:
    """Two requests prefilled, decoded in 40 verify steps of 3 tokens each (2 drafts accepted + 1), finished."""
    exporter.step(Step("prefill", 2, 20, 0, 0))
    for _ in range(40):
        exporter.step(Step("decode", 2, 6, 2, 0, accepted_drafts=4, draft_steps=3))
    for _ in range(2):
        exporter.finished(10, 121, 40, streaming=False)


@pytest.mark.parametrize(
    ("version", "method", "expected"),
    [
        ("0.5.4.post2", "gauge", 3.0),  # weighted by generated tokens
        ("0.5.9", "gauge", 3.0),  # weighted by the decode realtime tokens
        ("0.5.13", "counters", 121 / 40),  # exact: the first token came from prefill
        ("0.5.17", "counters", 121 / 40),  # is_streaming splits the token counter: summed
        ("0.5.23", "counters", 121 / 40),
    ],
)
def test_a_window_from_each_releases_own_page(version: str, method: str, expected: float) -> None:
    clock = [0.0]
    exporter = Exporter(version, "m", speculative=True, num_steps=3, num_draft_tokens=4, clock=lambda: clock[0])
    looks = []
    for at in range(4):  # the first look precedes every counter (each appears as it first counts): a pair dropped
        clock[0] = float(at)
        if at:
            _serve(exporter)
        looks.append(Scrape(float(at), tuple(parse(exporter.render())), "r1 (process 7)"))
    source = get_engine("sglang").watch_source(version)
    assert source is not None
    window = from_scrapes(looks, source)
    assert window.discarded is None and window.method == method and window.requests == 4
    assert window.accept_length == pytest.approx(expected)


def test_releases_up_to_0_5_2_count_prefills_in_the_gauge_and_the_window_says_how_it_was_formed() -> None:
    clock = [0.0]
    exporter = Exporter("0.4.9", "m", speculative=True, num_steps=3, num_draft_tokens=4, clock=lambda: clock[0])
    looks = [Scrape(0.0, tuple(parse(exporter.render())), "r")]
    for at in (1.0, 2.0):  # the first pair of looks is dropped: the counters appear only once they count
        _serve(exporter)
        looks.append(Scrape(at, tuple(parse(exporter.render())), "r"))
    window = from_scrapes(looks, get_engine("sglang").watch_source("0.4.9"))  # type: ignore[arg-type]
    assert window.method == "gauge" and "weighted" in window.note
    assert window.accept_length is not None and 2.5 < window.accept_length < 3.0  # the prefill's 1/1 pulls it down
