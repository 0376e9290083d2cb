"""The one HTTP client for SGLang's API (and the reference engine's copy of it): health, server
info and generation, with `meta_info` parsed into a Generation (verdict/generation.py). Standard
library only.

Every request has a deadline for its whole exchange (name resolution, connect, send, headers and
body), not per socket operation (verdict/_deadline.py), and wakes every `TICK_S` to honour the
cancel token. Every failure is an EngineHTTPError (verdict/engine_errors.py) that names the request.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specctl.cancel import NEVER, CancelToken
from specctl.verdict._deadline import Call, Connection
from specctl.verdict._stream import Stream
from specctl.verdict.engine_errors import MAX_ANSWER_BYTES, SHOWN_BYTES, EngineAnswerError, EngineHTTPError
from specctl.verdict.generation import Generation, MalformedBody, parse_chat, parse_generate

__all__ = ["CHAT_PATH", "EngineClient", "MetricsPage"]


@dataclasses.dataclass(frozen=True)
class MetricsPage:
    """A `/metrics` answer as it came: the content type the server declared, and the body."""

    content_type: str
    body: bytes


CHAT_PATH = "/v1/chat/completions"


class EngineClient:
    """Talks to one server: `EngineClient("http://127.0.0.1:30000")`.

    Args:
        base_url: `http://host:port`, optionally with a path prefix; plain HTTP only, as sglang serves.
        timeout_s: the deadline of one whole request (600); `healthy` has its own, shorter one.
        cancel: a token whose cancellation ends any request within `TICK_S` (NEVER).
    """

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, cancel: CancelToken = NEVER) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{base_url!r}: the engine client speaks plain http://host:port only")
        self.base_url = base_url.rstrip("/")
        self.host = parts.netloc  # how errors name the server
        self._address = (parts.hostname, parts.port or 80)
        self._prefix = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self.cancel = cancel

    def _exchange(
        self,
        method: str,
        path: str,
        payload: Any = None,
        timeout_s: float | None = None,
        read: Callable[[http.client.HTTPResponse], None] | None = None,
    ) -> tuple[int, bytes]:
        """Status and body of one request, whatever the status; bounded in total by its deadline.
        With `read`, a 2xx body is handed to it as it arrives (a stream) and the body returned is empty.

        Raises:
            Cancelled: the token was cancelled before or during the request.
            EngineTimeout: no complete answer within the deadline.
            EngineAnswerError: what came back is not HTTP, or is cut short, or is too large.
            EngineHTTPError: the server could not be reached, or dropped the connection.
        """
        deadline_s = self.timeout_s if timeout_s is None else timeout_s
        call = Call(method, path, self.host, deadline_s, time.monotonic() + deadline_s, self.cancel)
        call.next_wait_s()
        data = json.dumps(payload).encode() if payload is not None else None
        connection = Connection(*self._address, call)
        try:
            connection.request(
                method,
                self._prefix + path,
                body=data,
                headers={"Content-Type": "application/json"} if data is not None else {},
            )
            with connection.getresponse() as response:
                if read is not None and 200 <= response.status < 300:
                    read(response)
                    return response.status, b""
                body = response.read(MAX_ANSWER_BYTES + 1)
                status, short = response.status, bool(response.length)
        except http.client.RemoteDisconnected:
            raise self._failed(method, path, "the server closed the connection without answering") from None
        except http.client.HTTPException as exc:
            raise self._malformed(method, path, f"not an HTTP answer ({exc!r:.120})", b"") from None
        except OSError as exc:
            raise self._failed(method, path, exc.strerror or str(exc) or type(exc).__name__) from None
        finally:
            connection.close()
        if len(body) > MAX_ANSWER_BYTES:
            raise self._malformed(method, path, f"the answer is larger than {MAX_ANSWER_BYTES} bytes", body, status)
        if short:
            raise self._malformed(method, path, "the answer ended before its Content-Length", body, status)
        return status, body

    def _answer(self, method: str, path: str, payload: Any = None, timeout_s: float | None = None) -> bytes:
        """The body of a 2xx answer; any other status is an EngineHTTPError carrying it."""
        status, body = self._exchange(method, path, payload, timeout_s)
        if not 200 <= status < 300:
            raise self._refused(method, path, status, body)
        return body

    def _refused(self, method: str, path: str, status: int, body: bytes) -> EngineHTTPError:
        return EngineHTTPError(
            f"{method} {path} on {self.host}: HTTP {status} {body[:SHOWN_BYTES]!r}",
            host=self.host,
            status=status,
            method=method,
            path=path,
            fix="the server refused the request: its log (`specctl logs`) says why",
        )

    def _json(self, method: str, path: str, payload: Any = None, timeout_s: float | None = None) -> tuple[Any, bytes]:
        """The decoded JSON of a 2xx answer (None for an empty body) and the raw bytes, for errors."""
        body = self._answer(method, path, payload, timeout_s)
        if not body.strip():
            return None, body
        try:
            return json.loads(body), body
        except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise self._malformed(method, path, "the answer is not JSON", body, 200) from None

    def _request(self, method: str, path: str, payload: Any = None, timeout_s: float | None = None) -> Any:
        """The decoded JSON of a 2xx answer, None for an empty body."""
        return self._json(method, path, payload, timeout_s)[0]

    def _failed(self, method: str, path: str, reason: str) -> EngineHTTPError:
        return EngineHTTPError(
            f"{method} {path} on {self.host}: {reason}",
            host=self.host,
            method=method,
            path=path,
            fix=f"check that the server is running and listening on {self.host}",
        )

    def _malformed(
        self, method: str, path: str, problem: str, received: bytes, status: int | None = None
    ) -> EngineAnswerError:
        shown = f"; received {received[:SHOWN_BYTES]!r}" if received or status is not None else ""
        return EngineAnswerError(
            f"{method} {path} on {self.host}: {problem}{shown}",
            host=self.host,
            received=received[:SHOWN_BYTES],
            status=status,
            method=method,
            path=path,
            fix=f"check that {self.host} is the engine's port and serves sglang's API",
        )

    def _object(self, method: str, path: str, timeout_s: float | None) -> dict[str, Any]:
        body, raw = self._json(method, path, timeout_s=timeout_s)
        if not isinstance(body, dict):
            raise self._malformed(method, path, "expected a JSON object", raw, 200)
        return body

    def _generation(self, method: str, path: str, payload: Any, timeout_s: float | None, chat: bool) -> Generation:
        start = time.perf_counter()
        body, raw = self._json(method, path, payload, timeout_s)
        latency = time.perf_counter() - start
        try:
            return parse_chat(body, latency) if chat else parse_generate(body, latency)
        except MalformedBody as exc:
            raise self._malformed(method, path, str(exc), raw, 200) from None

    def generate_stream(
        self,
        *,
        input_ids: Sequence[int],
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Generation:
        """A streamed /generate (sglang's server-sent events: one `data: {json}` per decode step, each
        with the cumulative output and meta_info, then `data: [DONE]`). The last chunk's meta_info is
        the answer; the client adds when the first token arrived, so TTFT is measured where users see it."""
        payload = {
            "input_ids": list(input_ids),
            "stream": True,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature},
        }
        start = time.perf_counter()
        stream = Stream(start)
        try:
            self._answer_stream("POST", "/generate", payload, timeout_s, stream.read)
        except MalformedBody as exc:
            raise self._malformed("POST", "/generate", str(exc), stream.tail, 200) from None
        if stream.last is None:
            raise self._malformed("POST", "/generate", "the stream ended without a chunk", stream.tail, 200)
        try:
            generation = parse_generate(stream.last, time.perf_counter() - start)
        except MalformedBody as exc:
            raise self._malformed("POST", "/generate", str(exc), stream.tail, 200) from None
        return dataclasses.replace(generation, client_first_token_s=stream.first_token_s)

    def _answer_stream(
        self,
        method: str,
        path: str,
        payload: Any,
        timeout_s: float | None,
        read: Callable[[http.client.HTTPResponse], None],
    ) -> None:
        status, body = self._exchange(method, path, payload, timeout_s, read=read)
        if not 200 <= status < 300:
            raise self._refused(method, path, status, body)

    def healthy(self, timeout_s: float = 30.0) -> bool:
        """A real generation answered (`/health_generate` returns 2xx, whatever its body: sglang's is
        empty), as sglang's readiness means. False for an error status, no connection or no answer
        in time; raises only Cancelled."""
        try:
            status, _ = self._exchange("GET", "/health_generate", timeout_s=timeout_s)
        except EngineHTTPError:
            return False
        return 200 <= status < 300

    def server_info(self, *, path: str = "/server_info", timeout_s: float | None = None) -> dict[str, Any]:
        """The server's resolved arguments, at the route its version serves them on."""
        return self._object("GET", path, timeout_s)

    def metrics(self, *, timeout_s: float | None = None) -> MetricsPage:
        """The engine's Prometheus metrics page (served with --enable-metrics) as it came: its declared
        content type and its bytes, so a page that is not the text format can be described, never quoted."""
        pages: list[MetricsPage] = []

        def read(response: http.client.HTTPResponse) -> None:
            body = response.read(MAX_ANSWER_BYTES + 1)
            if len(body) > MAX_ANSWER_BYTES:
                raise self._malformed("GET", "/metrics", f"the answer is larger than {MAX_ANSWER_BYTES} bytes", b"")
            pages.append(MetricsPage(response.getheader("Content-Type") or "no content type", body))

        status, body = self._exchange("GET", "/metrics", timeout_s=timeout_s, read=read)
        if not pages:  # not a 2xx
            raise self._refused("GET", "/metrics", status, body)
        return pages[0]

    def model_info(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        return self._object("GET", "/model_info", timeout_s)

    def flush_cache(self, *, timeout_s: float | None = None) -> None:
        """Empty the prefix cache; sglang answers in plain text, so only the status is read."""
        self._answer("POST", "/flush_cache", timeout_s=timeout_s)

    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Generation:
        """An OpenAI chat request that also asks for sglang's meta_info (`return_meta_info`), so the
        model's own chat template is applied and the speculative counters still come back."""
        payload = {
            "messages": [dict(m) for m in messages],
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "return_meta_info": True,
        }
        return self._generation("POST", CHAT_PATH, payload, timeout_s, chat=True)

    def generate(
        self,
        *,
        text: str | None = None,
        input_ids: Sequence[int] | None = None,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        timeout_s: float | None = None,
    ) -> Generation:
        payload: dict[str, Any] = {"sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature}}
        if input_ids is not None:
            payload["input_ids"] = list(input_ids)
        else:
            payload["text"] = text or ""
        return self._generation("POST", "/generate", payload, timeout_s, chat=False)
