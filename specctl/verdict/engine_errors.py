"""The errors of talking to an engine over HTTP. A wrong answer is the host's fault, not specctl's,
so every failure is a HostError (exit 3) that names the request and shows what came back:

    HostError (specctl.errors, exit 3)
    └── EngineHTTPError        the server answered with an error status, or could not be reached
        ├── EngineTimeout      no complete answer within the request's deadline
        └── EngineAnswerError  an answer that breaks the API: not HTTP, not JSON, or JSON of the wrong shape

Cancellation raises specctl.cancel.Cancelled, which is deliberately not an EngineHTTPError.
"""

from __future__ import annotations

from specctl.errors import HostError

__all__ = ["MAX_ANSWER_BYTES", "SHOWN_BYTES", "EngineAnswerError", "EngineHTTPError", "EngineTimeout"]

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
