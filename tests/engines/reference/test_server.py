"""The reference engine as a real HTTP server (FastAPI on uvicorn): sglang's flags in, sglang's fields
and event streams out, parsed by the same client code specctl uses against real sglang; concurrent
requests share forwards; SIGTERM stops it."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from specctl.verdict.client import EngineClient
from specctl.verdict.engine_errors import EngineHTTPError

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "specctl" / "engines" / "reference" / "models"
REFERENCE_DOC = ROOT.parent / "shared" / "reference" / "sglang-0.5.23.md"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specctl.engines.reference", *flags], capture_output=True, text=True, timeout=60
    )


@contextmanager
def started(*extra: str, metrics: bool = True) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A reference engine process for the block (with --enable-metrics unless `metrics` is False), in a
    session of its own; stopped (SIGTERM, then SIGKILL, to its process group) whatever the block does, an
    interrupted run included."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "specctl.engines.reference",
        "--model-path",
        str(MODELS / "tiny-llama"),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(MODELS / "tiny-llama-eagle3"),
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--tp-size",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(["--enable-metrics"] if metrics else []),
        *extra,
    ]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        client = EngineClient(f"http://127.0.0.1:{port}", timeout_s=60)
        deadline = time.monotonic() + 120
        while not client.healthy(timeout_s=10):
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "the reference engine did not become ready"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", process
    finally:
        stop_group(process)
        if process.stdout:
            process.stdout.close()


def stop_group(process: subprocess.Popen[str]) -> None:
    """SIGTERM to the process's group (its pid: it leads a session of its own), then SIGKILL to what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # the group is gone (the process was stopped and waited for)
            pass
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with started() as running:
        yield running


def post(url: str, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    """(status, content type, body) of one POST, read to the end."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def events(body: bytes) -> list[Any]:
    """The `data:` payloads of a server-sent event stream, in order; `[DONE]` must end it."""
    text = body.decode()
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    blocks = text.split("\n\n")[:-2]
    assert all(b.startswith("data: ") for b in blocks)
    return [json.loads(b.removeprefix("data: ")) for b in blocks]


def generate_body(text: str, max_new: int = 40, **extra: Any) -> dict[str, Any]:
    return {"text": text, "sampling_params": {"max_new_tokens": max_new, "temperature": 0}, **extra}


CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def test_an_emulated_version_before_0_5_13_ignores_return_meta_info_in_chat(server: tuple[str, Any]) -> None:
    """As sglang did before 0.5.13 (data/http.json): chat answers without meta_info, /generate with it;
    so a streamed chat that asks for meta_info is no error there."""
    messages = [{"role": "user", "content": "hello"}]
    assert EngineClient(server[0], timeout_s=60).chat(messages, max_new_tokens=8).spec_verify_ct  # 0.5.23: counters
    with started("--emulate-sglang-version", "0.5.12.post1") as (url, _):
        client = EngineClient(url, timeout_s=60)
        assert client.chat(messages, max_new_tokens=8).spec_verify_ct is None
        assert client.generate(text="hello", max_new_tokens=8).spec_verify_ct
        status, _, body = post(
            url,
            "/v1/chat/completions",
            {"messages": messages, "max_tokens": 8, "temperature": 0, "stream": True, "return_meta_info": True},
        )
        assert status == 200 and events(body)[-1]["choices"][0]["finish_reason"] in ("length", "stop")


def test_unknown_and_wrong_flags_are_argparse_errors() -> None:
    done = launch("--model-path", "x", "--cuda-graph-max-bs-decod", "8")
    assert done.returncode == 2 and "unrecognized arguments: --cuda-graph-max-bs-decod" in done.stderr
    done = launch("--model-path", "x", "--tp-size", "8")
    assert done.returncode == 2 and "--tp-size 8" in done.stderr and "use --tp-size 1" in done.stderr
    done = launch("--model-path", "x", "--port", "eighty")
    assert done.returncode == 2 and "invalid int value" in done.stderr


def test_generate_fields_parse_with_the_sglang_client(server: tuple[str, Any]) -> None:
    client = EngineClient(server[0])
    g = client.chat([{"role": "user", "content": "What is the capital of France?"}], max_new_tokens=32)
    assert g.completion_tokens > 0 and g.speculative and g.spec_verify_ct
    assert g.spec_accept_length == pytest.approx(g.completion_tokens / g.spec_verify_ct)
    assert g.spec_num_proposed_drafts == g.spec_verify_ct * 3  # num_draft_tokens - 1
    assert g.spec_accept_rate == pytest.approx(g.spec_num_correct_drafts / g.spec_num_proposed_drafts)
    histogram = g.spec_correct_drafts_histogram
    assert histogram is not None and sum(histogram) == g.spec_verify_ct
    assert sum(k * h for k, h in enumerate(histogram)) == g.spec_num_correct_drafts
    assert g.first_token_latency_s is not None and g.e2e_latency_s is not None and g.finish_reason in ("length", "stop")


def test_field_names_match_the_reference_document(server: tuple[str, Any]) -> None:
    """Every meta_info key the document lists for a finished speculative request is there, and no
    spec key it does not list."""
    import json
    import urllib.request

    request = urllib.request.Request(
        server[0] + "/generate",
        method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode(),
    )
    with urllib.request.urlopen(request) as response:
        meta = json.loads(response.read())["meta_info"]
    if REFERENCE_DOC.exists():
        section = REFERENCE_DOC.read_text().split("### 4.2", 1)[1].split("### 4.3", 1)[0]
        always = re.findall(r"`(\w+)`", section.split("- Always:", 1)[1].split("\n  - On the finished", 1)[0])
        spec = [k for k in re.findall(r"- `(spec_\w+)`", section) if not k.startswith(("spec_cap", "spec_block"))]
    else:  # the same lists, as the document has them
        always = [
            "id",
            "finish_reason",
            "prompt_tokens",
            "weight_version",
            "num_retractions",
            "reasoning_tokens",
            "completion_tokens",
            "cached_tokens",
            "cached_tokens_details",
        ]
        spec = [
            "spec_verify_ct",
            "spec_accept_length",
            "spec_accept_rate",
            "spec_num_correct_drafts",
            "spec_num_proposed_drafts",
            "spec_correct_drafts_histogram",
        ]
    optional = {"cached_tokens_details"}
    assert set(always) - optional <= set(meta)
    assert set(spec) == {k for k in meta if k.startswith("spec_")}
    assert "e2e_latency" in meta and meta["finish_reason"]["type"] in ("length", "stop")


def test_server_info_model_info_and_errors(server: tuple[str, Any]) -> None:
    client = EngineClient(server[0])
    info = client.server_info()
    assert (
        info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_draft_tokens"] == 4 and info["tp_size"] == 1
    )
    assert info["version"] == "0.5.23" and isinstance(info["internal_states"], list)
    client.generate(text="hi", max_new_tokens=4)
    assert client.server_info()["internal_states"][0]["avg_spec_accept_length"] > 0
    assert client.model_info()["architectures"] == ["LlamaForCausalLM"]
    with pytest.raises(EngineHTTPError) as info_error:
        client._request("POST", "/generate", {"text": "x", "sampling_params": {"max_new_token": 3}})
    assert info_error.value.status == 400 and "unknown field" in str(info_error.value)


def test_generate_streams_sglang_chunks_ending_in_the_plain_answer(server: tuple[str, Any]) -> None:
    """sglang 0.5.23's non-incremental stream: cumulative text and ids per decode step, meta_info with
    finish_reason null until the last chunk, whose meta_info is the non-streaming answer's."""
    prompt = "User: Name three colours.\nAssistant: "
    status, kind, body = post(server[0], "/generate", generate_body(prompt))
    assert status == 200 and kind.startswith("application/json")
    plain = json.loads(body)
    status, kind, body = post(server[0], "/generate", generate_body(prompt, stream=True))
    assert status == 200 and kind.startswith("text/event-stream")
    chunks = events(body)
    last = chunks[-1]
    assert len(chunks) == 1 + last["meta_info"]["spec_verify_ct"]  # the prefill's token, then one chunk per verify
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after["output_ids"][: len(before["output_ids"])] == before["output_ids"]
        assert after["text"].startswith(before["text"])
    assert any(len(b["output_ids"]) - len(a["output_ids"]) > 1 for a, b in zip(chunks, chunks[1:], strict=False))
    for chunk in chunks[:-1]:
        meta = chunk["meta_info"]
        assert meta["finish_reason"] is None and meta["completion_tokens"] == len(chunk["output_ids"])
        assert meta["id"] == last["meta_info"]["id"] and meta["prompt_tokens"] == plain["meta_info"]["prompt_tokens"]
        assert not any(k.startswith("spec_") or k.endswith("latency") for k in meta)
    assert last["text"] == plain["text"] and last["output_ids"] == plain["output_ids"]
    timing = {"id", "e2e_latency", "first_token_latency"}
    assert set(last["meta_info"]) == set(plain["meta_info"])
    assert {k: v for k, v in last["meta_info"].items() if k not in timing} == {
        k: v for k, v in plain["meta_info"].items() if k not in timing
    }
    streamed = EngineClient(server[0]).generate_stream(input_ids=[256, *prompt.encode()], max_new_tokens=40)
    assert streamed.completion_tokens == plain["meta_info"]["completion_tokens"] and streamed.spec_verify_ct


def test_chat_streams_openai_deltas_that_add_up_to_the_answer(server: tuple[str, Any]) -> None:
    request = {"messages": CHAT, "max_tokens": 40, "temperature": 0}
    status, _, body = post(server[0], "/v1/chat/completions", request)
    answer = json.loads(body)
    status, kind, body = post(
        server[0], "/v1/chat/completions", {**request, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert status == 200 and kind.startswith("text/event-stream")
    chunks = events(body)
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    first, *middle, finish, usage = chunks
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": None}
    assert all(c["choices"][0]["finish_reason"] is None for c in middle)
    content = "".join(c["choices"][0]["delta"]["content"] for c in middle)
    assert content == answer["choices"][0]["message"]["content"] and len(middle) > 1
    assert finish["choices"][0]["finish_reason"] == answer["choices"][0]["finish_reason"]
    assert usage["choices"] == [] and usage["usage"] == answer["usage"]


def test_chat_refuses_streaming_with_return_meta_info_as_sglang_does(server: tuple[str, Any]) -> None:
    status, _, body = post(
        server[0],
        "/v1/chat/completions",
        {"messages": CHAT, "temperature": 0, "stream": True, "return_meta_info": True},
    )
    assert status == 400
    assert json.loads(body)["message"] == (
        "return_meta_info is not supported with streaming. Please set stream=false when using return_meta_info=true."
    )


def test_concurrent_requests_share_forwards_and_keep_their_output(server: tuple[str, Any]) -> None:
    """8 different prompts at once need fewer target forwards than one after another, with the same answers."""
    client = EngineClient(server[0], timeout_s=120)
    prompts = [
        f"User: {q}\nAssistant: "
        for q in (
            "What is 2 + 2?",
            "Name a river.",
            "Count to five.",
            "Hi",
            "What colour is the sky?",
            "Spell cat.",
            "Who wrote Hamlet?",
            "Bye",
        )
    ]

    def forwards() -> int:
        return int(client.server_info()["reference_engine"]["target_forwards"])

    def answer(prompt: str) -> dict[str, Any]:
        status, _, body = post(server[0], "/generate", generate_body(prompt, max_new=48))
        assert status == 200
        return dict(json.loads(body))

    before = forwards()
    sequential = [answer(p) for p in prompts]
    sequential_forwards = forwards() - before
    before = forwards()
    with ThreadPoolExecutor(len(prompts)) as pool:
        concurrent = list(pool.map(answer, prompts))
    concurrent_forwards = forwards() - before
    assert [a["output_ids"] for a in concurrent] == [a["output_ids"] for a in sequential]
    assert [a["meta_info"]["spec_verify_ct"] for a in concurrent] == [
        a["meta_info"]["spec_verify_ct"] for a in sequential
    ]
    assert concurrent_forwards < sequential_forwards / 2


def test_sigterm_stops_the_server_with_a_stream_open() -> None:
    with started() as (url, process):
        host, port = url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        connection.request(
            "POST",
            "/generate",
            json.dumps(generate_body("User: Hi\nAssistant: ", max_new=400, stream=True)),
            {"Content-Type": "application/json"},
        )
        response = connection.getresponse()
        assert response.status == 200 and response.readline().startswith(b"data: ")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
        connection.close()
        assert process.stdout is not None and "scheduler stopped" in process.stdout.read()
