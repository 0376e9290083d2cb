"""The reference engine's decoding: batched greedy generation, with EAGLE-3 chain speculation when a drafter is given.

Sequences of different lengths share every forward: each owns a row (slot) of the KV caches with its
own length, new tokens are right-padded and masked, and each keeps only its own tokens. With a
drafter, one decode step drafts `num_steps` tokens for every sequence (the drafter batched over
them), verifies every sequence's pending token + drafts in ONE target forward, lets each keep the
longest prefix equal to the target's greedy choices plus the bonus token, and rolls both caches back
row by row. Output is therefore token for token the target's plain greedy output, alone or batched;
only the speed and the counters change. `scheduler` decides which sequences share a step.

The counters mean what sglang 0.5.23's `meta_info` means (reference 4.2): the first token comes from
prefill and is not a verify step, so `completion_tokens / spec_verify_ct` is sglang's
`spec_accept_length`, bonus and first token included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from specctl.engines.reference.adaptive import AdaptiveSteps
from specctl.engines.reference.model import Eagle3Drafter, TargetModel, TargetOutput, load_drafter, load_target
from specctl.engines.reference.roofline import Roofline
from specctl.engines.reference.tokenizer import EOS_ID, PAD_ID, encode
from specctl.engines.sglang import capture as capture_table

__all__ = [
    "SGLANG_VERSION",
    "ForwardCounts",
    "FinishedRequest",
    "SpeculativeDecoder",
    "Request",
    "load_drafter_ids",
    "resolve_capture",
]

# the sglang release whose capture convention and meta_info the reference engine follows
SGLANG_VERSION = "0.5.23"
TARGET_ARCHITECTURE = "LlamaForCausalLM"


@dataclass
class FinishedRequest:
    """One finished request: its tokens, sglang's usage and spec counters, and its latencies.

    The spec_* fields stay zero/empty without a drafter (and when no verify step ran, e.g.
    max_new_tokens 1); sglang then omits them from meta_info, which `spec_meta_info` mirrors.
    """

    output_ids: list[int]
    prompt_tokens: int
    finish_reason: Literal["length", "stop"]
    first_token_s: float
    e2e_s: float
    spec_verify_ct: int = 0
    spec_num_correct_drafts: int = 0
    spec_num_proposed_drafts: int = 0
    spec_correct_drafts_histogram: list[int] = field(default_factory=list)

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def spec_accept_length(self) -> float | None:
        return self.completion_tokens / self.spec_verify_ct if self.spec_verify_ct else None

    @property
    def spec_accept_rate(self) -> float | None:
        return self.spec_num_correct_drafts / self.spec_num_proposed_drafts if self.spec_num_proposed_drafts else None

    def spec_meta_info(self) -> dict[str, Any]:
        """The speculative keys of sglang's final meta_info; empty when it would omit them."""
        if not self.spec_verify_ct:
            return {}
        return {
            "spec_verify_ct": self.spec_verify_ct,
            "spec_accept_length": self.spec_accept_length,
            "spec_accept_rate": self.spec_accept_rate,
            "spec_num_correct_drafts": self.spec_num_correct_drafts,
            "spec_num_proposed_drafts": self.spec_num_proposed_drafts,
            "spec_correct_drafts_histogram": list(self.spec_correct_drafts_histogram),
        }


def resolve_capture(
    drafter_dir: Path | str, num_layers: int, version: str = SGLANG_VERSION
) -> capture_table.SglangCapture:
    """Positions sglang `version` captures on a Llama target of `num_layers` for this drafter's config ids.

    Uses specctl's convention table, so the reference engine and `specctl check` agree by construction.
    """
    rule = capture_table.load_table().rule_for(version, TARGET_ARCHITECTURE)
    if rule is None:
        raise ValueError(f"sglang {version} is not in specctl's capture-convention table")
    ids = load_drafter_ids(drafter_dir)
    return capture_table.capture(rule, ids, num_layers)


def load_drafter_ids(drafter_dir: Path | str) -> list[int] | None:
    """`eagle_config.eagle_aux_hidden_state_layer_ids` of a drafter config (None when absent, as sglang reads it)."""
    config = json.loads((Path(drafter_dir) / "config.json").read_text(encoding="utf-8"))
    ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return None if ids is None else [int(i) for i in ids]


@dataclass
class Request:
    """One request being decoded: its tokens, counters, cache row, and what the drafter proposes next.

    `pending` is the newest token, not yet in the target's cache; `draft_logits`/`draft_hidden` are
    the drafter's last row, from which the next round's first draft comes.
    """

    prompt: list[int]
    max_new: int
    stops: frozenset[int]
    slot: int
    arrival: float
    generation: FinishedRequest
    finish: Literal["length", "stop"] | None = None
    pending: int = -1
    draft_logits: Tensor | None = None
    draft_hidden: Tensor | None = None

    @property
    def output_ids(self) -> list[int]:
        return self.generation.output_ids

    def append(self, tokens: Sequence[int]) -> None:
        """Add tokens until a stop id or max_new ends the output (later ones are dropped, as in sglang)."""
        for token in tokens:
            self.generation.output_ids.append(token)
            self.pending = token
            self.finish = _finished(self.generation.output_ids, self.max_new, self.stops)
            if self.finish is not None:
                now = time.perf_counter()
                self.generation.finish_reason = self.finish
                self.generation.e2e_s = now - self.arrival
                return


@dataclass
class ForwardCounts:
    """Model forwards since start: batching shows as fewer forwards for the same tokens."""

    target: int = 0
    drafter: int = 0


class SpeculativeDecoder:
    """A loaded target (and drafter) that decodes greedily for up to `max_running_requests` sequences at once.

    Args:
        target_dir: the target checkpoint (`LlamaForCausalLM`).
        drafter_dir: an EAGLE-3 drafter checkpoint, or None for plain greedy decoding.
        num_steps: draft tokens per round (sglang `--speculative-num-steps`), default 3.
        topk: sglang `--speculative-eagle-topk`; only 1 (chain drafting) is implemented.
        num_draft_tokens: sglang `--speculative-num-draft-tokens`; like sglang with topk 1 it is
            forced to num_steps + 1 (read the resolved value from `self.num_draft_tokens`).
        capture_positions: target positions concatenated into the drafter's input (ascending; see
            `resolve_capture`); None resolves them from the drafter's config under sglang 0.5.23.
        threads: torch intra-op threads (a process-wide setting); the tiny matmuls run fastest on 1.
        device: where to compute ("cpu", or "cuda" for the GPU benchmark); float64 either way.
        max_running_requests: sequences decoded together (rows of the KV caches), default 16.
        adaptive: sglang's adaptive-speculation tiers (None: num_steps is fixed).
        roofline: a GPU-like minimum wall time per target forward (None: the CPU's own time).
        graph_positions: what a verify step replayed from a CUDA graph captures, where it differs from
            `capture_positions` (sglang 0.4.9-0.5.10.post1 captured its graphs before applying the
            drafter's ids); None: every step captures `capture_positions`.
        graph_max_bs: the largest verify batch that replays a graph (sglang `--cuda-graph-max-bs`).

    Raises:
        ValueError: topk other than 1, num_steps < 1, or positions the target cannot capture.
        CheckpointError: a checkpoint that cannot be read or does not match its config.
    """

    def __init__(
        self,
        target_dir: Path | str,
        drafter_dir: Path | str | None = None,
        *,
        num_steps: int = 3,
        topk: int = 1,
        num_draft_tokens: int | None = None,
        capture_positions: Sequence[int] | None = None,
        threads: int | None = 1,
        device: str = "cpu",
        max_running_requests: int = 16,
        adaptive: Mapping[str, Mapping[str, Any]] | None = None,
        roofline: Roofline | None = None,
        graph_positions: Sequence[int] | None = None,
        graph_max_bs: int = 48,
    ) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        if max_running_requests < 1:
            raise ValueError(f"max_running_requests must be >= 1, got {max_running_requests}")
        self.device = torch.device(device)
        self.target: TargetModel = load_target(target_dir).to(self.device)
        self.drafter: Eagle3Drafter | None = None
        self.capture_positions: tuple[int, ...] = ()
        self.num_steps = 0
        self.num_draft_tokens = 0
        self.max_running_requests = max_running_requests
        self.forwards = ForwardCounts()
        self.roofline = roofline
        self.graph_positions = tuple(graph_positions) if graph_positions is not None else None
        self.graph_max_bs = graph_max_bs
        if drafter_dir is not None:
            if topk != 1:
                raise ValueError(f"speculative_eagle_topk {topk}: the reference engine drafts chains only (topk 1)")
            if num_steps < 1:
                raise ValueError(f"speculative_num_steps must be >= 1, got {num_steps}")
            layers = self.target.config.num_hidden_layers
            if capture_positions is None:
                outcome = resolve_capture(drafter_dir, layers)
                if outcome.error is not None:
                    raise ValueError(f"the target cannot capture this drafter's layers: {outcome.error}")
                capture_positions = outcome.captured
            positions = tuple(sorted(set(capture_positions)))
            if not positions or positions[0] < 0 or positions[-1] >= layers:
                raise ValueError(
                    f"capture positions {list(positions)} must lie in 0..{layers - 1} for a {layers}-layer target"
                )
            self.drafter = load_drafter(drafter_dir).to(self.device)
            self.capture_positions = positions
            self.num_steps = num_steps
            self.num_draft_tokens = num_steps + 1  # sglang forces this for topk 1 (reference 1.4 item 10)
        # sglang's adaptive speculation: num_steps chosen per batch from the acceptance seen (None: fixed)
        self.adaptive = AdaptiveSteps.start(adaptive, num_steps) if adaptive is not None and self.drafter else None
        self.cache = self.target.new_cache(self.max_tokens, max_running_requests)
        self.draft_cache = self.drafter.new_cache(self.max_tokens, max_running_requests) if self.drafter else None
        self.free_slots = list(range(max_running_requests - 1, -1, -1))

    @property
    def max_tokens(self) -> int:
        """Context length: prompt + generated tokens (+ draft slack) must fit in the target's positions."""
        return self.target.config.max_position_embeddings

    def warmup(self) -> None:
        """A short generation, so that a drafter/capture width mismatch fails now, as at sglang's warmup."""
        self.generate(encode("warmup"), max_new_tokens=4, stop_ids=())

    # --- one request or a fixed batch, start to finish ------------------------------------------------

    def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Collection[int] = (EOS_ID,)
    ) -> FinishedRequest:
        """Greedy continuation of `prompt_ids`: up to `max_new_tokens` tokens, ending early after a stop id.

        A stop id that ends the output is part of `output_ids` (and `completion_tokens`), as in sglang.
        """
        return self.generate_batch([prompt_ids], max_new_tokens, stop_ids)[0]

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: Collection[int] = (EOS_ID,)
    ) -> list[FinishedRequest]:
        """`generate` for every prompt, all decoded together (finished ones leave the batch)."""
        if len(prompts) > self.max_running_requests:
            raise ValueError(f"{len(prompts)} prompts > max_running_requests {self.max_running_requests}")
        sequences = [self.start(p, max_new_tokens, stop_ids) for p in prompts]
        try:
            with torch.inference_mode():
                self.prefill(sequences)
                running = [s for s in sequences if s.finish is None]
                while running:
                    self.step(running)
                    running = [s for s in running if s.finish is None]
        finally:
            for s in sequences:
                self.release(s)
        return [s.generation for s in sequences]

    # --- the pieces a scheduler composes -------------------------------------------------------------

    def check(self, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
        """Raise ValueError for a request this engine cannot serve (before it takes a cache row)."""
        if not prompt_ids:
            raise ValueError("empty prompt")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        vocab = self.target.config.vocab_size
        if min(prompt_ids) < 0 or max(prompt_ids) >= vocab:
            raise ValueError(f"token ids must lie in 0..{vocab - 1}")
        slack = self.num_draft_tokens
        if len(prompt_ids) + max_new_tokens + slack > self.max_tokens:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens + max_new_tokens {max_new_tokens} exceeds the "
                f"context of {self.max_tokens - slack} tokens"
            )

    def start(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        stop_ids: Collection[int] = (EOS_ID,),
        arrival: float | None = None,
    ) -> Request:
        """A new sequence in a free cache row; `arrival` (perf_counter) is when latencies start."""
        self.check(prompt_ids, max_new_tokens)
        if not self.free_slots:
            raise RuntimeError(f"all {self.max_running_requests} cache rows are taken")
        slot = self.free_slots.pop()
        self.cache.truncate(slot, 0)
        if self.draft_cache is not None:
            self.draft_cache.truncate(slot, 0)
        prompt = list(prompt_ids)
        generation = FinishedRequest([], len(prompt), "length", 0.0, 0.0)
        if self.drafter is not None:
            most = self.adaptive.max_steps + 1 if self.adaptive else self.num_draft_tokens
            generation.spec_correct_drafts_histogram = [0] * most
        return Request(
            prompt,
            max_new_tokens,
            frozenset(stop_ids),
            slot,
            time.perf_counter() if arrival is None else arrival,
            generation,
        )

    def release(self, sequence: Request) -> None:
        """Give the sequence's cache row back (finished or aborted)."""
        if sequence.slot not in self.free_slots:
            self.free_slots.append(sequence.slot)

    def prefill(self, sequences: list[Request]) -> None:
        """One target forward over the new prompts (right-padded): each gets its first token; with a
        drafter, one drafter forward over them proposes each one's first draft."""
        slots = [s.slot for s in sequences]
        lengths = [len(s.prompt) for s in sequences]
        out = self._target(_padded([s.prompt for s in sequences]), slots, tokens=sum(lengths))
        for s, n in zip(sequences, lengths, strict=True):
            self.cache.truncate(s.slot, n)
        last = torch.tensor(lengths, device=self.device) - 1
        rows = torch.arange(len(sequences), device=self.device)
        firsts = out.logits[rows, last].argmax(-1).tolist()
        now = time.perf_counter()
        for s, token in zip(sequences, firsts, strict=True):
            s.generation.first_token_s = now - s.arrival
            s.append([token])
        if self.drafter is None:
            return
        keep = [i for i, s in enumerate(sequences) if s.finish is None]
        if not keep:
            return
        # EAGLE-3 rows: row i reads (embedding of token i+1, target features at token i) to draft token i+2
        shifted = [sequences[i].prompt[1:] + [firsts[i]] for i in keep]
        features = self._features(out.hidden_states)[keep]
        self._draft_extend([sequences[i] for i in keep], shifted, features)

    def step(self, sequences: list[Request]) -> None:
        """One decode step for every sequence together: a plain greedy token each, or a speculative round."""
        if self.drafter is None:
            out = self._target(self._ids([[s.pending] for s in sequences]), [s.slot for s in sequences])
            for s, token in zip(sequences, out.logits[:, -1].argmax(-1).tolist(), strict=True):
                s.append([token])
            return
        self._speculate(sequences)

    # --- internals -------------------------------------------------------------------------------------

    def _speculate(self, sequences: list[Request]) -> None:
        assert self.drafter is not None and self.draft_cache is not None
        drafter, draft_cache = self.drafter, self.draft_cache
        slots = [s.slot for s in sequences]
        committed = [self.cache.lengths[slot] for slot in slots]
        count = self.adaptive.steps_for(len(sequences)) if self.adaptive else self.num_draft_tokens - 1
        if count == 0:  # adaptive chose no drafting for this batch size: a plain step that keeps the drafter current
            self._plain_step(sequences)
            return
        # draft `count` tokens per sequence, the drafter batched over all of them
        logits = torch.stack([s.draft_logits for s in sequences if s.draft_logits is not None])
        hidden = torch.stack([s.draft_hidden for s in sequences if s.draft_hidden is not None]).unsqueeze(1)
        drafts = [drafter.to_target_ids(logits.argmax(-1))]
        for _ in range(count - 1):
            self.forwards.drafter += 1
            out = drafter(self.target.embed(drafts[-1].unsqueeze(1)), hidden, draft_cache, slots)
            drafts.append(drafter.to_target_ids(out.logits[:, -1].argmax(-1)))
            hidden = out.hidden[:, -1:]
        for slot, length in zip(slots, committed, strict=True):
            draft_cache.truncate(slot, length)  # drop the rows drafted from the drafter's own hidden
        draft_ids = torch.stack(drafts, dim=1)
        pending = self._ids([[s.pending] for s in sequences])
        # ONE target forward verifies every sequence's pending token + drafts
        verify = self._target(torch.cat([pending, draft_ids], dim=1), slots)
        greedy = verify.logits.argmax(-1)
        accepted = (draft_ids == greedy[:, :count]).int().cumprod(dim=1).sum(dim=1).tolist()
        greedy_rows, draft_rows = greedy.tolist(), draft_ids.tolist()
        survivors: list[int] = []
        new_rows: list[list[int]] = []
        for i, s in enumerate(sequences):
            a = accepted[i]
            new_tokens = draft_rows[i][:a] + [greedy_rows[i][a]]
            self.cache.truncate(s.slot, committed[i] + a + 1)
            g = s.generation
            g.spec_verify_ct += 1
            g.spec_num_correct_drafts += a
            g.spec_num_proposed_drafts += count
            g.spec_correct_drafts_histogram[a] += 1
            s.append(new_tokens)
            if s.finish is None:
                survivors.append(i)
                new_rows.append(new_tokens)
        if self.adaptive:
            self.adaptive.observe(len(sequences), accepted)
        if survivors:
            features = self._features(verify.hidden_states, verify_batch=len(sequences))[survivors]
            self._draft_extend([sequences[i] for i in survivors], new_rows, features)

    def _plain_step(self, sequences: list[Request]) -> None:
        """One greedy token per sequence, counted as a verify with nothing proposed, the drafter fed
        the token so a later round can draft again."""
        out = self._target(self._ids([[s.pending] for s in sequences]), [s.slot for s in sequences])
        tokens = out.logits[:, -1].argmax(-1).tolist()
        survivors = []
        for i, (s, token) in enumerate(zip(sequences, tokens, strict=True)):
            s.generation.spec_verify_ct += 1
            s.generation.spec_correct_drafts_histogram[0] += 1
            s.append([token])
            if s.finish is None:
                survivors.append(i)
        if self.adaptive:
            self.adaptive.observe(len(sequences), [0] * len(sequences))
        if survivors:
            features = self._features(out.hidden_states, verify_batch=len(sequences))[survivors]
            self._draft_extend([sequences[i] for i in survivors], [[tokens[i]] for i in survivors], features)

    def _draft_extend(self, sequences: list[Request], rows: list[list[int]], features: Tensor) -> None:
        """Run the drafter over each sequence's newly committed tokens (right-padded, with the target
        features at the same positions) and keep its last real row for the next round's drafts."""
        assert self.drafter is not None and self.draft_cache is not None
        slots = [s.slot for s in sequences]
        starts = [self.draft_cache.lengths[slot] for slot in slots]
        ids = _padded(rows)
        width = ids.shape[1]
        self.forwards.drafter += 1
        out = self.drafter(self.target.embed(ids.to(self.device)), features[:, :width], self.draft_cache, slots)
        last = [len(r) - 1 for r in rows]
        for s, start, n in zip(sequences, starts, last, strict=True):
            self.draft_cache.truncate(s.slot, start + n + 1)
        index = torch.arange(len(rows), device=self.device), torch.tensor(last, device=self.device)
        for s, logits, hidden in zip(sequences, out.logits[index], out.hidden[index], strict=True):
            s.draft_logits, s.draft_hidden = logits, hidden

    def _target(self, ids: Tensor, slots: list[int], tokens: int | None = None) -> TargetOutput:
        """One target forward; `tokens` is how many of `ids` are real (not padding), for the roofline."""
        self.forwards.target += 1
        started = time.perf_counter()
        out: TargetOutput = self.target(ids.to(self.device), self.cache, slots)
        if self.roofline is not None:
            self.roofline.pad(started, ids.numel() if tokens is None else tokens)
        return out

    def _ids(self, rows: list[list[int]]) -> Tensor:
        return torch.tensor(rows, device=self.device)

    def _features(self, hidden_states: tuple[Tensor, ...], verify_batch: int | None = None) -> Tensor:
        """The captured positions concatenated in ascending order, as sglang packs them. A verify step
        of a batch a CUDA graph covers captures what the graph was captured with."""
        replayed = verify_batch is not None and verify_batch <= self.graph_max_bs
        positions = self.graph_positions if replayed and self.graph_positions is not None else self.capture_positions
        return torch.cat([hidden_states[p] for p in positions], dim=-1)


def _padded(rows: list[list[int]]) -> Tensor:
    """Rows right-padded with <pad> to one width (the padding is masked by position, then truncated away)."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])


def _finished(output: list[int], max_new: int, stops: frozenset[int]) -> Literal["length", "stop"] | None:
    if output[-1] in stops:
        return "stop"
    if len(output) >= max_new:
        return "length"
    return None
