"""The reference engine's launcher: sglang's flags in, sglang's HTTP API (`api`) out, on uvicorn.

`python -m specctl.engines.reference <sglang launch flags>` parses the flags `render` produces (an
unknown one is an argparse error, as in sglang), loads the HF-format target and EAGLE-3 drafter,
resolves capture positions with the convention of the sglang version it emulates (the same table
specctl checks against), starts the batching scheduler and serves the API with FastAPI on uvicorn,
as sglang does. SIGTERM (the deploy flow stops a server by its process group) shuts it down cleanly:
uvicorn stops accepting, open requests get a short grace, then the scheduler thread ends.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from specctl.engines.sglang.metrics import DECODE_LOG_INTERVAL

DEFAULT_EMULATED_VERSION = "0.5.23"
DEFAULT_MAX_RUNNING_REQUESTS = 48
GRACEFUL_SHUTDOWN_S = 3  # open requests (streams included) may finish this long after SIGTERM


def log(message: str) -> None:
    """sglang-style log line on stderr (the server log specctl reads for progress)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {message}", file=sys.stderr, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The subset of sglang's launch flags the reference engine honours; the rest are refused."""
    p = argparse.ArgumentParser(
        prog="python -m specctl.engines.reference",
        description="CPU reference engine speaking sglang's flags and HTTP API.",
    )
    p.add_argument("--model-path", "--model", required=True)
    p.add_argument("--revision")
    p.add_argument("--speculative-algorithm")
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model")
    p.add_argument("--speculative-draft-model-revision")
    p.add_argument("--speculative-num-steps", type=int)
    p.add_argument("--speculative-eagle-topk", type=int)
    p.add_argument("--speculative-num-draft-tokens", type=int)
    p.add_argument("--speculative-adaptive", action="store_true")
    p.add_argument("--speculative-adaptive-config")
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
    p.add_argument("--decode-log-interval", type=int, default=DECODE_LOG_INTERVAL)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int)
    p.add_argument("--log-level", default="info")
    p.add_argument(
        "--emulate-sglang-version",
        default=DEFAULT_EMULATED_VERSION,
        help="the sglang version whose capture convention and API this engine follows",
    )
    return p


def adaptive_release(version: str) -> bool:
    from specctl.engines import get_engine

    return get_engine("sglang").adaptive_tiers(version) is not None


def resolved_args(args: argparse.Namespace) -> dict[str, Any]:
    """What /server_info reports: the resolved arguments, with sglang's rewrites applied."""
    algorithm = args.speculative_algorithm.upper() if args.speculative_algorithm else None
    steps, topk, tokens = args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    if algorithm and steps is None and topk is None and tokens is None:
        steps, topk, tokens = 3, 1, 4
    if algorithm and topk == 1 and steps is not None:
        tokens = steps + 1  # sglang 0.5.23 forces this for chain drafting
    return {
        "model_path": args.model_path,
        "revision": args.revision,
        "speculative_algorithm": algorithm,
        "speculative_draft_model_path": args.speculative_draft_model_path,
        "speculative_draft_model_revision": args.speculative_draft_model_revision
        or ("main" if args.speculative_draft_model_path else None),
        "speculative_num_steps": steps,
        "speculative_eagle_topk": topk,
        "speculative_num_draft_tokens": tokens,
        "tp_size": args.tp_size,
        "nnodes": args.nnodes,
        "node_rank": args.node_rank,
        "dist_init_addr": args.dist_init_addr,
        "host": args.host,
        "port": args.port,
        "mem_fraction_static": args.mem_fraction_static,
        # 48 is sglang 0.5.23's default with speculation (arg_groups/speculative_hook.py); without it sglang
        # sizes the batch from the KV pool, which for the tiny target would allow hundreds: 48 keeps memory small
        "max_running_requests": args.max_running_requests
        if args.max_running_requests is not None
        else DEFAULT_MAX_RUNNING_REQUESTS,
        "context_length": args.context_length,
        "dtype": args.dtype,
        "served_model_name": args.served_model_name or args.model_path,
        "enable_metrics": args.enable_metrics,
        "device": "cpu",
        "speculative_adaptive": bool(args.speculative_adaptive and algorithm),
        "speculative_adaptive_config": args.speculative_adaptive_config,
    }


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


def serve(args: argparse.Namespace, launch_command: str) -> None:
    """Load, then serve until SIGTERM/SIGINT. The port is bound before the ready line is logged."""
    import uvicorn

    from specctl.engines import get_engine
    from specctl.engines.reference.api import Service, make_app
    from specctl.engines.reference.metrics import Exporter
    from specctl.engines.reference.runtime import load
    from specctl.engines.reference.scheduler import Scheduler

    resolved = resolved_args(args)
    runtime = load(args, resolved, log)

    def on_error(exc: BaseException) -> None:
        log(f"scheduler step failed: {type(exc).__name__}: {exc}")

    metrics = None
    if args.enable_metrics:
        metrics = Exporter(
            args.emulate_sglang_version,
            resolved["served_model_name"],
            speculative=runtime.engine.drafter is not None,
            num_steps=resolved["speculative_num_steps"] or 0,
            num_draft_tokens=resolved["speculative_num_draft_tokens"] or 0,
            decode_log_interval=args.decode_log_interval,
        )
    service = Service(
        runtime,
        Scheduler(runtime.engine, on_error, metrics.step if metrics else None),
        # the HTTP API of the emulated version, from the same per-version data verify reads
        get_engine("sglang").http_contract(args.emulate_sglang_version),
        resolved,
        {
            "launch_command": launch_command,
            "version": args.emulate_sglang_version,
            "frontend": "python",
            "startup_time": time.time(),
        },
        args.enable_metrics,
        log,
        metrics=metrics,
    )
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    listener = socket.create_server((args.host, args.port), family=family)
    config = uvicorn.Config(
        make_app(service),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    log(
        f"Uvicorn running on http://{args.host}:{args.port} "
        f"(reference engine, emulating sglang {args.emulate_sglang_version})"
    )
    uvicorn.Server(config).run(sockets=[listener])


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The launch flags as the engine takes them, or the parser's error (argparse's exit 2 and its
    message): what `main` starts from, and what a deploy's proof asks before anything stops."""
    argv = list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tp_size != 1:
        parser.error(
            f"--tp-size {args.tp_size}: the reference engine runs the whole model on one CPU device; use --tp-size 1"
        )
    if args.speculative_algorithm and args.speculative_algorithm.upper() != "EAGLE3":
        parser.error(
            f"--speculative-algorithm {args.speculative_algorithm}: the reference engine implements EAGLE3 only"
        )
    if args.speculative_algorithm and args.speculative_eagle_topk not in (None, 1):
        parser.error("--speculative-eagle-topk must be 1: the reference engine drafts a chain")
    if args.max_running_requests is not None and args.max_running_requests < 1:
        parser.error("--max-running-requests must be >= 1")
    if args.decode_log_interval < 1:
        parser.error("--decode-log-interval must be >= 1")
    if (args.speculative_adaptive or args.speculative_adaptive_config) and not adaptive_release(
        args.emulate_sglang_version
    ):
        flags = [f for f in ("--speculative-adaptive", "--speculative-adaptive-config") if f in argv]
        parser.error(f"unrecognized arguments: {' '.join(flags)}")  # as the emulated release's own parser says
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    nodes = rendezvous(args)
    try:
        serve(args, " ".join(["python", "-m", "specctl.engines.reference", *argv]))
    finally:
        for node in nodes:
            node.close()
    return 0
