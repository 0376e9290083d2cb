"""EngineClient against real local HTTP servers that misbehave: silent, dripping, wrong answers.

Each server runs in threads on 127.0.0.1 and is stopped, handler threads joined, in teardown.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from specctl.cancel import Cancelled, CancelToken
from specctl.errors import HostError
from specctl.verdict.client import EngineClient
from specctl.verdict.engine_errors import EngineAnswerError, EngineHTTPError, EngineTimeout
from specctl.verdict.measure import Prompts, measure
from specctl.verdict.workload import Workload

Behaviour = Callable[[BaseHTTPRequestHandler, threading.Event], None]

CHAT_BODY = {
    "id": "x",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": " Paris."},
            "finish_reason": "length",
            "meta_info": {
                "id": "x",
                "finish_reason": {"type": "length", "length": 8},
                "prompt_tokens": 12,
                "completion_tokens": 8,
                "e2e_latency": 0.25,
                "spec_verify_ct": 3,
                "spec_accept_length": 2.67,
                "spec_accept_rate": 0.56,
                "spec_num_correct_drafts": 5,
                "spec_num_proposed_drafts": 9,
                "spec_correct_drafts_histogram": [1, 0, 1, 1],
            },
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 8, "total_tokens": 20},
}


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.stop = threading.Event()  # wakes handlers that hang or drip
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                try:
                    server.behaviour(self, server.stop)
                except OSError:
                    pass  # the client gave up first, as it should

            do_POST = do_GET

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def serve() -> Iterator[Callable[[Behaviour], str]]:
    """Start servers with a behaviour; each one's base URL is returned, and all stop at teardown."""
    started: list[tuple[_Server, threading.Thread]] = []

    def start(behaviour: Behaviour) -> str:
        server = _Server(behaviour)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="test server")
        thread.start()
        started.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server, thread in started:
        server.stop.set()
        server.shutdown()
        thread.join()
        server.server_close()


def answer(status: int, body: bytes | object, content_type: str = "application/json") -> Behaviour:
    """A behaviour that reads the request and answers with `body` (bytes as they are, else as JSON)."""

    def behave(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        read_request(handler)
        reply(handler, status, body, content_type)

    return behave


def read_request(handler: BaseHTTPRequestHandler) -> bytes:
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def reply(
    handler: BaseHTTPRequestHandler, status: int, body: bytes | object, content_type: str = "application/json"
) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def silent(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """Accept, read the request, never answer."""
    stop.wait()


def drip(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
    """A valid answer, one byte every 0.5 s: each read succeeds, the whole never arrives in time."""
    for byte in b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}":
        handler.wfile.write(bytes([byte]))
        if stop.wait(0.5):
            return


def refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def timed(call: Callable[[], object]) -> tuple[BaseException, float]:
    start = time.monotonic()
    with pytest.raises(BaseException) as info:
        call()
    return info.value, time.monotonic() - start


# --- deadlines and cancellation -----------------------------------------------------------------


def test_silent_server_times_out_at_the_deadline(serve: Callable[[Behaviour], str]) -> None:
    client = EngineClient(serve(silent), timeout_s=1.0)
    exc, took = timed(lambda: client.chat([{"role": "user", "content": "hi"}]))
    assert isinstance(exc, EngineTimeout) and 1.0 <= took < 2.0
    assert isinstance(exc, EngineHTTPError) and isinstance(exc, HostError) and exc.exit_code == 3
    assert exc.deadline_s == 1.0 and exc.status is None and (exc.method, exc.path) == ("POST", "/v1/chat/completions")
    assert "POST /v1/chat/completions" in str(exc) and "1 s" in str(exc)


def test_listener_that_never_accepts_times_out(serve: Callable[[Behaviour], str]) -> None:
    """The kernel completes the handshake from the backlog; no process ever reads."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = EngineClient(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.5)
        exc, took = timed(lambda: client.generate(text="hi"))
    assert isinstance(exc, EngineTimeout) and 0.5 <= took < 1.5 and "POST /generate" in str(exc)


def test_dripping_server_is_bounded_by_the_total_deadline(serve: Callable[[Behaviour], str]) -> None:
    client = EngineClient(serve(drip), timeout_s=1.2)
    exc, took = timed(client.server_info)
    assert isinstance(exc, EngineTimeout) and 1.2 <= took < 2.2, took
    assert "GET /server_info" in str(exc)


def test_cancel_during_a_hanging_request_raises_cancelled_promptly(serve: Callable[[Behaviour], str]) -> None:
    token = CancelToken()
    client = EngineClient(serve(silent), timeout_s=60, cancel=token)
    timer = threading.Timer(0.3, token.cancel)
    timer.start()
    try:
        exc, took = timed(lambda: client.generate(text="hi"))
    finally:
        timer.join()
    assert isinstance(exc, Cancelled) and not isinstance(exc, EngineHTTPError)
    assert took < 1.0 and exc.exit_code == 143


def test_cancel_while_dripping_and_before_a_request(serve: Callable[[Behaviour], str]) -> None:
    token = CancelToken()
    client = EngineClient(serve(drip), timeout_s=60, cancel=token)
    timer = threading.Timer(0.6, token.cancel)
    timer.start()
    try:
        exc, took = timed(client.server_info)
    finally:
        timer.join()
    assert isinstance(exc, Cancelled) and took < 1.6
    exc, took = timed(client.flush_cache)  # already cancelled: no request is sent
    assert isinstance(exc, Cancelled) and took < 0.1


# --- health -------------------------------------------------------------------------------------


def test_healthy_means_status_200_whatever_the_body(serve: Callable[[Behaviour], str]) -> None:
    assert EngineClient(serve(answer(200, b"not json", "text/plain"))).healthy(timeout_s=2)
    assert EngineClient(serve(answer(200, b""))).healthy(timeout_s=2)


def test_unhealthy_on_error_status_refusal_timeout_and_garbage(serve: Callable[[Behaviour], str]) -> None:
    assert not EngineClient(serve(answer(500, {"error": "loading"}))).healthy(timeout_s=2)
    assert not EngineClient(serve(answer(503, b"\x00\xff"))).healthy(timeout_s=2)
    assert not EngineClient(refused_url()).healthy(timeout_s=2)
    start = time.monotonic()
    assert not EngineClient(serve(silent)).healthy(timeout_s=0.5)
    assert time.monotonic() - start < 1.5


def test_healthy_raises_only_cancelled(serve: Callable[[Behaviour], str]) -> None:
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        EngineClient(serve(silent), cancel=token).healthy(timeout_s=2)


# --- wrong answers are host errors --------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b'{"choices": []}',
        b"not json",
        b'{"choices": [[]]}',
        b'{"choices": [{"message": "text"}]}',
        b'{"choices": [{"meta_info": {"prompt_tokens": "many"}}]}',
        b'{"choices": [{"meta_info": []}]}',
        b'{"choices": [{"meta_info": {"spec_verify_ct": 2.5}}]}',
        b'{"choices": [{"meta_info": {"finish_reason": 3}}]}',
        b'{"choices": [{"meta_info": {"spec_correct_drafts_histogram": [1, "a"]}}]}',
        b"\xff\xfe\x00",
    ],
)
def test_chat_wrong_answers_are_host_errors_that_show_the_answer(
    serve: Callable[[Behaviour], str], body: bytes
) -> None:
    url = serve(answer(200, body))
    with pytest.raises(EngineAnswerError) as info:
        EngineClient(url, timeout_s=2).chat([{"role": "user", "content": "hi"}])
    exc = info.value
    assert isinstance(exc, EngineHTTPError) and isinstance(exc, HostError) and exc.exit_code == 3
    assert exc.host == url.removeprefix("http://") and exc.status == 200 and exc.received == body
    assert "POST /v1/chat/completions" in exc.message and repr(body) in exc.message and exc.fix


def test_control_characters_are_escaped_and_long_answers_cut(serve: Callable[[Behaviour], str]) -> None:
    body = b"\x1b[31mred\r\n" + b"x" * 1000
    with pytest.raises(EngineAnswerError) as info:
        EngineClient(serve(answer(200, body)), timeout_s=2).model_info()
    message = str(info.value)
    assert "\x1b" not in message and "\r" not in message and "\\x1b[31mred\\r\\n" in message
    assert len(info.value.received) == 200 and len(message) < 400


def test_server_info_must_be_an_object(serve: Callable[[Behaviour], str]) -> None:
    with pytest.raises(EngineAnswerError, match=r"GET /server_info on .*expected a JSON object; received b'\[1, 2\]'"):
        EngineClient(serve(answer(200, [1, 2])), timeout_s=2).server_info()


def test_not_http_and_cut_short_answers(serve: Callable[[Behaviour], str]) -> None:
    def garbage(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        handler.wfile.write(b"\x00\x01 hello\r\n\r\n")

    def short(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        handler.wfile.write(b'HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\n{"a": 1}')

    with pytest.raises(EngineAnswerError, match="GET /model_info .*not an HTTP answer") as info:
        EngineClient(serve(garbage), timeout_s=2).model_info()
    assert "\x00" not in str(info.value)
    with pytest.raises(EngineAnswerError, match="ended before its Content-Length"):
        EngineClient(serve(short), timeout_s=2).server_info()


def test_error_status_and_refusal_keep_their_status(serve: Callable[[Behaviour], str]) -> None:
    with pytest.raises(EngineHTTPError) as info:
        EngineClient(serve(answer(400, {"error": {"message": "unknown field"}})), timeout_s=2).generate(text="x")
    assert info.value.status == 400 and "POST /generate" in str(info.value) and "unknown field" in str(info.value)
    assert not isinstance(info.value, (EngineAnswerError, EngineTimeout))
    url = refused_url()
    with pytest.raises(EngineHTTPError) as info:
        EngineClient(url, timeout_s=2).server_info()
    assert (
        info.value.status is None
        and "refused" in str(info.value)
        and url.removeprefix("http://") in (info.value.fix or "")
    )


# --- the normal path ----------------------------------------------------------------------------


def test_well_formed_answers_parse(serve: Callable[[Behaviour], str]) -> None:
    seen: list[dict[str, Any]] = []

    def engine(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        sent = read_request(handler)
        seen.append({"path": handler.path, "method": handler.command, "body": json.loads(sent) if sent else None})
        replies: dict[str, tuple[int, bytes | object]] = {
            "/v1/chat/completions": (200, CHAT_BODY),
            "/server_info": (200, {"version": "0.5.23"}),
            "/generate": (
                200,
                {
                    "text": "hi",
                    "output_ids": [1, 2],
                    "meta_info": {"prompt_tokens": 1, "completion_tokens": 2, "finish_reason": {"type": "stop"}},
                },
            ),
            "/flush_cache": (
                200,
                b"Cache flushed.\nPlease check backend logs for more details.\n",
            ),  # sglang's plain text
            "/health_generate": (200, b""),
        }
        reply(handler, *replies[handler.path.removeprefix("/prefix")])

    url = serve(engine)
    client = EngineClient(url.replace("127.0.0.1", "localhost") + "/", timeout_s=2)  # a name, resolved off-thread
    g = client.chat([{"role": "user", "content": "capital of France?"}], max_new_tokens=8)
    assert (g.text, g.completion_tokens, g.spec_verify_ct, g.finish_reason, g.spec_correct_drafts_histogram) == (
        " Paris.",
        8,
        3,
        "length",
        (1, 0, 1, 1),
    )
    assert g.speculative and g.client_latency_s > 0
    assert (
        seen[0]["method"] == "POST"
        and seen[0]["body"]["return_meta_info"] is True
        and seen[0]["body"]["max_tokens"] == 8
    )
    assert client.server_info() == {"version": "0.5.23"}
    plain = client.generate(input_ids=[5], max_new_tokens=2)
    assert plain.output_ids == (1, 2) and plain.finish_reason == "stop" and not plain.speculative
    client.flush_cache()
    assert client.healthy(timeout_s=2)
    assert EngineClient(url + "/prefix", timeout_s=2).server_info() == {"version": "0.5.23"}
    assert seen[-1]["path"] == "/prefix/server_info"


def test_measure_stops_at_the_clients_cancel_token(serve: Callable[[Behaviour], str]) -> None:
    token = CancelToken()
    client = EngineClient(serve(answer(200, CHAT_BODY)), timeout_s=2, cancel=token)
    workload = Workload("w", "0" * 64, (({"role": "user", "content": "hi"},),))
    measured = measure(client, Prompts(workload), requests=5, max_new_tokens=8, on_request=lambda i, g: token.cancel())
    assert len(measured.generations) == 1 and measured.mean_accept_length == pytest.approx(8 / 3)


def test_only_plain_http_urls() -> None:
    for url in ("https://127.0.0.1:30000", "127.0.0.1:30000", "http://"):
        with pytest.raises(ValueError, match="plain http"):
            EngineClient(url)


def sse(chunks: list[object], *, gap_s: float = 0.0, done: bool = True, chunked: bool = True) -> Behaviour:
    """A streaming answer as sglang writes it: `data: {json}` events, then `data: [DONE]`."""

    def behave(handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        request = json.loads(read_request(handler))
        assert request["stream"] is True and request["input_ids"]
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        events = [b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) + b"\n\n" for c in chunks]
        for event in [*events, *([b"data: [DONE]\n\n"] if done else [])]:
            if stop.wait(gap_s):
                return
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")

    return behave


def _chunk(tokens: int, final: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": "r", "prompt_tokens": 5, "completion_tokens": tokens, "finish_reason": None}
    if final:
        meta.update(
            finish_reason={"type": "length", "length": tokens},
            e2e_latency=0.5,
            spec_verify_ct=3,
            spec_num_correct_drafts=6,
            spec_num_proposed_drafts=9,
        )
    return {"text": "x" * tokens, "output_ids": list(range(tokens)), "meta_info": meta}


def test_a_stream_answers_with_its_last_chunk_and_when_the_first_token_came(serve: Callable[[Behaviour], str]) -> None:
    url = serve(sse([_chunk(1), _chunk(4), _chunk(7), _chunk(8, final=True)], gap_s=0.1))
    g = EngineClient(url).generate_stream(input_ids=[1, 2, 3], max_new_tokens=8)
    assert g.completion_tokens == 8 and g.spec_verify_ct == 3 and g.e2e_latency_s == 0.5 and g.finish_reason == "length"
    assert g.client_first_token_s is not None and 0.05 < g.client_first_token_s < g.client_latency_s
    assert g.client_latency_s - g.client_first_token_s > 0.2  # three more chunks, 0.1 s apart, came after it


@pytest.mark.parametrize(
    ("chunks", "done", "problem"),
    [
        ([], True, "ended without a chunk"),
        ([b"{not json"], True, "not JSON"),
        ([b"[1, 2]"], True, "not a JSON object"),
        ([{"meta_info": {"completion_tokens": "8"}}], True, "completion_tokens"),
    ],
)
def test_a_broken_stream_is_an_answer_error(
    serve: Callable[[Behaviour], str], chunks: list[object], done: bool, problem: str
) -> None:
    url = serve(sse(chunks, done=done))
    with pytest.raises(EngineAnswerError, match=problem):
        EngineClient(url).generate_stream(input_ids=[1], max_new_tokens=8)


def test_a_stream_that_stalls_meets_the_deadline(serve: Callable[[Behaviour], str]) -> None:
    url = serve(sse([_chunk(1), _chunk(2, final=True)], gap_s=30))
    start = time.monotonic()
    with pytest.raises(EngineTimeout):
        EngineClient(url, timeout_s=1.0).generate_stream(input_ids=[1], max_new_tokens=8)
    assert time.monotonic() - start < 5
