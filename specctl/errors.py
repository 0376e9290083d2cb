"""The specctl error tree: every failure a user can cause or meet, with its exit code and fix.

    SpecctlError                      base; carries exit_code (the CLI's exit status) and a one-line fix
    ├── InputError (2)                bad input the user can correct
    │   ├── DocumentError             a YAML file is malformed or fails its schema (file, line, column, field)
    │   ├── CheckpointError           checkpoint metadata cannot be read (source, revision)
    │   ├── EngineError               unknown engine, engine version or architecture
    │   └── ManifestImportError       a drafter's capture convention is ambiguous or missing
    ├── CheckFailed (1)               static checks found errors (raised by flows, not by checks)
    ├── LedgerError (2)               the run ledger cannot be opened, read or written (path)
    └── HostError (3)                 a host or connection failure (hosts, transport; later issues)
        ├── ConnectionLost            the connection broke while a command ran: it may or may not have run
        ├── ServerUnreachable         verify (or a rollback's, a baseline's) reached no server: nothing judged
        └── EngineHTTPError           a server's answer: an error status, a timeout or a malformed body
                                      (verdict/client.py, with EngineTimeout and EngineAnswerError)

Subclasses carry structured fields, never preformatted or coloured text; `cli/_errors.py`
turns them into what, where and how to fix.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CheckFailed",
    "CheckpointError",
    "ConnectionLost",
    "DocumentError",
    "DocumentProblem",
    "EngineError",
    "HostError",
    "InputError",
    "LedgerError",
    "ManifestImportError",
    "ServerUnreachable",
    "SpecctlError",
]


class SpecctlError(Exception):
    """Base of every error specctl reports to a user; `exit_code` is the CLI's exit status (README)."""

    exit_code = 2

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class InputError(SpecctlError):
    """Raised for input the user can correct: exit code 2."""


@dataclass(frozen=True)
class DocumentProblem:
    """One problem in a YAML document, located as precisely as the parser allows."""

    file: str
    line: int | None
    column: int | None
    field: str
    message: str
    fix: str
    source_line: str | None = None


class DocumentError(InputError):
    """Raised when a profile, manifest or inventory file is malformed or fails its schema."""

    def __init__(self, problems: list[DocumentProblem]) -> None:
        first = problems[0]
        super().__init__(f"{len(problems)} problem(s) in {first.file}", fix=first.fix)
        self.problems = problems


class CheckpointError(InputError):
    """Raised when a checkpoint's metadata (config.json, safetensors headers) cannot be read."""

    def __init__(self, message: str, *, source: str, revision: str | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.source = source
        self.revision = revision


class EngineError(InputError):
    """Raised for an engine, engine version or target architecture specctl has no knowledge of."""

    def __init__(self, message: str, *, engine: str, version: str | None = None, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.engine = engine
        self.version = version


class ManifestImportError(InputError):
    """Raised when `manifest import` would have to guess a convention or lacks a fact."""


class CheckFailed(SpecctlError):
    """Raised when static checks found at least one error: exit code 1."""

    exit_code = 1


class LedgerError(SpecctlError):
    """Raised when the ledger file cannot be opened, read or written (damaged, read-only, disk full,
    a schema this specctl cannot use): exit code 2, since the user fixes the file or its place."""

    exit_code = 2

    def __init__(self, message: str, *, path: str, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.path = path


class HostError(SpecctlError):
    """Raised for an unreachable host or a failed remote command: exit code 3."""

    exit_code = 3

    def __init__(self, message: str, *, host: str, fix: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.host = host


class ServerUnreachable(HostError):
    """Raised when verify reached no server (refused, reset, closed unanswered, or no answer within
    its deadline: a crashed server, a killed process, a job that timed out). Nothing was measured, so
    nothing is recorded about the release: exit 3, and the ledger run is `unreachable`, not `failed`."""

    def __init__(self, message: str, *, host: str, release: str, fix: str | None = None) -> None:
        super().__init__(message, host=host, fix=fix)
        self.release = release


class ConnectionLost(HostError):
    """Raised when a host's connection broke during a command; whether the command ran is unknown."""
