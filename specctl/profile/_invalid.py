"""A field's validation error, with its message filled in as written.

pydantic-core fills only plain `{name}` fields of a PydanticCustomError's template: `{name!r}` reaches
the user as written. `invalid` renders those here, so every template may say `{name!r}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic_core import PydanticCustomError

_REPR_FIELD = re.compile(r"\{(\w+)!r\}")


def invalid(kind: str, template: str, context: Mapping[str, Any] | None = None) -> PydanticCustomError:
    """The error pydantic reports for a field: `kind`, the message, and its context (`fix` among it)."""
    values = dict(context or {})

    def shown(match: re.Match[str]) -> str:
        name = match.group(1)
        values[f"{name}__repr"] = repr(values[name])
        return "{" + name + "__repr}"

    return PydanticCustomError(kind, _REPR_FIELD.sub(shown, template), values)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(value: Any) -> Any:
    """A value that reaches a script or a command line (a job file, a launch script, argv): no control
    character, so a newline cannot start a command of its own. Lists and mappings are checked inside."""
    texts = (
        [value]
        if isinstance(value, str)
        else list(value)
        if isinstance(value, list)
        else [*value.keys(), *value.values()]
        if isinstance(value, dict)
        else []
    )
    for text in texts:
        if isinstance(text, str) and _CONTROL.search(text):
            raise invalid(
                "control_character",
                "{text!r} holds a control character (a newline would start a command of its own in a script)",
                {"text": text, "fix": "write it on one line, without tabs or control characters"},
            )
    return value


def host_path(value: str | None, what: str) -> str | None:
    """A path on a remote host: absolute, or under the home directory there (a relative one would resolve
    against whatever directory a remote command starts in)."""
    if value is not None and not (value == "~" or value.startswith("~/") or value.startswith("/")):
        raise invalid(
            "path_relative",
            "{what} {value!r} is not an absolute path or one under ~/",
            {
                "what": what,
                "value": value,
                "fix": f"write {what} as an absolute path, or one under the host's home (~/...)",
            },
        )
    return value


def interpreter(value: str | None) -> str | None:
    """An interpreter: a command on PATH (`python3`) or a path on the host, then absolute."""
    return host_path(value, "python") if value is not None and "/" in value else value
