"""The engine double of the fast tier: the real release scripts start a tiny stub process in place of the
engine, and this controller, in the pytest process, serves sglang's HTTP API for it while it lives.

A fast-tier profile names `engine.name: reference` and `engine.python: <FakeEngine.python>`, a stand-in
interpreter script that runs everything on the real interpreter (`sys.executable`: the host facts, the
check's probe, the chat-ids rendering) except the server launch `-m specctl.engines.reference ARGS`,
which becomes `python -S -I _engine_stub.py CONTROLLER ARGS`: a stdlib-only process that starts in
milliseconds, reports its pid, argv and release directory over an abstract Unix socket, prints the
start-up log lines the engine prints (`startup_stages` reads them), and blocks until it is killed. The
launch script's `setsid`, pid file, watchdog, stop by process group and the port facts all act on that
real process; the controller serves HTTP on the argv's --host/--port (a fake host's own address for a
wildcard host) only while the stub's socket is open, so a stopped server really stops answering.

What each server does is scripted per release with `FakeEngine.on(...)` (matched on profile name,
version, host, port, baseline): accept length per request (deterministic: verify's verdict is exact),
latency as the server reports it (no sleeping), failing health, a crash at start, an exit during
start-up, a start that never becomes ready, a refused route, drift in /server_info, a delay per request.

Standard library only (and specctl's own launcher parser, which imports no torch).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

STUB = Path(__file__).with_name("_engine_stub.py")
MARKER = "# specctl test double: stand-in engine interpreter"
# A fake host's interpreter (the stand-in, SPECCTL_FAKE_HOST_ADDRESS set): the wildcard address is that
# host's own, so each fake host has ports of its own while all share this machine's.
FAKE_HOST_SITE = """import os
import socket

_ADDRESS = os.environ.get("SPECCTL_FAKE_HOST_ADDRESS")
if _ADDRESS:
    _bind = socket.socket.bind

    def _bind_here(self, address):
        if isinstance(address, tuple) and address[:1] in (("0.0.0.0",), ("",)):
            address = (_ADDRESS, *address[1:])
        return _bind(self, address)

    socket.socket.bind = _bind_here
"""
SERVER_MODULE = "specctl.engines.reference"
_counter = itertools.count()

# sglang's start-up lines (the reference engine prints the same ones; `startup_stages` reads them)
LOADING = ["Load weight begin. device=cpu (engine double)"]
LOADED = [
    "Load weight end. type=LlamaForCausalLM, dtype=float64, device=cpu",
    "Capture cuda graph begin. (engine double)",
    "Capture cuda graph end. Time elapsed: 0.0 s",
]
READY = "The server is fired up and ready to roll!"
BIND_WAIT_S = 5.0  # how long a new server waits for the listener of a stopped one on its address to close


@dataclass(frozen=True)
class Behaviour:
    """What one server of the double does.

    start: "serve"; "crash" (exits with `exit_code` before loading); "exit" (exits during start-up,
        after loading began and `exit_after_s`); "hang" (loads, never listens: readiness times out).
    accept_length: per generation request, cycling (the warm-up request counts); a speculative server only.
    health: False answers /health_generate (and /health) with 503.
    refuse: routes answered with `refuse_status` (e.g. {"/server_info"}).
    server_info: keys laid over what /server_info reports (drift).
    token_s / verify_s: server-reported time per baseline token / per speculative verify step.
    delay_s: a real pause before each generation answer (deadlines, cancellation).
    log: extra log lines after loading; exit_log: the lines a crash prints.
    """

    start: str = "serve"
    accept_length: float | Sequence[float] = 3.5
    health: bool = True
    refuse: frozenset[str] = frozenset()
    refuse_status: int = 500
    server_info: Mapping[str, Any] = field(default_factory=dict)
    token_s: float = 0.010
    verify_s: float = 0.012
    first_token_s: float = 0.02
    delay_s: float = 0.0
    exit_code: int = 1
    exit_after_s: float = 0.1
    log: Sequence[str] = ()
    exit_log: Sequence[str] = ("RuntimeError: engine double told to crash at start",)


@dataclass
class Rule:
    behaviour: Behaviour
    profile: str | None = None
    version: int | None = None
    host: str | None = None
    port: int | None = None
    baseline: bool | None = None
    steps: int | None = None  # --speculative-num-steps (tune's candidates differ in it)

    def matches(self, server: Server) -> bool:
        return all(
            want is None or want == got
            for want, got in (
                (self.profile, server.profile),
                (self.version, server.version),
                (self.host, server.host),
                (self.port, server.port),
                (self.baseline, server.baseline),
                (self.steps, server.resolved.get("speculative_num_steps")),
            )
        )


@dataclass
class Request:
    host: str
    port: int
    release: str
    method: str
    path: str
    body: Any


class Server:
    """One stub process and, while it lives, the HTTP listener answering for it."""

    def __init__(self, engine: FakeEngine, conn: socket.socket, hello: dict[str, Any]) -> None:
        from specctl.engines import get_engine
        from specctl.engines.reference.server import build_parser, resolved_args

        self.engine = engine
        self.conn = conn
        self.pid: int = hello["pid"]
        self.argv: list[str] = hello["argv"]
        self.cwd: str = hello["cwd"]
        self.release_dir: str = hello["release_dir"] or hello["cwd"]
        self.release = Path(self.release_dir).name
        summary = _read_json(Path(self.release_dir) / "release.json")
        self.profile: str | None = summary.get("profile") or summary.get("name")
        self.version: int | None = summary.get("version")
        root = str(Path(self.release_dir).parents[2]) if self.release_dir.count("/") >= 3 else ""
        self.host: str = hello["host"] or engine.host_of_root(root)
        args = build_parser().parse_args(self.argv)
        self.args = args
        self.port: int = args.port
        self.baseline = not args.speculative_algorithm
        self.resolved: dict[str, Any] = resolved_args(args)
        self.contract = get_engine("sglang").http_contract(args.emulate_sglang_version)
        self.generations = 0
        self.lock = threading.Lock()
        self.http: ThreadingHTTPServer | None = None
        self.alive = True

    @property
    def behaviour(self) -> Behaviour:
        """Looked up at each use: a rule added while the server runs changes its answers from then on."""
        return self.engine.behaviour_for(self)

    # --- the process side -----------------------------------------------------------------------

    def tell(self, **order: Any) -> None:
        try:
            self.conn.sendall((json.dumps(order) + "\n").encode())
        except OSError:
            pass

    def run(self) -> None:
        b = self.behaviour
        try:
            if b.start == "crash":
                self.tell(log=list(b.exit_log), exit=b.exit_code)
            elif b.start == "exit":
                self.tell(log=[*LOADING, *b.log], sleep_s=b.exit_after_s)
                self.tell(log=list(b.exit_log), exit=b.exit_code)
            elif b.start == "hang":
                self.tell(log=[*LOADING, *b.log], wait=True)
            elif self.args.node_rank > 0:  # like a non-zero sglang rank: it serves no HTTP
                self.tell(log=[*LOADING, *LOADED, f"rank {self.args.node_rank} joined; serving no HTTP"], wait=True)
            else:
                self.tell(log=[*LOADING, *LOADED, *b.log])
                try:
                    self.listen()
                except OSError as exc:  # as a real engine whose port is taken: it says so and exits
                    self.tell(log=[f"ERROR: could not bind {self.args.host}:{self.port}: {exc}"], exit=1)
                    raise
                self.tell(
                    log=[f"Uvicorn running on http://{self.args.host}:{self.port} (engine double)", READY], wait=True
                )
            while self.conn.recv(4096):  # EOF: the process is gone (killed, or exited)
                pass
        except OSError:
            pass
        finally:
            self.close()

    def listen(self) -> None:
        address = self.engine.bind_address(self.host, self.args.host)
        handler = type("Handler", (_Handler,), {"server_double": self})
        kind = _HTTPServer6 if ":" in address else _HTTPServer
        deadline = time.monotonic() + BIND_WAIT_S
        while True:
            try:
                http = kind((address, self.port), handler)
                break
            except OSError:
                # the previous server of this address was just stopped: its listener closes once the
                # controller sees its socket end (milliseconds); a port held by a live server stays taken
                if time.monotonic() > deadline or self.engine.holds(address, self.port, self):
                    raise
                time.sleep(0.01)
        self.http = http
        threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def process_alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie (its parent, init here, reaps late) is gone
            return Path(f"/proc/{self.pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
        except (OSError, IndexError):
            return False

    def close(self) -> None:
        with self.lock:
            self.alive = False
            http, self.http = self.http, None
        if http is not None:
            http.shutdown()
            http.server_close()
        try:
            self.conn.close()
        except OSError:
            pass

    # --- the HTTP side ----------------------------------------------------------------------------

    def next_accept_length(self) -> float:
        lengths = self.behaviour.accept_length
        seq = [float(lengths)] if isinstance(lengths, (int, float)) else [float(x) for x in lengths]
        with self.lock:
            i = self.generations
            self.generations += 1
        return seq[i % len(seq)]

    def meta_info(self, prompt_tokens: int, max_new_tokens: int) -> dict[str, Any]:
        b = self.behaviour
        completion = max(1, max_new_tokens)
        meta: dict[str, Any] = {
            "id": f"double-{next(_counter)}",
            "finish_reason": {"type": "length", "length": completion},
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            "completion_tokens": completion,
            "cached_tokens": 0,
        }
        if self.baseline:
            meta["e2e_latency"] = completion * b.token_s
        else:
            accept = self.next_accept_length()
            steps = int(self.resolved.get("speculative_num_steps") or 3)
            verify_ct = max(1, min(completion, round(completion / accept)))
            correct = completion - verify_ct
            meta |= {
                "e2e_latency": verify_ct * b.verify_s,
                "spec_verify_ct": verify_ct,
                "spec_accept_length": completion / verify_ct,
                "spec_accept_rate": correct / (verify_ct * steps),
                "spec_num_correct_drafts": correct,
                "spec_num_proposed_drafts": verify_ct * steps,
                "spec_correct_drafts_histogram": _histogram(correct, verify_ct, steps),
            }
        if self.resolved.get("enable_metrics"):
            meta["first_token_latency"] = b.first_token_s
        return meta

    def server_info(self) -> dict[str, Any]:
        version = self.args.emulate_sglang_version
        info = {
            **self.resolved,
            "version": version,
            "launch_command": " ".join(["python", "-m", SERVER_MODULE, *self.argv]),
        }
        return {**info, "internal_states": [{}], **self.behaviour.server_info}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # as uvicorn binds: a TIME_WAIT leftover of the previous server does not count


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server_double: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _send(self, status: int, body: Any = None, *, content_type: str = "application/json") -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        s = self.server_double
        body = self._body() if method == "POST" else None
        if not s.process_alive():
            # A killed engine's listening socket dies with it, so it never answers again; here the
            # listener closes only once the controller sees the stub's socket end. Until then a
            # request must not be answered as the dead server (a restarted one would look ready).
            self.close_connection = True
            return
        path = self.path.split("?", 1)[0]
        s.engine.requests.append(Request(s.host, s.port, s.release, method, path, body))
        b = s.behaviour
        if path in b.refuse:
            return self._send(b.refuse_status, {"error": {"message": f"{path} refused by the engine double"}})
        if path in ("/health", "/health_generate"):
            return self._send(200 if b.health else 503)
        if path in ("/get_server_info", s.contract.server_info_path):  # the emulated release's routes
            return self._send(200, s.server_info())
        if path in ("/get_model_info", s.contract.model_info_path):
            return self._send(
                200,
                {
                    "model_path": s.resolved["model_path"],
                    "served_model_name": s.resolved["served_model_name"],
                    "tokenizer_path": s.resolved["model_path"],
                    "is_generation": True,
                    "weight_version": "default",
                },
            )
        if path == "/flush_cache" and method == "POST":
            return self._send(200, b"Cache flushed.\n", content_type="text/plain")
        if path == "/generate" and method == "POST" and isinstance(body, dict):
            return self._generate(body)
        if path == "/v1/chat/completions" and method == "POST" and isinstance(body, dict):
            return self._chat(body)
        return self._send(404, {"error": {"message": f"{method} {path} is not served by the engine double"}})

    def _generate(self, body: dict[str, Any]) -> None:
        s = self.server_double
        params = body.get("sampling_params") or {}
        ids = body.get("input_ids")
        prompt_tokens = len(ids) if isinstance(ids, list) else len(str(body.get("text") or "").split()) + 1
        meta = s.meta_info(prompt_tokens, int(params.get("max_new_tokens", 128)))
        time.sleep(s.behaviour.delay_s)
        n = meta["completion_tokens"]
        if not body.get("stream"):
            return self._send(200, {"text": "x" * n, "output_ids": list(range(n)), "meta_info": meta})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for i in range(1, n + 1):  # sglang's non-incremental chunks: cumulative output, the last one whole
            chunk = {"completion_tokens": i, "finish_reason": None} if i < n else {}
            self.wfile.write(_event({"text": "x" * i, "output_ids": list(range(i)), "meta_info": {**meta, **chunk}}))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _chat(self, body: dict[str, Any]) -> None:
        s = self.server_double
        messages = body.get("messages") or []
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict)) + 1
        meta = s.meta_info(prompt_tokens, int(body.get("max_tokens") or body.get("max_completion_tokens") or 128))
        time.sleep(s.behaviour.delay_s)
        n = meta["completion_tokens"]
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": "x" * n},
            "finish_reason": "length",
        }
        if body.get("return_meta_info") and s.contract.chat_meta_info:  # ignored before sglang 0.5.13
            choice["meta_info"] = meta
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        self._send(
            200,
            {
                "id": meta["id"],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": s.resolved["served_model_name"],
                "choices": [choice],
                "usage": usage,
            },
        )


def _event(data: Any) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


def _histogram(correct: int, verify_ct: int, steps: int) -> list[int]:
    """How many verify steps accepted 0..steps drafts, spread evenly (it adds up to `correct`)."""
    histogram = [0] * (steps + 1)
    base, extra = divmod(correct, verify_ct)
    for i in range(verify_ct):
        histogram[min(steps, base + (1 if i < extra else 0))] += 1
    return histogram


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class FakeEngine:
    """The controller: a Unix socket the stubs report to, and the HTTP doubles it serves for them.

    Use as a context manager (the `fake_engine` fixture does): on exit every listener closes and every
    stub still running is told to end, so nothing outlives the test.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.address = f"specctl-fake-engine-{os.getpid()}-{next(_counter)}-{time.monotonic_ns()}"
        self.rules: list[Rule] = []
        self.servers: list[Server] = []
        self.requests: list[Request] = []
        self.hosts: dict[str, tuple[str, str]] = {}  # fake host name -> (state root, address)
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self.python = str(self.write_stand_in(workdir / "engine-python"))

    # --- scripting --------------------------------------------------------------------------------

    def on(
        self,
        *,
        profile: str | None = None,
        version: int | None = None,
        host: str | None = None,
        port: int | None = None,
        baseline: bool | None = None,
        steps: int | None = None,
        **behaviour: Any,
    ) -> Behaviour:
        """Script the servers that match (the last matching rule wins; unmatched ones serve with defaults)."""
        if "refuse" in behaviour:
            behaviour["refuse"] = frozenset(behaviour["refuse"])
        b = Behaviour(**behaviour)
        self.rules.append(Rule(b, profile, version, host, port, baseline, steps))
        return b

    def behaviour_for(self, server: Server) -> Behaviour:
        for rule in reversed(self.rules):
            if rule.matches(server):
                return rule.behaviour
        return Behaviour()

    def add_host(self, name: str, root: str, address: str) -> None:
        self.hosts[name] = (root, address)

    def host_of_root(self, root: str) -> str:
        for name, (host_root, _) in self.hosts.items():
            if root == host_root.rstrip("/"):
                return name
        return "local"

    def bind_address(self, host: str, wanted: str) -> str:
        """A wildcard bind on a fake host is that host's own address; a named address is taken as given."""
        if wanted in ("0.0.0.0", "::", "") and host in self.hosts:
            return self.hosts[host][1]
        return "127.0.0.1" if wanted in ("0.0.0.0", "") else wanted

    # --- what happened ----------------------------------------------------------------------------

    def holds(self, address: str, port: int, asking: Server) -> bool:
        """Whether a server whose process still lives listens on (address, port)."""
        for server in self.servers:
            http = server.http
            if server is not asking and http is not None and server.process_alive():
                if http.server_address[:2] == (address, port):
                    return True
        return False

    def live(self) -> list[Server]:
        return [s for s in self.servers if s.alive]

    def started(self, **match: Any) -> list[Server]:
        return [s for s in self.servers if all(getattr(s, k) == v for k, v in match.items())]

    def generation_requests(self, **match: Any) -> list[Request]:
        return [
            r
            for r in self.requests
            if r.path in ("/generate", "/v1/chat/completions") and all(getattr(r, k) == v for k, v in match.items())
        ]

    # --- the stand-in interpreter -----------------------------------------------------------------

    def write_stand_in(self, path: Path) -> Path:
        """A sh script that is `sys.executable` for everything but the engine's launch; on a fake host
        (SPECCTL_FAKE_HOST_ADDRESS set by its transport), a socket bound to the wildcard address binds
        that host's own address instead (the port fact and the proof's port check: each host has its
        own ports), by a `sitecustomize` on the interpreter's path."""
        path.parent.mkdir(parents=True, exist_ok=True)
        site = path.parent / f"{path.name}-site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(FAKE_HOST_SITE)
        real = sys.executable
        path.write_text(
            "#!/bin/sh\n"
            f"{MARKER}\n"
            f'if [ "${{1:-}}" = -m ] && [ "${{2:-}}" = {SERVER_MODULE} ]; then\n'
            f'  shift 2; exec {_q(real)} -S -I {_q(str(STUB))} {_q(self.address)} "$@"\n'
            "fi\n"
            'if [ -n "${SPECCTL_FAKE_HOST_ADDRESS:-}" ]; then\n'
            f"  PYTHONPATH={_q(str(site))}${{PYTHONPATH:+:$PYTHONPATH}}; export PYTHONPATH\n"
            "fi\n"
            f'exec {_q(real)} "$@"\n'
        )
        path.chmod(0o755)
        return path

    # --- lifetime ---------------------------------------------------------------------------------

    def __enter__(self) -> FakeEngine:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind("\0" + self.address)
        listener.listen(64)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, daemon=True, name="fake-engine")
        self._acceptor.start()
        return self

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            line = conn.makefile("r").readline()
            server = Server(self, conn, json.loads(line))
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the stub ends (its socket closes); no server
            print(f"engine double: a stub could not register: {exc!r}", file=sys.stderr)
            conn.close()
            return
        self.servers.append(server)
        server.run()

    def __exit__(self, *exc: object) -> None:
        if self._listener is not None:
            # Wake the accept thread and wait for it before the descriptor is closed: a thread still
            # about to call accept() on a closed number would accept on whatever socket reuses it
            # next, the next test's controller, and answer that test's servers with this one's rules.
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if self._acceptor is not None:
                self._acceptor.join(timeout=5)
            self._listener.close()
        for server in list(self.servers):
            server.close()


def launches_a_real_engine(launch: Path) -> str | None:
    """Why a launch script would start a real engine (its interpreter is not the double's stand-in), else None."""
    import shlex

    try:
        text = "\n" + launch.read_text()
    except OSError:
        return None
    start = text.find("\nexec ")  # the script's last command, over its ` \\` continuation lines
    words = shlex.split(text[start:].replace(" \\\n", " "))[1:] if start >= 0 else []
    if len(words) < 3 or words[1] != "-m" or words[2] not in (SERVER_MODULE, "sglang.launch_server"):
        return None
    try:
        head = Path(words[0]).read_bytes()[:4096]
    except OSError:
        return None
    if MARKER.encode() in head or not head.startswith(b"\x7fELF"):
        return None  # the double's stand-in, or a script of the test's own (one that hangs, say)
    return f"{launch} runs {words[0]} -m {words[2]}"


def _q(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def fake_engine_context(workdir: Path) -> Iterator[FakeEngine]:
    with FakeEngine(workdir) as engine:
        yield engine
