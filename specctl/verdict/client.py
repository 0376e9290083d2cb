"""The one HTTP client for SGLang's API (and the reference engine's copy of it): health, server
info and generation, with `meta_info` parsed into a typed record. Standard library only."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# meta_info keys of a finished /generate response in sglang 0.5.23 (tokenizer_manager.py,
# `_calculate_spec_decoding_metrics`); the spec_* keys appear only when spec_verify_ct > 0
SPEC_KEYS = ("spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
             "spec_num_proposed_drafts", "spec_correct_drafts_histogram")


class EngineHTTPError(Exception):
    """The server answered with an error status, or not at all."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


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

    @property
    def speculative(self) -> bool:
        return bool(self.spec_verify_ct)


def parse_generate(body: Mapping[str, Any], client_latency_s: float = 0.0) -> Generation:
    """A /generate response (one request) as a Generation; missing spec keys mean no speculation."""
    meta = body.get("meta_info") or {}
    finish = meta.get("finish_reason")
    histogram = meta.get("spec_correct_drafts_histogram")
    return Generation(
        text=str(body.get("text", "")), output_ids=tuple(body.get("output_ids") or ()),
        prompt_tokens=int(meta.get("prompt_tokens", 0)), completion_tokens=int(meta.get("completion_tokens", 0)),
        finish_reason=finish.get("type") if isinstance(finish, Mapping) else finish,
        e2e_latency_s=_float(meta.get("e2e_latency")), client_latency_s=client_latency_s,
        spec_verify_ct=_int(meta.get("spec_verify_ct")), spec_accept_length=_float(meta.get("spec_accept_length")),
        spec_accept_rate=_float(meta.get("spec_accept_rate")), spec_num_correct_drafts=_int(meta.get("spec_num_correct_drafts")),
        spec_num_proposed_drafts=_int(meta.get("spec_num_proposed_drafts")),
        spec_correct_drafts_histogram=tuple(histogram) if isinstance(histogram, list) else None,
        first_token_latency_s=_float(meta.get("first_token_latency")),
    )


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class EngineClient:
    """Talks to one server: `EngineClient("http://127.0.0.1:30000")`."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, payload: Any = None, timeout_s: float | None = None) -> Any:
        data = json.dumps(payload).encode() if payload is not None else None
        request = urllib.request.Request(self.base_url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise EngineHTTPError(f"{method} {path}: HTTP {exc.code} {exc.read()[:200]!r}", status=exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise EngineHTTPError(f"{method} {path}: {getattr(exc, 'reason', exc)}") from None
        return json.loads(raw) if raw.strip() else None

    def healthy(self, timeout_s: float = 30.0) -> bool:
        """A real generation answered (`/health_generate` returns 200), as sglang's readiness means."""
        try:
            self._request("GET", "/health_generate", timeout_s=timeout_s)
            return True
        except EngineHTTPError:
            return False

    def server_info(self) -> dict[str, Any]:
        info: dict[str, Any] = self._request("GET", "/server_info")
        return info

    def model_info(self) -> dict[str, Any]:
        info: dict[str, Any] = self._request("GET", "/model_info")
        return info

    def flush_cache(self) -> None:
        self._request("POST", "/flush_cache")

    def chat(self, messages: Sequence[Mapping[str, str]], *, max_new_tokens: int = 128, temperature: float = 0.0) -> Generation:
        """An OpenAI chat request that also asks for sglang's meta_info (`return_meta_info`), so the
        model's own chat template is applied and the speculative counters still come back."""
        payload = {"messages": [dict(m) for m in messages], "max_tokens": max_new_tokens, "temperature": temperature,
                   "return_meta_info": True}
        start = time.perf_counter()
        body = self._request("POST", "/v1/chat/completions", payload)
        choice = body["choices"][0]
        usage = body.get("usage") or {}
        meta = dict(choice.get("meta_info") or {})
        meta.setdefault("prompt_tokens", usage.get("prompt_tokens", 0))
        meta.setdefault("completion_tokens", usage.get("completion_tokens", 0))
        meta.setdefault("finish_reason", choice.get("finish_reason"))
        return parse_generate({"text": (choice.get("message") or {}).get("content", ""), "meta_info": meta},
                              time.perf_counter() - start)

    def generate(self, *, text: str | None = None, input_ids: Sequence[int] | None = None, max_new_tokens: int = 128,
                 temperature: float = 0.0) -> Generation:
        payload: dict[str, Any] = {"sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature}}
        if input_ids is not None:
            payload["input_ids"] = list(input_ids)
        else:
            payload["text"] = text or ""
        start = time.perf_counter()
        body = self._request("POST", "/generate", payload)
        return parse_generate(body, time.perf_counter() - start)
