"""Reading a streamed /generate answer: sglang's server-sent events, one `data: {json}` per decode
step, then `data: [DONE]`."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

from specctl.verdict.engine_errors import MAX_ANSWER_BYTES, SHOWN_BYTES
from specctl.verdict.generation import MalformedBody, completion_tokens

__all__ = ["Stream"]


class Stream:
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
            if self.first_token_s is None and completion_tokens(chunk) > 0:
                self.first_token_s = time.perf_counter() - self.start
            self.last = chunk
