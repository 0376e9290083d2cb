"""The reference engine's decoding loop: greedy generation, with EAGLE-3 chain speculation when a drafter is given.

One request at a time, batch 1, on the CPU. With a drafter each round drafts `num_steps` tokens
(topk 1), verifies them and the pending token in ONE target forward, keeps the longest prefix equal
to the target's greedy choices plus the bonus token, and rolls both KV caches back. Output is
therefore token for token the target's plain greedy output; only the speed and the counters change.

The counters mean what sglang 0.5.23's `meta_info` means (reference 4.2): the first token comes from
prefill and is not a verify step, so `completion_tokens / spec_verify_ct` is sglang's
`spec_accept_length`, bonus and first token included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from specctl.engines.reference.model import DraftOutput, Eagle3Drafter, KVCache, Target, load_drafter, load_target
from specctl.engines.reference.tokenizer import EOS_ID, encode
from specctl.engines.sglang import capture as capture_table

__all__ = ["SGLANG_VERSION", "Generation", "ReferenceEngine", "load_drafter_ids", "resolve_capture"]

# the sglang release whose capture convention and meta_info the reference engine follows
SGLANG_VERSION = "0.5.23"
TARGET_ARCHITECTURE = "LlamaForCausalLM"


@dataclass
class Generation:
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


def resolve_capture(drafter_dir: Path | str, num_layers: int, version: str = SGLANG_VERSION) -> capture_table.CaptureOutcome:
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


class ReferenceEngine:
    """A loaded target (and drafter) that serves greedy generations one request at a time.

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
    ) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        self.device = torch.device(device)
        self.target: Target = load_target(target_dir).to(self.device)
        self.drafter: Eagle3Drafter | None = None
        self.capture_positions: tuple[int, ...] = ()
        self.num_steps = 0
        self.num_draft_tokens = 0
        if drafter_dir is None:
            return
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
            raise ValueError(f"capture positions {list(positions)} must lie in 0..{layers - 1} for a {layers}-layer target")
        self.drafter = load_drafter(drafter_dir).to(self.device)
        self.capture_positions = positions
        self.num_steps = num_steps
        self.num_draft_tokens = num_steps + 1  # sglang forces this for topk 1 (reference 1.4 item 10)

    @property
    def max_tokens(self) -> int:
        """Context length: prompt + generated tokens (+ draft slack) must fit in the target's positions."""
        return self.target.config.max_position_embeddings

    def warmup(self) -> None:
        """A short generation, so that a drafter/capture width mismatch fails now, as at sglang's warmup."""
        self.generate(encode("warmup"), max_new_tokens=4, stop_ids=())

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Collection[int] = (EOS_ID,)) -> Generation:
        """Greedy continuation of `prompt_ids`: up to `max_new_tokens` tokens, ending early after a stop id.

        A stop id that ends the output is part of `output_ids` (and `completion_tokens`), as in sglang.
        """
        if not prompt_ids:
            raise ValueError("empty prompt")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        slack = self.num_draft_tokens
        capacity = len(prompt_ids) + max_new_tokens + slack
        if capacity > self.max_tokens:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens + max_new_tokens {max_new_tokens} exceeds the "
                             f"context of {self.max_tokens - slack} tokens")
        with torch.inference_mode():
            return self._generate(list(prompt_ids), max_new_tokens, frozenset(stop_ids), capacity)

    def _generate(self, prompt: list[int], max_new: int, stops: frozenset[int], capacity: int) -> Generation:
        start = time.perf_counter()
        target = self.target
        cache = target.new_cache(capacity)
        prefill = target(self._ids([prompt]), cache)
        token = int(prefill.logits[0, -1].argmax())
        first_token_s = time.perf_counter() - start
        output = [token]
        finish = _finished(output, max_new, stops)
        result = Generation(output, len(prompt), finish or "length", first_token_s, 0.0)

        if self.drafter is None:
            while finish is None:
                token = int(target(self._ids([[token]]), cache).logits[0, -1].argmax())
                output.append(token)
                finish = _finished(output, max_new, stops)
        else:
            drafter = self.drafter
            drafts_per_round = self.num_draft_tokens - 1
            result.spec_correct_drafts_histogram = [0] * self.num_draft_tokens
            draft_cache = drafter.new_cache(capacity)
            # EAGLE-3 rows: row i reads (embedding of token i+1, target features at token i) to draft token i+2
            draft = drafter(target.embed(self._ids([prompt[1:] + [token]])), self._features(prefill.hidden_states), draft_cache)
            while finish is None:
                committed = cache.length
                drafts = self._draft(draft, draft_cache, drafts_per_round)
                verify = target(self._ids([[token, *drafts]]), cache)
                greedy = verify.logits[0].argmax(-1).tolist()
                accepted = 0
                while accepted < drafts_per_round and drafts[accepted] == greedy[accepted]:
                    accepted += 1
                new_tokens = drafts[:accepted] + [greedy[accepted]]
                cache.truncate(committed + accepted + 1)
                draft_cache.truncate(committed)  # drop the rows drafted from the drafter's own hidden
                result.spec_verify_ct += 1
                result.spec_num_correct_drafts += accepted
                result.spec_num_proposed_drafts += drafts_per_round
                result.spec_correct_drafts_histogram[accepted] += 1
                for token in new_tokens:
                    output.append(token)
                    finish = _finished(output, max_new, stops)
                    if finish is not None:
                        break
                else:
                    features = self._features(verify.hidden_states)[:, : accepted + 1]
                    draft = drafter(target.embed(self._ids([new_tokens])), features, draft_cache)
        assert finish is not None
        result.finish_reason = finish
        result.e2e_s = time.perf_counter() - start
        return result

    def _ids(self, rows: list[list[int]]) -> Tensor:
        return torch.tensor(rows, device=self.device)

    def _features(self, hidden_states: tuple[Tensor, ...]) -> Tensor:
        """The captured positions concatenated in ascending order, as sglang packs them."""
        return torch.cat([hidden_states[p] for p in self.capture_positions], dim=-1)

    def _draft(self, draft: DraftOutput, cache: KVCache, count: int) -> list[int]:
        """`count` greedy draft tokens (target ids), feeding the drafter its own hidden after the first."""
        assert self.drafter is not None
        tokens: list[int] = []
        while True:
            draft_id = draft.logits[0, -1].argmax()
            tokens.append(int(self.drafter.to_target_ids(draft_id)))
            if len(tokens) == count:
                return tokens
            embeds = self.target.embed(self._ids([[tokens[-1]]]))
            draft = self.drafter(embeds, draft.hidden[:, -1:], cache)


def _finished(output: list[int], max_new: int, stops: frozenset[int]) -> Literal["length", "stop"] | None:
    if output[-1] in stops:
        return "stop"
    if len(output) >= max_new:
        return "length"
    return None
