"""The reference engine's scheduler: continuous batching, one thread owning the models.

Requests wait in arrival order and are admitted at step boundaries while fewer than
`max_running_requests` run, as sglang's scheduler does. A step is either a prefill of the newly
admitted requests (one right-padded forward) or one decode step shared by every running request;
prefill goes first, so a request joins the running batch at the next decode step. Finished and
aborted requests leave at the step boundary and free their cache row. After each step every
request it touched hears of its progress through its own callback, from the scheduler thread.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import torch

from specctl.engines.reference.metrics import Step
from specctl.engines.reference.speculate import FinishedRequest, Request, SpeculativeDecoder
from specctl.engines.reference.tokenizer import EOS_ID

__all__ = ["Progress", "Scheduler"]


@dataclass(frozen=True)
class Progress:
    """What a request's client sees after a step: its output so far, then the finished FinishedRequest
    (or the error that ended it)."""

    output_ids: tuple[int, ...]
    done: FinishedRequest | None = None
    error: str | None = None


@dataclass(eq=False)  # identity: a ticket is one request
class _Ticket:
    rid: str
    prompt: list[int]
    max_new: int
    stops: Collection[int]
    on_progress: Callable[[Progress], None]
    arrival: float = field(default_factory=time.perf_counter)
    request: Request | None = None


class Scheduler:
    """Admits, prefills and decodes requests on one engine; `start` runs it in its own thread.

    Args:
        engine: the loaded engine; its `max_running_requests` bounds the running batch.
        on_error: told of an exception a step raised (the requests in it end with that error).
        on_step: told what each step did (the /metrics exporter counts it), from the scheduler thread.
    """

    def __init__(
        self,
        engine: SpeculativeDecoder,
        on_error: Callable[[BaseException], None] | None = None,
        on_step: Callable[[Step], None] | None = None,
    ) -> None:
        self.engine = engine
        self.on_error = on_error
        self.on_step = on_step
        self._waiting: deque[_Ticket] = deque()
        self._running: list[_Ticket] = []
        self._aborted: set[str] = set()
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    # --- any thread --------------------------------------------------------------------------------

    def submit(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        on_progress: Callable[[Progress], None],
        stop_ids: Collection[int] = (EOS_ID,),
    ) -> str:
        """Queue a request and return its id; a request the engine cannot serve is a ValueError now."""
        self.engine.check(prompt_ids, max_new_tokens)
        ticket = _Ticket(uuid.uuid4().hex, list(prompt_ids), max_new_tokens, tuple(stop_ids), on_progress)
        with self._wake:
            self._waiting.append(ticket)
            self._wake.notify()
        return ticket.rid

    def abort(self, rid: str) -> None:
        """Drop a request (its client went away) at the next step boundary."""
        with self._wake:
            self._aborted.add(rid)
            self._wake.notify()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="reference-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Finish the step under way and end the thread; waiting requests are left unanswered."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def load(self) -> tuple[int, int]:
        """(running, waiting) requests."""
        with self._wake:
            return len(self._running), len(self._waiting)

    # --- the scheduler thread --------------------------------------------------------------------

    def _loop(self) -> None:
        with torch.inference_mode():
            while True:
                with self._wake:
                    while not self._stopping and not self._waiting and not self._running:
                        self._wake.wait()
                    if self._stopping:
                        return
                self.step()

    def step(self) -> bool:
        """One scheduling step: a prefill of admitted requests, else a decode step; False when idle."""
        admitted = self._admit()
        batch = admitted or list(self._running)
        if not batch:
            return False
        requests = [t.request for t in batch if t.request is not None]
        drafts_before = [
            (r.generation.spec_num_correct_drafts, r.generation.spec_num_proposed_drafts) for r in requests
        ]
        try:
            if admitted:
                self.engine.prefill(requests)
            else:
                self.engine.step(requests)
        except Exception as exc:  # noqa: BLE001 - a forward failed: end the requests in it, keep serving the rest
            if self.on_error is not None:
                self.on_error(exc)
            for ticket in batch:
                self._leave(ticket, Progress(self._output(ticket), error=f"{type(exc).__name__}: {exc}"))
            return True
        if self.on_step is not None:
            self.on_step(self._counted(bool(admitted), requests, drafts_before))
        for ticket in batch:
            request = ticket.request
            assert request is not None
            if request.finish is not None:
                self._leave(ticket, Progress(self._output(ticket), done=request.generation))
            else:
                ticket.on_progress(Progress(self._output(ticket)))
        return True

    def _counted(self, prefill: bool, requests: list[Request], drafts_before: list[tuple[int, int]]) -> Step:
        """What the step did, from the requests' counters before and after it."""
        with self._wake:
            running, waiting = len(self._running), len(self._waiting)
        if prefill:
            tokens = sum(len(r.prompt) for r in requests)
            return Step("prefill", len(requests), tokens, running - len(requests), waiting)
        correct = sum(
            r.generation.spec_num_correct_drafts - c for r, (c, _) in zip(requests, drafts_before, strict=True)
        )
        proposed = requests[0].generation.spec_num_proposed_drafts - drafts_before[0][1]
        return Step("decode", len(requests), correct + len(requests), running, waiting, correct, proposed)

    def _admit(self) -> list[_Ticket]:
        """Drop aborted requests; move waiting ones into the running batch while there is room."""
        with self._wake:
            aborted, self._aborted = self._aborted, set()
            self._waiting = deque(t for t in self._waiting if t.rid not in aborted)
            for ticket in [t for t in self._running if t.rid in aborted]:
                self._running.remove(ticket)
                if ticket.request is not None:
                    self.engine.release(ticket.request)
            admitted: list[_Ticket] = []
            while self._waiting and len(self._running) < self.engine.max_running_requests:
                ticket = self._waiting.popleft()
                ticket.request = self.engine.start(ticket.prompt, ticket.max_new, ticket.stops, ticket.arrival)
                self._running.append(ticket)
                admitted.append(ticket)
            return admitted

    def _leave(self, ticket: _Ticket, progress: Progress) -> None:
        with self._wake:
            if ticket in self._running:
                self._running.remove(ticket)
        if ticket.request is not None:
            self.engine.release(ticket.request)
        ticket.on_progress(progress)

    @staticmethod
    def _output(ticket: _Ticket) -> tuple[int, ...]:
        return tuple(ticket.request.output_ids) if ticket.request is not None else ()
