"""The one HTTP client for SGLang's API (and the reference engine's copy of it): health, server
info and generation, with `meta_info` parsed into a typed record. Standard library only.

Every request has a deadline for its whole exchange (name resolution, connect, send, headers and
body), not per socket operation, and wakes every `TICK_S` to honour the cancel token, so a server
that accepts and never answers, or drips a byte at a time, cannot hold a flow past its deadline or
past the first SIGINT. A wrong answer is the host's fault, not specctl's, so every failure is a
HostError (exit 3) that names the request and shows what came back:

    HostError (specctl.errors, exit 3)
    └── EngineHTTPError        the server answered with an error status, or could not be reached
        ├── EngineTimeout      no complete answer within the request's deadline
        └── EngineAnswerError  an answer that breaks the API: not HTTP, not JSON, or JSON of the wrong shape

Cancellation raises specctl.cancel.Cancelled, which is deliberately not an EngineHTTPError.
"""

from __future__ import annotations

import dataclasses
import errno
import http.client
import json
import os
import selectors
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specctl.cancel import NEVER, CancelToken
from specctl.errors import HostError

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
CHAT_PATH = "/v1/chat/completions"
TICK_S = 0.25  # the longest a blocking socket call waits before the deadline and the cancel token are checked
SHOWN_BYTES = 200  # how much of a wrong answer an error message quotes
MAX_ANSWER_BYTES = 64 * 2**20  # no sglang answer comes near this; a larger one is not an answer


class EngineHTTPError(HostError):
    """Raised when the server answered with an error status (`status` set) or could not be reached
    (`status` None); `host` is the server's host:port, `method` and `path` name the request."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        status: int | None = None,
        method: str | None = None,
        path: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, host=host, fix=fix)
        self.status = status
        self.method = method
        self.path = path


class EngineTimeout(EngineHTTPError):
    """Raised when a request had no complete answer within its deadline (`deadline_s`)."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        deadline_s: float,
        method: str | None = None,
        path: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, host=host, method=method, path=path, fix=fix)
        self.deadline_s = deadline_s


class EngineAnswerError(EngineHTTPError):
    """Raised for an answer that is not what sglang's API promises; `received` holds its first bytes."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        received: bytes,
        status: int | None = None,
        method: str | None = None,
        path: str | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message, host=host, status=status, method=method, path=path, fix=fix)
        self.received = received


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
    answer = _mapping(body, "the answer")
    meta = _mapping(answer.get("meta_info"), "meta_info", optional=True)
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
        output_ids=_ints(answer.get("output_ids"), "output_ids") or (),
        prompt_tokens=_int(meta.get("prompt_tokens"), "meta_info.prompt_tokens") or 0,
        completion_tokens=_int(meta.get("completion_tokens"), "meta_info.completion_tokens") or 0,
        finish_reason=finish,
        e2e_latency_s=_float(meta.get("e2e_latency"), "meta_info.e2e_latency"),
        client_latency_s=client_latency_s,
        spec_verify_ct=_int(meta.get("spec_verify_ct"), "meta_info.spec_verify_ct"),
        spec_accept_length=_float(meta.get("spec_accept_length"), "meta_info.spec_accept_length"),
        spec_accept_rate=_float(meta.get("spec_accept_rate"), "meta_info.spec_accept_rate"),
        spec_num_correct_drafts=_int(meta.get("spec_num_correct_drafts"), "meta_info.spec_num_correct_drafts"),
        spec_num_proposed_drafts=_int(meta.get("spec_num_proposed_drafts"), "meta_info.spec_num_proposed_drafts"),
        spec_correct_drafts_histogram=_ints(
            meta.get("spec_correct_drafts_histogram"), "meta_info.spec_correct_drafts_histogram"
        ),
        first_token_latency_s=_float(meta.get("first_token_latency"), "meta_info.first_token_latency"),
    )


def parse_chat(body: object, client_latency_s: float = 0.0) -> Generation:
    """A /v1/chat/completions response whose first choice carries sglang's `meta_info`; `usage`
    fills the token counts when meta_info was not returned.

    Raises:
        MalformedBody: no non-empty `choices` list, or a part of the wrong shape.
    """
    answer = _mapping(body, "the answer")
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedBody(f"expected a non-empty `choices` list, got {choices!r:.80}")
    choice = _mapping(choices[0], "choices[0]")
    message = _mapping(choice.get("message"), "choices[0].message", optional=True)
    usage = _mapping(answer.get("usage"), "usage", optional=True)
    meta = dict(_mapping(choice.get("meta_info"), "choices[0].meta_info", optional=True))
    meta.setdefault("prompt_tokens", usage.get("prompt_tokens"))
    meta.setdefault("completion_tokens", usage.get("completion_tokens"))
    meta.setdefault("finish_reason", choice.get("finish_reason"))
    return parse_generate({"text": message.get("content"), "meta_info": meta}, client_latency_s)


def _mapping(value: object, where: str, *, optional: bool = False) -> Mapping[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedBody(f"{where}: expected a JSON object, got {value!r:.80}")
    return value


def _int(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise MalformedBody(f"{where}: expected an integer, got {value!r:.80}")


def _float(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise MalformedBody(f"{where}: expected a number, got {value!r:.80}")


def _ints(value: object, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise MalformedBody(f"{where}: expected a list of integers, got {value!r:.80}")
    return tuple(_int(v, where) or 0 for v in value)


@dataclass(frozen=True)
class _Call:
    """One request in flight: what to name it in errors, when it must be done, what may cancel it."""

    method: str
    path: str
    host: str
    deadline_s: float
    ends_at: float  # time.monotonic()
    cancel: CancelToken

    def next_wait_s(self) -> float:
        """How long the next blocking call may wait: a tick, never past the deadline.

        Raises:
            Cancelled: the token was cancelled.
            EngineTimeout: the deadline has passed.
        """
        self.cancel.check()
        left = self.ends_at - time.monotonic()
        if left <= 0:
            raise EngineTimeout(
                f"{self.method} {self.path} on {self.host}: no complete answer within {self.deadline_s:g} s",
                host=self.host,
                deadline_s=self.deadline_s,
                method=self.method,
                path=self.path,
                fix="the server is hung or overloaded: read its log (`specctl logs`), or allow it more time",
            )
        return min(TICK_S, left)


class _TickingSocket(socket.socket):
    """A socket whose blocking calls wait at most a tick at a time, checking the call between ticks.

    http.client reads through `makefile()`, which calls `recv_into`; a socket timeout surfacing there
    would leave the reader unusable, so the waiting loops live here, below it, and http.client only
    ever sees data, end of stream, or the call's own EngineTimeout or Cancelled.
    """

    call: _Call

    def connect_within(self, address: Any) -> None:
        """connect(), waiting in ticks; a blocking connect could take the kernel's minutes."""
        self.setblocking(False)
        err = self.connect_ex(address)
        if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_WRITE)
                while not selector.select(self.call.next_wait_s()):
                    pass
            err = self.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0, /) -> int:
        while True:
            self.settimeout(self.call.next_wait_s())
            try:
                return super().recv_into(buffer, nbytes, flags)
            except TimeoutError:
                continue

    def sendall(self, data: Any, flags: int = 0, /) -> None:
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            self.settimeout(self.call.next_wait_s())
            try:
                sent += self.send(view[sent:], flags)
            except TimeoutError:
                continue


def _resolve(host: str, port: int, call: _Call) -> list[tuple[Any, ...]]:
    """Addresses for host:port; a name is resolved in a helper thread, as the resolver has no timeout."""
    try:
        return list(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST))
    except socket.gaierror:
        pass  # a name, not an address
    found: list[tuple[Any, ...]] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def work() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            failed.append(OSError(f"cannot resolve {host}: {exc}"))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller rather than to the thread's excepthook
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=work, name=f"resolve {host}", daemon=True).start()
    while not done.wait(call.next_wait_s()):
        pass
    if failed:
        raise failed[0]
    return found


def _open(host: str, port: int, call: _Call) -> _TickingSocket:
    """A connected socket to the first address of host:port that accepts, as create_connection does."""
    last: OSError = OSError(f"{host} has no address")
    for family, kind, proto, _, address in _resolve(host, port, call):
        sock = _TickingSocket(family, kind, proto)
        sock.call = call
        try:
            sock.connect_within(address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client's own connect does
        return sock
    raise last


class _Connection(http.client.HTTPConnection):
    """http.client's request writing and answer parsing over a _TickingSocket."""

    def __init__(self, host: str, port: int, call: _Call) -> None:
        super().__init__(host, port)
        self._call = call

    def connect(self) -> None:
        self.sock = _open(self.host, self.port, self._call)


class _Stream:
    """Reads sglang's server-sent events line by line as they arrive: keeps the last chunk and the
    time the first chunk with a completion token came."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.last: dict[str, Any] | None = None
        self.first_token_s: float | None = None
        self.tail = b""
        self.size = 0

    def read(self, response: http.client.HTTPResponse) -> None:
        while True:
            line = response.readline(MAX_ANSWER_BYTES + 1)
            if not line:
                return
            self.size += len(line)
            self.tail = line[:SHOWN_BYTES]
            if self.size > MAX_ANSWER_BYTES:
                raise MalformedBody(f"the stream is larger than {MAX_ANSWER_BYTES} bytes")
            if not line.startswith(b"data:"):
                continue  # blank separators, comments and other SSE fields
            data = line[5:].strip()
            if data == b"[DONE]":
                return
            try:
                chunk = json.loads(data)
            except (ValueError, RecursionError):
                raise MalformedBody(f"a stream chunk is not JSON: {data[:80]!r}") from None
            if not isinstance(chunk, dict):
                raise MalformedBody(f"a stream chunk is not a JSON object: {data[:80]!r}")
            meta = _mapping(chunk.get("meta_info"), "meta_info", optional=True)
            if (
                self.first_token_s is None
                and (_int(meta.get("completion_tokens"), "meta_info.completion_tokens") or 0) > 0
            ):
                self.first_token_s = time.perf_counter() - self.start
            self.last = chunk


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
        call = _Call(method, path, self.host, deadline_s, time.monotonic() + deadline_s, self.cancel)
        call.next_wait_s()
        data = json.dumps(payload).encode() if payload is not None else None
        connection = _Connection(*self._address, call)
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
            raise EngineHTTPError(
                f"{method} {path} on {self.host}: HTTP {status} {body[:SHOWN_BYTES]!r}",
                host=self.host,
                status=status,
                method=method,
                path=path,
                fix="the server refused the request: its log (`specctl logs`) says why",
            )
        return body

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
        stream = _Stream(start)
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
            raise EngineHTTPError(
                f"{method} {path} on {self.host}: HTTP {status} {body[:SHOWN_BYTES]!r}",
                host=self.host,
                status=status,
                method=method,
                path=path,
                fix="the server refused the request: its log (`specctl logs`) says why",
            )

    def healthy(self, timeout_s: float = 30.0) -> bool:
        """A real generation answered (`/health_generate` returns 2xx, whatever its body: sglang's is
        empty), as sglang's readiness means. False for an error status, no connection or no answer
        in time; raises only Cancelled."""
        try:
            status, _ = self._exchange("GET", "/health_generate", timeout_s=timeout_s)
        except EngineHTTPError:
            return False
        return 200 <= status < 300

    def server_info(self, *, timeout_s: float | None = None) -> dict[str, Any]:
        return self._object("GET", "/server_info", timeout_s)

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
