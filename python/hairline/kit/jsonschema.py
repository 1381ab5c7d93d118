"""JSON Schemas generated from hairline's typed models (pydantic's generator), each told
how its kind of document is written: a TOML file a user writes, a JSON document hairline
writes through ``kit/jsonout.py``, or an answer of the HTTP API.

Pure: the files under ``docs/schema/`` are :func:`schema_text` of each kind
(``hairline schema --out docs/schema``), and a test fails when one is stale.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

__all__ = [
    "DIALECT",
    "ID_PREFIX",
    "DocumentSchema",
    "Shape",
    "TomlSchema",
    "closed",
    "generated",
    "schema_text",
]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# A URN, not a URL: the project has no public address to serve the files from yet. Editors
# find a schema by the path or URL a file names (docs/reports.md, "JSON Schemas"), never by
# its $id; publishing them (SchemaStore's catalog needs an https URL) changes this prefix.
ID_PREFIX = "urn:hairline:schema:"

Shape = Literal["toml", "json", "api"]


class _Plain(GenerateJsonSchema):
    """No generated titles on fields ("Rate Per S" says nothing the key does not)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


class TomlSchema(_Plain):
    """A TOML file's schema, as tomllib reads it. TOML has no null: an optional field is one
    left out, so its schema drops the null and a default of None."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if schema.get("default", ...) is None:
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)


class DocumentSchema(_Plain):
    """A JSON document's schema as ``kit/jsonout.py`` writes it: every field is written (a
    default too), and a float may be null (NaN and infinities become null)."""

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        plain = super().float_schema(schema)
        return {**plain, "type": ["number", "null"]}

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        if inner.get("type") == ["number", "null"]:
            return inner
        return super().nullable_schema(schema)

    def field_is_required(self, field: Any, total: bool) -> bool:
        if field["type"] == "typed-dict-field":
            return bool(field.get("required", total))
        return True


_GENERATORS: dict[Shape, type[GenerateJsonSchema]] = {
    "toml": TomlSchema,
    "json": DocumentSchema,
    "api": _Plain,
}


def generated(model: Any, shape: Shape) -> dict[str, Any]:
    """The schema of ``model`` (a pydantic model, dataclass, TypedDict or any type pydantic
    adapts) as a document of ``shape`` holds it; for "api", ``model`` is a tuple of
    (model, "validation" for a request or "serialization" for an answer), and the schema
    has each one under ``$defs``, by its name."""
    generator = _GENERATORS[shape]
    if shape == "api":
        inputs = [(m, mode, TypeAdapter(m).core_schema) for m, mode in model]
        _, defs = generator(ref_template="#/$defs/{model}").generate_definitions(inputs)
        body = {"$defs": dict(sorted(defs.items()))}
    else:
        mode: Literal["validation", "serialization"] = (
            "validation" if shape == "toml" else "serialization"
        )
        body = TypeAdapter(model).json_schema(schema_generator=generator, mode=mode)
    plain: dict[str, Any] = _each_schema(body, _plain_json_schema)
    return plain


def schema_text(name: str, title: str, description: str, body: dict[str, Any]) -> str:
    """The published file: the dialect, ``$id``, title and description first, then the
    generated body; two-space JSON with a final newline."""
    head = {"$schema": DIALECT, "$id": f"{ID_PREFIX}{name}", "title": title,
            "description": description}  # fmt: skip
    rest = {k: v for k, v in body.items() if k not in ("title", "description")}
    return json.dumps({**head, **rest}, indent=2, ensure_ascii=False) + "\n"


def closed(schema: Any) -> Any:
    """``schema`` with every object that lists its properties closed to others: what the
    tests validate against, so that a key hairline writes and no schema names fails them.
    (The published schemas stay open: a reader of an older schema keeps working when a key
    is added, as the report's ``schema`` version promises.)"""

    def close(node: dict[str, Any]) -> dict[str, Any]:
        if "properties" in node and "additionalProperties" not in node:
            return {**node, "additionalProperties": False}
        return node

    return _each_schema(schema, close)


def _plain_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A docstring's description with its lines joined (an editor wraps them itself; blank
    lines still part paragraphs), and without OpenAPI's ``discriminator``, which is no JSON
    Schema keyword (the union's ``const`` members say the same)."""
    node = {k: v for k, v in node.items() if k != "discriminator"}
    text = node.get("description")
    if not isinstance(text, str):
        return node
    return {**node, "description": re.sub(r"(?<!\n)\n(?!\n)", " ", text)}


# Keywords whose value maps names to schemas, and keywords whose value is data, not schema.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "dependentSchemas")
_DATA = ("default", "const", "enum", "examples", "required", "description", "title")


def _each_schema(schema: Any, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """``schema`` with ``change`` applied to each of its (sub)schemas, innermost first;
    property names and data (defaults, enums) are left alone."""
    if isinstance(schema, list):
        return [_each_schema(s, change) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _each_schema(s, change) for name, s in value.items()}
        elif key in _DATA:
            out[key] = value
        else:
            out[key] = _each_schema(value, change)
    return change(out)
