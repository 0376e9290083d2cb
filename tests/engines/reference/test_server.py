"""The reference engine as a real HTTP server: sglang's flags in, sglang's fields out, parsed by the
same client code specctl uses against real sglang."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from specctl.verdict.client import EngineClient, EngineHTTPError

ROOT = Path(__file__).resolve().parents[3]
MODELS = ROOT / "specctl" / "engines" / "reference" / "models"
REFERENCE_DOC = ROOT.parent / "shared" / "reference" / "sglang-0.5.23.md"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.engines.reference", *flags], capture_output=True, text=True, timeout=60)


@contextmanager
def started(*extra: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A reference engine process for the block; stopped (by its pid) whatever the block does."""
    port = free_port()
    argv = [sys.executable, "-m", "specctl.engines.reference", "--model-path", str(MODELS / "tiny-llama"),
            "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", str(MODELS / "tiny-llama-eagle3"),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
            "--tp-size", "1", "--host", "127.0.0.1", "--port", str(port), "--enable-metrics", *extra]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = EngineClient(f"http://127.0.0.1:{port}", timeout_s=60)
        deadline = time.monotonic() + 120
        while not client.healthy(timeout_s=10):
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            assert time.monotonic() < deadline, "the reference engine did not become ready"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout:
            process.stdout.close()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with started() as running:
        yield running


def test_an_emulated_version_before_0_5_13_ignores_return_meta_info_in_chat(server: tuple[str, Any]) -> None:
    """As sglang did before 0.5.13 (data/http.json): chat answers without meta_info, /generate with it."""
    messages = [{"role": "user", "content": "hello"}]
    assert EngineClient(server[0], timeout_s=60).chat(messages, max_new_tokens=8).spec_verify_ct  # 0.5.23: counters
    with started("--emulate-sglang-version", "0.5.12.post1") as (url, _):
        client = EngineClient(url, timeout_s=60)
        assert client.chat(messages, max_new_tokens=8).spec_verify_ct is None
        assert client.generate(text="hello", max_new_tokens=8).spec_verify_ct


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
    """Every meta_info key the document lists for a finished speculative request is there, and no spec key it does not list."""
    import json
    import urllib.request

    request = urllib.request.Request(server[0] + "/generate", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode())
    with urllib.request.urlopen(request) as response:
        meta = json.loads(response.read())["meta_info"]
    if REFERENCE_DOC.exists():
        section = REFERENCE_DOC.read_text().split("### 4.2", 1)[1].split("### 4.3", 1)[0]
        always = re.findall(r"`(\w+)`", section.split("- Always:", 1)[1].split("\n  - On the finished", 1)[0])
        spec = [k for k in re.findall(r"- `(spec_\w+)`", section) if not k.startswith(("spec_cap", "spec_block"))]
    else:  # the same lists, as the document has them
        always = ["id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions", "reasoning_tokens",
                  "completion_tokens", "cached_tokens", "cached_tokens_details"]
        spec = ["spec_verify_ct", "spec_accept_length", "spec_accept_rate", "spec_num_correct_drafts",
                "spec_num_proposed_drafts", "spec_correct_drafts_histogram"]
    optional = {"cached_tokens_details"}
    assert set(always) - optional <= set(meta)
    assert set(spec) == {k for k in meta if k.startswith("spec_")}
    assert "e2e_latency" in meta and meta["finish_reason"]["type"] in ("length", "stop")


def test_server_info_model_info_and_errors(server: tuple[str, Any]) -> None:
    client = EngineClient(server[0])
    info = client.server_info()
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_draft_tokens"] == 4 and info["tp_size"] == 1
    assert info["version"] == "0.5.23" and isinstance(info["internal_states"], list)
    client.generate(text="hi", max_new_tokens=4)
    assert client.server_info()["internal_states"][0]["avg_spec_accept_length"] > 0
    assert client.model_info()["architectures"] == ["LlamaForCausalLM"]
    with pytest.raises(EngineHTTPError) as info_error:
        client._request("POST", "/generate", {"text": "x", "sampling_params": {"max_new_token": 3}})
    assert info_error.value.status == 400 and "unknown field" in str(info_error.value)
