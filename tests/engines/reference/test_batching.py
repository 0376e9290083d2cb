"""Continuous batching keeps greedy output exact: batched == alone == plain greedy, with per-request
counters that do not depend on who else shares the forwards (float64, the shipped checkpoints)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from specctl.engines.reference.scheduler import Progress, Scheduler
from specctl.engines.reference.speculate import FinishedRequest, SpeculativeDecoder
from tests.engines.reference.test_speculate import DRAFTER, TARGET, random_prompts, workload_prompts

MAX_NEW = 48


def prompts() -> list[list[int]]:
    """8 different prompts of different lengths: 4 from the workload, 4 off it."""
    return workload_prompts()[:4] + random_prompts(4, seed=11)


def counters(g: FinishedRequest) -> tuple[object, ...]:
    return (
        g.output_ids,
        g.finish_reason,
        g.prompt_tokens,
        g.spec_verify_ct,
        g.spec_num_correct_drafts,
        g.spec_num_proposed_drafts,
        g.spec_correct_drafts_histogram,
    )


@pytest.fixture(scope="module")
def plain() -> SpeculativeDecoder:
    return SpeculativeDecoder(TARGET, max_running_requests=8)


@pytest.fixture(scope="module")
def speculative() -> SpeculativeDecoder:
    return SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, max_running_requests=8)


@pytest.fixture(scope="module")
def alone(plain: SpeculativeDecoder) -> list[FinishedRequest]:
    return [plain.generate(p, MAX_NEW) for p in prompts()]


def test_prompts_differ_in_length() -> None:
    assert len({len(p) for p in prompts()}) >= 6


def test_batched_equals_alone_equals_plain_greedy(
    plain: SpeculativeDecoder, speculative: SpeculativeDecoder, alone: list[FinishedRequest]
) -> None:
    spec_alone = [speculative.generate(p, MAX_NEW) for p in prompts()]
    spec_batched = speculative.generate_batch(prompts(), MAX_NEW)
    plain_batched = plain.generate_batch(prompts(), MAX_NEW)
    assert [g.output_ids for g in plain_batched] == [g.output_ids for g in alone]
    assert [g.output_ids for g in spec_alone] == [g.output_ids for g in alone]
    # each sequence keeps its own accepted prefix: the counters are those it has alone
    assert [counters(g) for g in spec_batched] == [counters(g) for g in spec_alone]
    assert all(g.spec_verify_ct > 0 and g.spec_num_proposed_drafts == 3 * g.spec_verify_ct for g in spec_batched)


def test_wrong_layers_batched_stay_exact(alone: list[FinishedRequest]) -> None:
    wrong = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, capture_positions=(0, 2, 4), max_running_requests=8)
    batched = wrong.generate_batch(prompts(), MAX_NEW)
    assert [g.output_ids for g in batched] == [g.output_ids for g in alone]
    assert sum(g.completion_tokens for g in batched) / sum(g.spec_verify_ct for g in batched) < 3.0


def test_a_batch_shares_forwards(speculative: SpeculativeDecoder) -> None:
    before = speculative.forwards.target
    for p in prompts():
        speculative.generate(p, MAX_NEW)
    alone_forwards = speculative.forwards.target - before
    before = speculative.forwards.target
    speculative.generate_batch(prompts(), MAX_NEW)
    batched_forwards = speculative.forwards.target - before
    # one prefill and one verify per step for all 8, against a prefill and the verifies of each alone
    assert batched_forwards < alone_forwards / 3


def drive(
    scheduler: Scheduler, requests: list[list[int]], max_new: int, live: int
) -> tuple[list[FinishedRequest], int]:
    """Closed loop: `live` requests in flight, each finished one replaced by the next; (generations, peak running)."""
    done: dict[int, FinishedRequest] = {}
    queue = list(enumerate(requests))
    peak = 0

    def submit() -> None:
        if queue:
            index, prompt = queue.pop(0)
            scheduler.submit(prompt, max_new, lambda p: finished(index, p))

    def finished(index: int, progress: Progress) -> None:
        assert progress.error is None
        if progress.done is not None:
            done[index] = progress.done
            submit()

    for _ in range(live):
        submit()
    with torch.inference_mode():
        while scheduler.step():
            peak = max(peak, scheduler.load[0])
    return [done[i] for i in range(len(requests))], peak


def test_scheduler_admits_up_to_max_running_and_stays_exact(alone: list[FinishedRequest]) -> None:
    engine = SpeculativeDecoder(TARGET, DRAFTER, num_steps=3, max_running_requests=3)
    scheduler = Scheduler(engine)
    generations, peak = drive(scheduler, prompts(), MAX_NEW, live=8)  # 8 submitted at once, 3 run at a time
    assert peak == 3 and scheduler.load == (0, 0) and len(engine.free_slots) == 3
    assert [g.output_ids for g in generations] == [g.output_ids for g in alone]
    assert all(0 < g.first_token_s <= g.e2e_s for g in generations)


def test_progress_arrives_per_step_and_cumulatively(speculative: SpeculativeDecoder) -> None:
    scheduler = Scheduler(speculative)
    seen: list[Progress] = []
    scheduler.submit(prompts()[0], MAX_NEW, seen.append)
    with torch.inference_mode():
        while scheduler.step():
            pass
    final = seen[-1].done
    assert final is not None and all(p.done is None for p in seen[:-1])
    assert len(seen) == 1 + final.spec_verify_ct  # the prefill's token, then one update per verify step
    for before, after in zip(seen, seen[1:], strict=False):
        assert after.output_ids[: len(before.output_ids)] == before.output_ids and len(after.output_ids) > len(
            before.output_ids
        )
    assert max(len(b.output_ids) - len(a.output_ids) for a, b in zip(seen, seen[1:], strict=False)) > 1


def test_aborted_requests_free_their_row(speculative: SpeculativeDecoder) -> None:
    scheduler = Scheduler(speculative)
    seen: list[Progress] = []
    rid = scheduler.submit(prompts()[1], MAX_NEW, seen.append)
    with torch.inference_mode():
        scheduler.step()
        scheduler.abort(rid)
        while scheduler.step():
            pass
    assert len(seen) == 1 and seen[0].done is None
    assert scheduler.load == (0, 0) and len(speculative.free_slots) == speculative.max_running_requests


def test_requests_it_cannot_serve_are_refused_at_submit(speculative: SpeculativeDecoder) -> None:
    scheduler = Scheduler(speculative)
    with pytest.raises(ValueError, match="exceeds the context"):
        scheduler.submit([1] * 500, 64, lambda p: None)
    with pytest.raises(ValueError, match="empty prompt"):
        scheduler.submit([], 4, lambda p: None)
    with pytest.raises(ValueError, match="token ids"):
        scheduler.submit([999], 4, lambda p: None)
