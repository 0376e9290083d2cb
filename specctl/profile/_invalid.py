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
