"""The reference engine's launcher and HTTP server: sglang's flags in, sglang's API out.

`python -m specctl.engines.reference <sglang launch flags>` parses the flags `render` produces (an
unknown one is an argparse error, as in sglang), loads the HF-format target and EAGLE-3 drafter,
resolves capture positions with the convention of the sglang version it emulates (the same table
specctl checks against), and serves /health, /health_generate, /server_info, /model_info,
/generate, /v1/chat/completions and /flush_cache with sglang 0.5.23's field names.
Streaming responses are not implemented yet.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_EMULATED_VERSION = "0.5.23"
SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids", "ignore_eos",
                 "min_new_tokens", "n", "sampling_seed", "frequency_penalty", "presence_penalty", "repetition_penalty"}


def log(message: str) -> None:
    """sglang-style log line on stderr (the server log specctl reads for progress)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The subset of sglang's launch flags the reference engine honours; the rest are refused."""
    p = argparse.ArgumentParser(prog="python -m specctl.engines.reference",
                                description="CPU reference engine speaking sglang's flags and HTTP API.")
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--revision")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-draft-model-revision")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", "--nccl-init-addr")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--context-length", type=int)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--served-model-name")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--log-level", default="info")
    p.add_argument("--emulate-sglang-version", default=DEFAULT_EMULATED_VERSION,
                   help="the sglang version whose capture convention and API this engine follows")
    return p


def resolved_args(args: argparse.Namespace) -> dict[str, Any]:
    """What /server_info reports: the resolved arguments, with sglang's rewrites applied."""
    algorithm = args.speculative_algorithm.upper() if args.speculative_algorithm else None
    steps, topk, tokens = args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    if algorithm and steps is None and topk is None and tokens is None:
        steps, topk, tokens = 3, 1, 4
    if algorithm and topk == 1 and steps is not None:
        tokens = steps + 1  # sglang 0.5.23 forces this for chain drafting
    return {
        "model_path": args.model_path, "revision": args.revision, "speculative_algorithm": algorithm,
        "speculative_draft_model_path": args.speculative_draft_model_path,
        "speculative_draft_model_revision": args.speculative_draft_model_revision or ("main" if args.speculative_draft_model_path else None),
        "speculative_num_steps": steps, "speculative_eagle_topk": topk, "speculative_num_draft_tokens": tokens,
        "tp_size": args.tp_size, "nnodes": args.nnodes, "node_rank": args.node_rank, "dist_init_addr": args.dist_init_addr,
        "host": args.host, "port": args.port, "mem_fraction_static": args.mem_fraction_static,
        "max_running_requests": args.max_running_requests if args.max_running_requests is not None else (48 if algorithm else None),
        "context_length": args.context_length, "dtype": args.dtype, "served_model_name": args.served_model_name or args.model_path,
        "enable_metrics": args.enable_metrics, "device": "cpu",
    }


class Server:
    """One loaded engine behind a lock: requests are served one at a time, in arrival order."""

    def __init__(self, args: argparse.Namespace, launch_command: str) -> None:
        from specctl.engines import get_engine
        from specctl.engines.reference.runtime import load

        self.args = args
        self.resolved = resolved_args(args)
        self.launch_command = launch_command
        self.lock = threading.Lock()
        self.runtime = load(args, self.resolved, log)
        # the HTTP API of the emulated version, from the same per-version data verify reads
        self.contract = get_engine("sglang").http_contract(args.emulate_sglang_version)
        self.lifetime = {"completion_tokens": 0, "verify_ct": 0}
        self.started = time.time()

    # --- what the endpoints compute ----------------------------------------------------------------
    def generate_ids(self, prompt_ids: list[int], params: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(params) - SAMPLING_KEYS)
        if unknown:
            raise BadRequest(f"unknown field `{unknown[0]}`, expected one of {', '.join(sorted(SAMPLING_KEYS))}")
        if float(params.get("temperature", 1.0)) != 0.0:
            raise BadRequest("the reference engine decodes greedily only: send temperature 0")
        max_new = int(params.get("max_new_tokens", 128))
        with self.lock:
            start = time.perf_counter()
            out = self.runtime.generate(prompt_ids, max_new)
            e2e = time.perf_counter() - start
            if out.spec_verify_ct:
                self.lifetime["completion_tokens"] += out.completion_tokens
                self.lifetime["verify_ct"] += out.spec_verify_ct
        from specctl.engines.reference.runtime import finish_reason

        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex, "finish_reason": finish_reason(out), "prompt_tokens": len(prompt_ids),
            "weight_version": "default", "num_retractions": 0, "reasoning_tokens": 0,
            "completion_tokens": out.completion_tokens, "cached_tokens": 0, "e2e_latency": e2e,
        }
        if self.args.enable_metrics:
            meta["first_token_latency"] = out.first_token_s
        meta |= out.spec_meta_info()  # empty when sglang would leave the spec_* keys out
        return {"text": self.runtime.decode(out.output_ids), "output_ids": list(out.output_ids), "meta_info": meta}

    def server_info(self) -> dict[str, Any]:
        state: dict[str, Any] = {**self.resolved, "last_gen_throughput": 0.0, "memory_usage": {}}
        if self.lifetime["verify_ct"]:
            state["avg_spec_accept_length"] = self.lifetime["completion_tokens"] / self.lifetime["verify_ct"]
        return {**self.resolved, "launch_command": self.launch_command, "version": self.args.emulate_sglang_version,
                "frontend": "python", "startup_time": self.started, "internal_states": [state],
                "reference_engine": self.runtime.describe()}

    def model_info(self) -> dict[str, Any]:
        return {"model_path": self.args.model_path, "served_model_name": self.resolved["served_model_name"],
                "tokenizer_path": self.args.model_path, "is_generation": True, "preferred_sampling_params": None,
                "weight_version": "default", "has_image_understanding": False, "has_audio_understanding": False,
                **self.runtime.model_facts()}


class BadRequest(Exception):
    pass


def make_handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            data = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(data, dict):
                raise BadRequest("the request body must be a JSON object")
            return data

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self._dispatch("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._dispatch("POST")

        def do_PUT(self) -> None:  # noqa: N802
            self._dispatch("PUT")

        def _dispatch(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            try:
                if path in ("/health", "/health_generate"):
                    server.generate_ids([0], {"max_new_tokens": 1, "temperature": 0})
                    self._send(200, None)
                elif path in ("/server_info", "/get_server_info"):
                    self._send(200, server.server_info())
                elif path in ("/model_info", "/get_model_info"):
                    self._send(200, server.model_info())
                elif path == "/flush_cache":
                    server.lifetime = {"completion_tokens": 0, "verify_ct": 0}
                    self._send(200, None)
                elif path == "/generate" and method in ("POST", "PUT"):
                    self._send(200, self._generate(self._body()))
                elif path == "/v1/chat/completions" and method == "POST":
                    self._send(200, self._chat(self._body()))
                elif path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.resolved["served_model_name"], "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"{method} {path} is not served by the reference engine"}})
            except BadRequest as exc:
                self._send(400, {"error": {"message": str(exc)}})
            except (ValueError, KeyError, TypeError) as exc:
                self._send(400, {"error": {"message": f"bad request: {exc}"}})

        def _generate(self, body: dict[str, Any]) -> dict[str, Any]:
            if body.get("stream"):
                raise BadRequest("streaming is not implemented by the reference engine yet")
            params = dict(body.get("sampling_params") or {})
            if "input_ids" in body:
                ids = body["input_ids"]
            elif isinstance(body.get("text"), str):
                ids = server.runtime.encode(body["text"])
            else:
                raise BadRequest("send `text` (a string) or `input_ids`; batches are not supported")
            return server.generate_ids(list(map(int, ids)), params)

        def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
            if body.get("stream"):
                raise BadRequest("streaming is not implemented by the reference engine yet")
            params = {"max_new_tokens": int(body.get("max_tokens") or body.get("max_completion_tokens") or 128),
                      "temperature": float(body.get("temperature", 1.0))}
            ids = server.runtime.encode(server.runtime.chat_prompt(body["messages"]))
            result = server.generate_ids(ids, params)
            meta = result["meta_info"]
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": result["text"]},
                                      "finish_reason": meta["finish_reason"]["type"]}
            if body.get("return_meta_info") and server.contract.chat_meta_info:  # ignored before sglang 0.5.13
                choice["meta_info"] = meta
            usage = {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
                     "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"]}
            return {"id": meta["id"], "object": "chat.completion", "created": int(time.time()),
                    "model": server.resolved["served_model_name"], "choices": [choice], "usage": usage}

    return Handler


def rendezvous(args: argparse.Namespace) -> list[socket.socket]:
    """Multi-node: rank 0 waits for the other ranks at --dist-init-addr before serving; a non-zero rank
    connects, then lives exactly as long as rank 0 (it serves no HTTP, like a non-zero sglang rank)."""
    if args.nnodes <= 1:
        return []
    if not args.dist_init_addr:
        build_parser().error("--nnodes > 1 needs --dist-init-addr HOST:PORT")
    host, _, port = args.dist_init_addr.rpartition(":")
    if args.node_rank == 0:
        listener = socket.create_server(("0.0.0.0", int(port)))
        listener.settimeout(600)
        peers: list[socket.socket] = []
        log(f"rank 0 waiting for {args.nnodes - 1} other node(s) at {args.dist_init_addr}")
        while len(peers) < args.nnodes - 1:
            conn, _ = listener.accept()
            peers.append(conn)
        log("all nodes joined")
        return [listener, *peers]  # kept open: the other ranks live as long as these sockets
    deadline = time.monotonic() + 600
    while True:
        try:
            conn = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    log(f"rank {args.node_rank} joined {args.dist_init_addr}; serving no HTTP (rank 0 does)")
    conn.settimeout(None)
    while conn.recv(1024):
        pass
    log("rank 0 went away; exiting")
    sys.exit(0)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tp_size != 1:
        parser.error(f"--tp-size {args.tp_size}: the reference engine runs the whole model on one CPU device; use --tp-size 1")
    if args.speculative_algorithm and args.speculative_algorithm.upper() != "EAGLE3":
        parser.error(f"--speculative-algorithm {args.speculative_algorithm}: the reference engine implements EAGLE3 only")
    if args.speculative_algorithm and args.speculative_eagle_topk not in (None, 1):
        parser.error("--speculative-eagle-topk must be 1: the reference engine drafts a chain")
    nodes = rendezvous(args)
    server = Server(args, " ".join(["python", "-m", "specctl.engines.reference", *argv]))
    httpd = ThreadingHTTPServer((args.host, args.port), make_handler(server))
    log(f"Uvicorn running on http://{args.host}:{args.port} (reference engine, emulating sglang {args.emulate_sglang_version})")
    log("The server is fired up and ready to roll!")
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    for node in nodes:
        node.close()
    return 0


