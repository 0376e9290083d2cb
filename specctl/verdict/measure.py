"""Live measurement: run a workload against a server and aggregate what the server reports per request."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specctl.verdict.client import EngineClient
from specctl.verdict.generation import Generation, parse_generate
from specctl.verdict.workload import Workload


@dataclass(frozen=True)
class Measurement:
    """Aggregates over requests, never the server's lifetime average."""

    def to_dict(self) -> dict[str, object]:
        """Per request what the server reported, compact (for the ledger and `diff`)."""
        return {
            "wall_s": round(self.wall_s, 4),
            "requests": [
                {
                    "completion_tokens": g.completion_tokens,
                    "spec_verify_ct": g.spec_verify_ct,
                    "spec_accept_length": g.spec_accept_length,
                    "spec_num_correct_drafts": g.spec_num_correct_drafts,
                    "spec_num_proposed_drafts": g.spec_num_proposed_drafts,
                    "e2e_latency": g.e2e_latency_s,
                    "first_token_latency": g.first_token_latency_s,
                    "client_latency": round(g.client_latency_s, 5),
                    **(
                        {"client_first_token": round(g.client_first_token_s, 5)}
                        if g.client_first_token_s is not None
                        else {}
                    ),
                }
                for g in self.generations
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        """The inverse of to_dict (a baseline read back from the ledger)."""

        def one(r: Mapping[str, Any]) -> Generation:
            g = parse_generate({"meta_info": {**r, "finish_reason": None}}, float(r.get("client_latency") or 0.0))
            first = r.get("client_first_token")
            return dataclasses.replace(g, client_first_token_s=float(first)) if isinstance(first, (int, float)) else g

        return cls(tuple(one(r) for r in data.get("requests", ())), float(data.get("wall_s", 0.0)))

    generations: tuple[Generation, ...]
    wall_s: float

    @property
    def completion_tokens(self) -> int:
        return sum(g.completion_tokens for g in self.generations)

    @property
    def mean_accept_length(self) -> float | None:
        """Σ completion_tokens / Σ spec_verify_ct, as sglang defines accept length."""
        verify = sum(g.spec_verify_ct or 0 for g in self.generations)
        return self.completion_tokens / verify if verify else None

    @property
    def acceptance_rate(self) -> float | None:
        proposed = sum(g.spec_num_proposed_drafts or 0 for g in self.generations)
        return sum(g.spec_num_correct_drafts or 0 for g in self.generations) / proposed if proposed else None

    @property
    def wall_tokens_per_s(self) -> float:
        return self.completion_tokens / self.wall_s if self.wall_s else 0.0


@dataclass(frozen=True)
class Prompts:
    """What each request of a workload sends. By default the chat messages, so the server applies the
    model's own chat template. `input_ids`, when set, are those same messages already rendered by the
    host's tokenizer, sent to the native /generate: for engine versions whose chat endpoint returns
    no `meta_info` (sglang before 0.5.13), so the speculative counters still come back."""

    workload: Workload
    input_ids: tuple[tuple[int, ...], ...] | None = None

    @property
    def route(self) -> str:
        return "/generate" if self.input_ids is not None else "/v1/chat/completions"

    def stream(self, client: EngineClient, i: int, *, max_new_tokens: int, temperature: float) -> Generation:
        """Request `i` streamed from the native /generate (which needs the rendered ids)."""
        if self.input_ids is None:
            raise ValueError("streaming needs the prompts rendered into ids (verify renders them on the host)")
        return client.generate_stream(
            input_ids=self.input_ids[i % len(self.input_ids)], max_new_tokens=max_new_tokens, temperature=temperature
        )

    def send(self, client: EngineClient, i: int, *, max_new_tokens: int, temperature: float) -> Generation:
        """Request `i` of the workload (cycling through it)."""
        if self.input_ids is not None:
            return client.generate(
                input_ids=self.input_ids[i % len(self.input_ids)],
                max_new_tokens=max_new_tokens,
                temperature=temperature,
            )
        requests = self.workload.requests
        return client.chat(requests[i % len(requests)], max_new_tokens=max_new_tokens, temperature=temperature)


def warm_up(client: EngineClient, prompts: Prompts, *, max_new_tokens: int, temperature: float = 0.0) -> None:
    """One short request that is not counted: first-request costs (allocation, lazy init) stay out of the numbers."""
    prompts.send(client, 0, max_new_tokens=min(8, max_new_tokens), temperature=temperature)


def measure(
    client: EngineClient,
    prompts: Prompts,
    *,
    requests: int,
    max_new_tokens: int,
    temperature: float = 0.0,
    concurrency: int = 1,
    request_rate: float | None = None,
    stream: bool = False,
    on_request: Callable[[int, Generation], None] = lambda i, g: None,
    enough: Callable[[Measurement], bool] = lambda m: False,
    cancelled: Callable[[], bool] | None = None,
) -> Measurement:
    """Send up to `requests` requests of the workload (cycling through it), at most `concurrency` in
    flight, started no faster than `request_rate` per second on average (Poisson arrivals, seeded,
    so every run sends the same schedule); stop starting new ones when `enough` says the requests so
    far decide the verdict, or when `cancelled` (by default, when the client's cancel token is).
    Requests already sent are finished and counted. A cancel during a request raises Cancelled from
    the client: a half-finished request is no measurement."""
    stop = cancelled if cancelled is not None else (lambda: client.cancel.cancelled)
    generations: list[Generation] = []
    lock = threading.Lock()
    issued = 0
    done = False
    failures: list[BaseException] = []
    arrivals = _arrivals(request_rate, requests)
    start = time.perf_counter()

    def send(i: int) -> Generation:
        if stream:
            return prompts.stream(client, i, max_new_tokens=max_new_tokens, temperature=temperature)
        return prompts.send(client, i, max_new_tokens=max_new_tokens, temperature=temperature)

    def worker() -> None:
        nonlocal issued, done
        while True:
            with lock:
                if done or issued >= requests or failures or stop():
                    return
                i = issued
                issued += 1
            wait = arrivals[i] - (time.perf_counter() - start)
            if wait > 0:
                time.sleep(wait)
            try:
                generation = send(i)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller: the first failure ends the measurement
                with lock:
                    failures.append(exc)
                return
            with lock:
                generations.append(generation)
                on_request(len(generations) - 1, generation)
                if len(generations) < requests and enough(Measurement(tuple(generations), time.perf_counter() - start)):
                    done = True

    if concurrency <= 1:
        worker()
    else:
        threads = [
            threading.Thread(target=worker, name=f"request {n}", daemon=True) for n in range(min(concurrency, requests))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if failures:
        raise failures[0]
    return Measurement(tuple(generations), time.perf_counter() - start)


def _arrivals(rate: float | None, count: int) -> list[float]:
    """Seconds after the start at which each request may be sent: all at once without a rate, else
    a Poisson process of that rate with a fixed seed (the same schedule every run)."""
    if not rate:
        return [0.0] * count
    rng = random.Random(0x5EED)
    times, t = [], 0.0
    for _ in range(count):
        times.append(t)
        t += rng.expovariate(rate)
    return times
