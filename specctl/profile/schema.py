"""The JSON Schema (draft 2020-12) of each file format, generated from its pydantic model.

What `specctl schema KIND` prints and `docs/schema/KIND.schema.json` publishes (`make schema`), and
what an editor reads through the `# yaml-language-server: $schema=...` line at the top of a file. It
says what the models say field by field: keys as they are written (`apiVersion`), types, bounds,
patterns, defaults and each field's description, `tune` and `watch` included (left out of a profile's
digest, not out of its file). Checks across fields (capture width, revision pins, known GPUs and
engines, secrets kept out of `engine.env`) stay with `specctl validate`.

A file with `extends:` is merged over the file it names (mappings merge, lists replace), so it may
leave out any field, however deep. The document's root is therefore the format with nothing required
but `apiVersion` and `kind` (the `...Partial` definitions), and its `else` (no `extends`) requires the
whole model.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic.json_schema import GenerateJsonSchema

from specctl.profile import model_for

# the name `specctl schema` takes for each kind
SCHEMA_KINDS = {"profile": "Profile", "manifest": "DrafterManifest", "inventory": "Inventory"}
DIALECT = "https://json-schema.org/draft/2020-12/schema"
PARTIAL = "Partial"  # suffix of the definitions a file with `extends:` is checked against
EXTENDS_DESCRIPTION = (
    "another file of the same kind, relative to this one, that this file is merged over (mappings merge, "
    "lists replace); a file with `extends` may leave out any field the other gives"
)
# keywords whose values are data, not schemas: never rewritten
_DATA = frozenset({"default", "const", "enum", "examples"})


class _Generator(GenerateJsonSchema):
    """pydantic's generator without a title on every field (its name again: `Apiversion`)."""

    def field_title_should_be_set(self, schema: object) -> bool:
        return False


def json_schema(name: str) -> dict[str, Any]:
    """The schema of the file format `name` (a key of SCHEMA_KINDS)."""
    kind = SCHEMA_KINDS[name]
    whole = _keys_by_pattern(
        model_for(kind).model_json_schema(by_alias=True, mode="validation", schema_generator=_Generator)
    )
    defs: dict[str, Any] = whole.pop("$defs", {})
    # every file of a chain names its apiVersion and kind (the loader checks each before merging)
    whole["required"] = ["apiVersion", "kind", *whole.get("required", [])]
    defs[kind] = whole
    partial = {f"{name}{PARTIAL}": _partial(schema) for name, schema in defs.items()}
    root = partial.pop(f"{kind}{PARTIAL}")
    root["properties"]["extends"] = {"type": "string", "minLength": 1, "description": EXTENDS_DESCRIPTION}
    first = {"$schema": DIALECT, "title": root.pop("title")}
    if "description" in root:
        first["description"] = root.pop("description")
    return {
        **first,
        **root,
        "required": ["apiVersion", "kind"],
        "if": {"required": ["extends"]},
        "else": {"$ref": f"#/$defs/{kind}"},
        "$defs": {**defs, **partial},
    }


def schema_text(name: str) -> str:
    """The schema as `specctl schema` prints it and docs/schema/ publishes it."""
    return json.dumps(json_schema(name), indent=2) + "\n"


def _keys_by_pattern(node: Any) -> Any:
    """A mapping keyed by a constrained name as the loader reads it: a key that does not match is an
    error (pydantic writes the pattern as `patternProperties`, which lets any other key through)."""
    if isinstance(node, list):
        return [_keys_by_pattern(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: value if key in _DATA else _keys_by_pattern(value) for key, value in node.items()}
    patterns = out.get("patternProperties")
    if isinstance(patterns, dict) and len(patterns) == 1 and "additionalProperties" not in out:
        [(pattern, values)] = patterns.items()
        del out["patternProperties"]
        out["propertyNames"] = {**out.get("propertyNames", {}), "pattern": pattern}
        out["additionalProperties"] = values
    return out


def _partial(node: Any) -> Any:
    """`node` with nothing required, for a file merged over another: references lead to the partial
    definitions, and a union is matched by any member (its tag may be in the other file). A list's
    items stay whole: a list replaces the other file's, it is not merged into it."""
    if isinstance(node, list):
        return [_partial(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("required", "discriminator"):
            continue
        if key == "$ref":
            out[key] = f"{value}{PARTIAL}"
        elif key in _DATA or key in ("items", "prefixItems"):
            out[key] = value
        else:
            out["anyOf" if key == "oneOf" else key] = _partial(value)
    return out
