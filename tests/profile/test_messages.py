"""No message specctl defines reaches a user with a field left unfilled: every validation error's
template (the `invalid(...)` calls of specctl/profile) is rendered the way pydantic-core fills it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from specctl.profile._invalid import invalid

PACKAGE = Path(__file__).resolve().parents[2] / "specctl"


def templates() -> list[tuple[str, str, list[str]]]:
    """(where, template, context keys) of every `invalid(kind, template, {...})` call in the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        if "invalid" not in source:  # no call of `invalid` without its name: parsed only where it may be
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "invalid":
                template = node.args[1]
                # a literal: an f-string would fill the message before pydantic-core sees it, braces included
                assert isinstance(template, ast.Constant), f"{path}:{node.lineno}: the template is not a literal"
                text = template.value
                context = node.args[2] if len(node.args) > 2 else None
                keys = (
                    [k.value for k in context.keys if isinstance(k, ast.Constant)]
                    if isinstance(context, ast.Dict)
                    else []
                )
                found.append((f"{path.relative_to(PACKAGE)}:{node.lineno}", text, keys))
    return found


def render(template: str, keys: list[str]) -> str:
    class Probe(BaseModel):
        x: int

        @field_validator("x")
        @classmethod
        def fail(cls, value: int) -> int:
            raise invalid("probe", template, {key: f"<{key}>" for key in keys})

    with pytest.raises(ValidationError) as caught:
        Probe(x=1)
    return str(caught.value.errors()[0]["msg"])


def test_every_validation_error_goes_through_invalid() -> None:
    """pydantic-core leaves `{name!r}` unfilled; only `invalid` renders it, so nothing else may build the error."""
    direct = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "PydanticCustomError(" in path.read_text() and path.name != "_invalid.py"
    ]
    assert not direct and len(templates()) >= 15


@pytest.mark.parametrize(("where", "template", "keys"), templates())
def test_every_validation_message_is_filled(where: str, template: str, keys: list[str]) -> None:
    shown = render(template, keys)
    assert "{" not in shown and "}" not in shown, (where, shown)


def test_a_repr_field_shows_the_value_quoted() -> None:
    assert (
        render("root {root!r} is not absolute, {n} times", ["root", "n"]) == "root '<root>' is not absolute, <n> times"
    )
