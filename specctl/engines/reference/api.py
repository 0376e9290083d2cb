"""The reference engine's HTTP API: sglang 0.5.23's routes, fields and event streams, on FastAPI.

Routes: /health, /health_generate, /server_info, /model_info, /generate, /v1/chat/completions,
/v1/models, /flush_cache and, with --enable-metrics, /metrics (`metrics`). Each generation is queued
on the scheduler and its progress arrives here per decode step. `"stream": true` answers server-sent
events as sglang does: /generate sends sglang's non-incremental chunks (cumulative `text` and
`output_ids`, meta_info with `finish_reason` null until the last chunk, which carries everything the
plain answer's meta_info has), the chat route OpenAI `chat.completion.chunk` deltas; both end with
`data: [DONE]`. Where an emulated sglang version differs (`server.contract`, from data/http.json),
the route follows it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from specctl.engines.base import HttpContract
from specctl.engines.reference.metrics import CONTENT_TYPE, Exporter
from specctl.engines.reference.runtime import Runtime, finish_reason
from specctl.engines.reference.scheduler import Progress, Scheduler
from specctl.engines.reference.speculate import FinishedRequest

__all__ = ["Service", "make_app"]

STREAM_META_ERROR = (
    "return_meta_info is not supported with streaming. "
    "Please set stream=false when using return_meta_info=true."
)  # sglang 0.5.23 serving_chat.py
INCOMPLETE_CHAR = (
    "\ufffd"  # a multi-byte character cut by a step boundary: held back until complete, as sglang's detokenizer does
)


# --- request bodies ----------------------------------------------------------------------------------


class SamplingParams(BaseModel):
    """sglang's sampling keys; the reference engine decodes greedily, so only two of them act."""

    model_config = ConfigDict(extra="forbid")

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: Any = None
    top_k: Any = None
    min_p: Any = None
    stop: Any = None
    stop_token_ids: Any = None
    ignore_eos: Any = None
    min_new_tokens: Any = None
    n: Any = None
    sampling_seed: Any = None
    frequency_penalty: Any = None
    presence_penalty: Any = None
    repetition_penalty: Any = None


class GenerateBody(BaseModel):
    """A /generate request: one prompt as `text` or `input_ids` (batches are not supported)."""

    text: str | None = None
    input_ids: list[int] | None = None
    sampling_params: SamplingParams = SamplingParams()
    stream: bool = False


class ChatMessage(BaseModel):
    role: str
    content: str = ""


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatBody(BaseModel):
    """An OpenAI chat request, with sglang's `return_meta_info` extension."""

    messages: list[ChatMessage]
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = 1.0
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_meta_info: bool = False


class BadRequest(Exception):
    """A request the engine refuses (400), with the message the client sees."""


# --- the service behind the routes -------------------------------------------------------------------


@dataclass
class Service:
    """The loaded runtime and its scheduler as the routes use them, plus what /server_info reports."""

    runtime: Runtime
    scheduler: Scheduler
    contract: HttpContract
    resolved: dict[str, Any]
    server_info_extra: dict[str, Any]
    enable_metrics: bool
    log: Callable[[str], None]
    lifetime: dict[str, int] = field(default_factory=lambda: {"completion_tokens": 0, "verify_ct": 0})
    metrics: Exporter | None = None  # with --enable-metrics

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, *, stream: bool = False, log_metrics: bool = True
    ) -> Submitted:
        """Queue a request; `log_metrics` False keeps it out of the request counters (sglang's health checks)."""
        if params.temperature != 0.0:
            raise BadRequest("the reference engine decodes greedily only: send temperature 0")
        loop = asyncio.get_running_loop()
        submitted = Submitted(self, len(prompt_ids), stream, log_metrics)
        try:
            submitted.rid = self.scheduler.submit(prompt_ids, params.max_new_tokens, submitted.callback(loop))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        return submitted

    def meta_info(self, rid: str, prompt_tokens: int, progress: Progress) -> dict[str, Any]:
        """sglang's meta_info after a step: counts so far, then on the last chunk the whole answer's."""
        g = progress.done
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish_reason(g) if g else None,
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": len(progress.output_ids),
            "cached_tokens": 0,
        }
        if g is None:
            return meta
        meta["e2e_latency"] = g.e2e_s
        if self.enable_metrics:
            meta["first_token_latency"] = g.first_token_s
        return meta | g.spec_meta_info()  # empty when sglang would leave the spec_* keys out

    def finished(self, g: FinishedRequest, submitted: Submitted) -> None:
        if self.metrics is not None and submitted.log_metrics:
            self.metrics.finished(g.prompt_tokens, g.completion_tokens, g.spec_verify_ct, streaming=submitted.stream)
        if g.spec_verify_ct:
            self.lifetime["completion_tokens"] += g.completion_tokens
            self.lifetime["verify_ct"] += g.spec_verify_ct

    def text(self, progress: Progress) -> str:
        text = self.runtime.decode(progress.output_ids)
        return text if progress.done else text.rstrip(INCOMPLETE_CHAR)

    def server_info(self) -> dict[str, Any]:
        state: dict[str, Any] = {**self.resolved, "last_gen_throughput": 0.0, "memory_usage": {}}
        if self.lifetime["verify_ct"]:
            state["avg_spec_accept_length"] = self.lifetime["completion_tokens"] / self.lifetime["verify_ct"]
        running, waiting = self.scheduler.load
        forwards = self.scheduler.engine.forwards
        engine = {
            **self.runtime.describe(),
            "target_forwards": forwards.target,
            "drafter_forwards": forwards.drafter,
            "running_requests": running,
            "waiting_requests": waiting,
        }
        return {**self.resolved, **self.server_info_extra, "internal_states": [state], "reference_engine": engine}


class Submitted:
    """A queued request as the event loop sees it: the scheduler thread hands progress over per step."""

    def __init__(self, service: Service, prompt_tokens: int, stream: bool, log_metrics: bool) -> None:
        self.service = service
        self.prompt_tokens = prompt_tokens
        self.stream = stream
        self.log_metrics = log_metrics
        self.rid = ""
        self.queue: asyncio.Queue[Progress] = asyncio.Queue()
        self.ended = False

    def callback(self, loop: asyncio.AbstractEventLoop) -> Callable[[Progress], None]:
        def hand_over(progress: Progress) -> None:
            try:
                loop.call_soon_threadsafe(self.queue.put_nowait, progress)
            except RuntimeError:  # the event loop closed (shutdown): nobody is listening
                pass

        return hand_over

    async def progress(self) -> AsyncIterator[Progress]:
        """Every step's progress up to the last; a client that leaves early aborts the request."""
        try:
            while not self.ended:
                update = await self.queue.get()
                if update.done is not None or update.error is not None:
                    self.ended = True
                    if update.done is not None:
                        self.service.finished(update.done, self)
                yield update
        finally:
            if not self.ended:
                self.service.scheduler.abort(self.rid)

    async def last(self) -> Progress:
        final = Progress(())
        async for update in self.progress():
            final = update
        return final


# --- the app -----------------------------------------------------------------------------------------


def _event(data: Any) -> bytes:
    return b"data: " + json.dumps(data).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def _error(status: int, message: str, *, openai: bool = False) -> JSONResponse:
    if openai:  # sglang's ErrorResponse on the OpenAI routes
        return JSONResponse(
            {"object": "error", "message": message, "type": "BadRequest", "param": None, "code": status},
            status_code=status,
        )
    return JSONResponse({"error": {"message": message}}, status_code=status)


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        if error.get("type") == "extra_forbidden":
            keys = ", ".join(sorted(SamplingParams.model_fields))
            problems.append(f"unknown field `{where.rsplit('.', 1)[-1]}`, expected one of {keys}")
        else:
            problems.append(f"{where}: {error.get('msg')}")
    return "bad request: " + "; ".join(problems)


def make_app(service: Service) -> FastAPI:
    """The FastAPI app; its lifespan runs the scheduler thread and logs sglang's ready line."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        service.scheduler.start()
        service.log("The server is fired up and ready to roll!")
        yield
        service.scheduler.stop()
        service.log("scheduler stopped")

    app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    served = str(service.resolved["served_model_name"])

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(exc), openai=request.url.path.startswith("/v1/"))

    @app.exception_handler(BadRequest)
    async def refused(request: Request, exc: BadRequest) -> JSONResponse:
        return _error(400, str(exc), openai=request.url.path.startswith("/v1/"))

    @app.exception_handler(StarletteHTTPException)
    async def not_served(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, f"{request.method} {request.url.path} is not served by the reference engine")

    @app.api_route("/health", methods=["GET", "POST"])
    @app.api_route("/health_generate", methods=["GET", "POST"])
    async def health() -> Response:
        health = SamplingParams(max_new_tokens=1, temperature=0)
        final = await service.submit([0], health, log_metrics=False).last()
        return Response(status_code=200 if final.done is not None else 503)

    # the emulated release's routes: /get_server_info and /get_model_info always (kept as deprecated
    # aliases), /server_info and /model_info only from the release that added them
    contract = service.contract
    info_paths = dict.fromkeys(("/get_server_info", contract.server_info_path))
    model_paths = dict.fromkeys(("/get_model_info", contract.model_info_path))

    async def server_info() -> dict[str, Any]:
        return service.server_info()

    for path in info_paths:
        app.add_api_route(path, server_info, methods=["GET"])

    async def model_info() -> dict[str, Any]:
        return {
            "model_path": service.runtime.target_dir,
            "served_model_name": served,
            "tokenizer_path": service.runtime.target_dir,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            **service.runtime.model_facts(),
        }

    for path in model_paths:
        app.add_api_route(path, model_info, methods=["GET"])

    @app.api_route("/flush_cache", methods=["GET", "POST"])
    async def flush_cache() -> Response:
        service.lifetime.update(completion_tokens=0, verify_ct=0)
        if service.metrics is not None:
            service.metrics.flush_cache()
        return Response(status_code=200)

    exporter = service.metrics
    if exporter is not None:  # sglang mounts its Prometheus app only with --enable-metrics

        @app.get("/metrics")
        async def metrics() -> Response:
            idle = service.scheduler.load == (0, 0)
            return Response(exporter.render(idle), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served, "object": "model"}]}

    @app.api_route("/generate", methods=["POST", "PUT"])
    async def generate(body: GenerateBody) -> Response:
        if body.input_ids is not None:
            ids = body.input_ids
        elif body.text is not None:
            ids = service.runtime.encode(body.text)
        else:
            raise BadRequest("send `text` (a string) or `input_ids`; batches are not supported")
        submitted = service.submit(ids, body.sampling_params, stream=body.stream)
        if body.stream:
            return StreamingResponse(_generate_events(service, submitted), media_type="text/event-stream")
        final = await submitted.last()
        if final.error is not None:
            return _error(500, final.error)
        return JSONResponse(
            {
                "text": service.text(final),
                "output_ids": list(final.output_ids),
                "meta_info": service.meta_info(submitted.rid, submitted.prompt_tokens, final),
            }
        )

    @app.post("/v1/chat/completions")
    async def chat(body: ChatBody) -> Response:
        asks_meta = body.return_meta_info and service.contract.chat_meta_info  # ignored before sglang 0.5.13
        if body.stream and asks_meta:
            raise BadRequest(STREAM_META_ERROR)
        try:
            prompt = service.runtime.chat_prompt([m.model_dump() for m in body.messages])
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        max_new = body.max_tokens or body.max_completion_tokens or 128
        submitted = service.submit(
            service.runtime.encode(prompt),
            SamplingParams(max_new_tokens=max_new, temperature=body.temperature),
            stream=body.stream,
        )
        created = int(time.time())
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            return StreamingResponse(
                _chat_events(service, submitted, served, created, usage), media_type="text/event-stream"
            )
        final = await submitted.last()
        if final.error is not None:
            return _error(500, final.error, openai=True)
        meta = service.meta_info(submitted.rid, submitted.prompt_tokens, final)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": service.text(final)},
            "finish_reason": meta["finish_reason"]["type"],
        }
        if asks_meta:
            choice["meta_info"] = meta
        return JSONResponse(
            {
                "id": submitted.rid,
                "object": "chat.completion",
                "created": created,
                "model": served,
                "choices": [choice],
                "usage": _usage(meta),
            }
        )

    return app


def _usage(meta: dict[str, Any]) -> dict[str, int]:
    return {
        "prompt_tokens": meta["prompt_tokens"],
        "completion_tokens": meta["completion_tokens"],
        "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
    }


async def _generate_events(service: Service, submitted: Submitted) -> AsyncIterator[bytes]:
    """sglang's non-incremental /generate stream: one chunk per decode step, cumulative."""
    async for update in submitted.progress():
        if update.error is not None:
            yield _event(
                {"error": {"message": update.error, "type": "invalid_request_error", "code": 500, "retryable": False}}
            )
            break
        yield _event(
            {
                "text": service.text(update),
                "output_ids": list(update.output_ids),
                "meta_info": service.meta_info(submitted.rid, submitted.prompt_tokens, update),
            }
        )
    yield DONE


async def _chat_events(
    service: Service, submitted: Submitted, model: str, created: int, usage: bool
) -> AsyncIterator[bytes]:
    """OpenAI chat deltas as sglang streams them: the role first, then each step's new text, then
    the finish reason (and usage when asked) in chunks of their own."""

    def chunk(delta: dict[str, Any], finish: str | None = None, matched: int | None = None) -> bytes:
        choice = {
            "index": 0,
            "delta": {"reasoning_content": None, **delta},
            "logprobs": None,
            "finish_reason": finish,
            "matched_stop": matched,
        }
        return _event(
            {
                "id": submitted.rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [choice],
            }
        )

    sent = ""
    final: Progress | None = None
    async for update in submitted.progress():
        if update.error is not None:
            yield _event(
                {"object": "error", "message": update.error, "type": "InternalServerError", "param": None, "code": 500}
            )
            yield DONE
            return
        if final is None:
            yield chunk({"role": "assistant", "content": ""})
        final = update
        text = service.text(update)
        if len(text) > len(sent):
            yield chunk({"content": text[len(sent) :]})
            sent = text
    if final is not None and final.done is not None:
        meta = service.meta_info(submitted.rid, submitted.prompt_tokens, final)
        reason = meta["finish_reason"]
        yield chunk({}, reason["type"], reason.get("matched"))
        if usage:
            yield _event(
                {
                    "id": submitted.rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _usage(meta),
                }
            )
    yield DONE
