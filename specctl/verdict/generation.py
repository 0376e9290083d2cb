"""A Generation: one finished request as the server reports it (sglang's `meta_info`, typed), and
the parsers that read it from a /generate or a /v1/chat/completions answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SPEC_KEYS", "Generation", "MalformedBody", "completion_tokens", "parse_chat", "parse_generate"]

# meta_info keys of a finished /generate response in sglang 0.5.23 (tokenizer_manager.py,
# `_calculate_spec_decoding_metrics`); the spec_* keys appear only when spec_verify_ct > 0
SPEC_KEYS = (
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
    "spec_correct_drafts_histogram",
)


class MalformedBody(ValueError):
    """Raised by parse_generate and parse_chat for a body of the wrong shape; the client turns it
    into an EngineAnswerError that names the request."""


@dataclass(frozen=True)
class Generation:
    """One finished request as the server reports it, plus the client's own wall-clock time."""

    text: str
    output_ids: tuple[int, ...]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    e2e_latency_s: float | None
    client_latency_s: float
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_num_correct_drafts: int | None = None
    spec_num_proposed_drafts: int | None = None
    spec_correct_drafts_histogram: tuple[int, ...] | None = None
    first_token_latency_s: float | None = None
    client_first_token_s: float | None = None  # streaming: when the first chunk with a token arrived

    @property
    def speculative(self) -> bool:
        return bool(self.spec_verify_ct)


def parse_generate(body: object, client_latency_s: float = 0.0) -> Generation:
    """A /generate response (one request) as a Generation; missing spec keys mean no speculation.

    A key that is present must have its documented type: a counter sent as text would otherwise
    read as "no speculation" and pass or fail a gate for the wrong reason.

    Raises:
        MalformedBody: the body is not an object, or a known key has the wrong type.
    """
    answer = _object_at(body, "the answer")
    meta = _object_at(answer.get("meta_info"), "meta_info", optional=True)
    finish = meta.get("finish_reason")
    if isinstance(finish, Mapping):
        finish = finish.get("type")
    if finish is not None and not isinstance(finish, str):
        raise MalformedBody(f"meta_info.finish_reason: expected a string or {{'type': ...}}, got {finish!r:.80}")
    text = answer.get("text")
    if text is not None and not isinstance(text, str):
        raise MalformedBody(f"text: expected a string, got {text!r:.80}")
    return Generation(
        text=text or "",
        output_ids=_ints_at(answer.get("output_ids"), "output_ids") or (),
        prompt_tokens=_int_at(meta.get("prompt_tokens"), "meta_info.prompt_tokens") or 0,
        completion_tokens=_int_at(meta.get("completion_tokens"), "meta_info.completion_tokens") or 0,
        finish_reason=finish,
        e2e_latency_s=_float_at(meta.get("e2e_latency"), "meta_info.e2e_latency"),
        client_latency_s=client_latency_s,
        spec_verify_ct=_int_at(meta.get("spec_verify_ct"), "meta_info.spec_verify_ct"),
        spec_accept_length=_float_at(meta.get("spec_accept_length"), "meta_info.spec_accept_length"),
        spec_accept_rate=_float_at(meta.get("spec_accept_rate"), "meta_info.spec_accept_rate"),
        spec_num_correct_drafts=_int_at(meta.get("spec_num_correct_drafts"), "meta_info.spec_num_correct_drafts"),
        spec_num_proposed_drafts=_int_at(meta.get("spec_num_proposed_drafts"), "meta_info.spec_num_proposed_drafts"),
        spec_correct_drafts_histogram=_ints_at(
            meta.get("spec_correct_drafts_histogram"), "meta_info.spec_correct_drafts_histogram"
        ),
        first_token_latency_s=_float_at(meta.get("first_token_latency"), "meta_info.first_token_latency"),
    )


def parse_chat(body: object, client_latency_s: float = 0.0) -> Generation:
    """A /v1/chat/completions response whose first choice carries sglang's `meta_info`; `usage`
    fills the token counts when meta_info was not returned.

    Raises:
        MalformedBody: no non-empty `choices` list, or a part of the wrong shape.
    """
    answer = _object_at(body, "the answer")
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedBody(f"expected a non-empty `choices` list, got {choices!r:.80}")
    choice = _object_at(choices[0], "choices[0]")
    message = _object_at(choice.get("message"), "choices[0].message", optional=True)
    usage = _object_at(answer.get("usage"), "usage", optional=True)
    meta = dict(_object_at(choice.get("meta_info"), "choices[0].meta_info", optional=True))
    meta.setdefault("prompt_tokens", usage.get("prompt_tokens"))
    meta.setdefault("completion_tokens", usage.get("completion_tokens"))
    meta.setdefault("finish_reason", choice.get("finish_reason"))
    return parse_generate({"text": message.get("content"), "meta_info": meta}, client_latency_s)


def _object_at(value: object, where: str, *, optional: bool = False) -> Mapping[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedBody(f"{where}: expected a JSON object, got {value!r:.80}")
    return value


def _int_at(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise MalformedBody(f"{where}: expected an integer, got {value!r:.80}")


def _float_at(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise MalformedBody(f"{where}: expected a number, got {value!r:.80}")


def _ints_at(value: object, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise MalformedBody(f"{where}: expected a list of integers, got {value!r:.80}")
    return tuple(_int_at(v, where) or 0 for v in value)


def completion_tokens(chunk: Mapping[str, Any]) -> int:
    """How many tokens a /generate answer (or one chunk of its stream) says were generated so far."""
    meta = _object_at(chunk.get("meta_info"), "meta_info", optional=True)
    return _int_at(meta.get("completion_tokens"), "meta_info.completion_tokens") or 0
