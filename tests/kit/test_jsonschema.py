"""kit/jsonschema.py: a model's JSON Schema as each kind of document holds it (a TOML file,
a JSON output, an API answer), the published file's head, and the closed form the tests
check against."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, NotRequired

import numpy as np
from jsonschema import Draft202012Validator, ValidationError
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from hairline.kit.jsonout import ArrayJson, documented, to_jsonable
from hairline.kit.jsonschema import closed, generated, schema_text


class Load(BaseModel):
    """``[load]``."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    rate_per_s: float | None = Field(default=None, gt=0)
    """The replay's rate;
    leave it out to calibrate it."""
    duration_s: float = Field(gt=0)


@documented
@dataclass(frozen=True)
class Curve:
    """A curve."""

    arm: str
    """The arm."""
    knee_per_s: float
    points: Annotated[NDArray[np.float64], ArrayJson("number")]
    batches: int = 1


@documented
class Summary(TypedDict):
    """A summary."""

    trace: str
    curve: Curve
    seed: NotRequired[int]
    """Only when sampled."""


def valid(schema: dict[str, object], document: object) -> bool:
    try:
        Draft202012Validator(schema).validate(document)
    except ValidationError:
        return False
    return True


def test_a_toml_files_optional_field_is_one_left_out_not_a_null() -> None:
    schema = generated(Load, "toml")
    rate = schema["properties"]["rate_per_s"]
    # TOML has no null: no null in the type, no null default; the lines of a docstring
    # joined into one.
    assert rate == {
        "description": "The replay's rate; leave it out to calibrate it.",
        "exclusiveMinimum": 0,
        "type": "number",
    }
    assert schema["required"] == ["duration_s"] and schema["additionalProperties"] is False
    assert "title" not in rate  # no generated "Rate Per S"
    assert valid(schema, {"duration_s": 4}) and not valid(schema, {"duration_s": 0})
    assert not valid(schema, {"duration_s": 4, "rate_per_s": None})


def test_a_json_outputs_fields_are_all_written_and_its_floats_may_be_null() -> None:
    schema = generated(Summary, "json")
    curve = schema["$defs"]["Curve"]
    # A dataclass writes every field, its defaults too; a TypedDict's NotRequired may be
    # missing.
    assert curve["required"] == ["arm", "knee_per_s", "points", "batches"]
    assert schema["required"] == ["trace", "curve"]
    assert curve["properties"]["knee_per_s"]["type"] == ["number", "null"]
    assert curve["properties"]["arm"]["description"] == "The arm."
    assert schema["properties"]["seed"]["description"] == "Only when sampled."
    written = to_jsonable(
        {"trace": "t.jsonl", "curve": Curve("A", float("nan"), np.array([1.5, float("inf")]))}
    )
    assert written["curve"]["knee_per_s"] is None and written["curve"]["points"] == [1.5, None]
    assert valid(schema, written)
    assert not valid(schema, {**written, "curve": {**written["curve"], "batches": "1"}})


def test_api_models_are_each_under_defs_by_name() -> None:
    schema = generated(((Load, "validation"),), "api")
    assert list(schema) == ["$defs"] and list(schema["$defs"]) == ["Load"]


def test_the_published_file_starts_with_what_it_is() -> None:
    text = schema_text("load", "hairline load", "The [load] table.", generated(Load, "toml"))
    published = json.loads(text)
    assert list(published)[:4] == ["$schema", "$id", "title", "description"]
    assert published["$id"] == "urn:hairline:schema:load"
    assert published["description"] == "The [load] table."
    assert text.endswith("}\n") and text.startswith('{\n  "$schema": ')
    Draft202012Validator.check_schema(published)


def test_closed_shuts_every_object_that_lists_its_properties_and_nothing_else() -> None:
    schema = generated(Summary, "json")
    shut = closed(schema)
    assert shut["additionalProperties"] is False
    assert shut["$defs"]["Curve"]["additionalProperties"] is False
    # A property named "properties", a default and a map's value schema are left alone.
    tricky = {
        "type": "object",
        "properties": {"properties": {"type": "object"}},
        "default": {"properties": {}},
        "additionalProperties": {"type": "string"},
    }
    assert closed(tricky) == tricky
    assert valid(schema, {"trace": "t", "curve": _curve(), "extra": 1})
    assert not valid(shut, {"trace": "t", "curve": _curve(), "extra": 1})


def _curve() -> dict[str, object]:
    return {"arm": "A", "knee_per_s": 1.0, "points": [], "batches": 1}


@dataclass(frozen=True)
class Counts:
    per_trial: Annotated[NDArray[np.int64], ArrayJson("integer")]


def test_a_numpy_array_field_is_an_array_of_its_items() -> None:
    floats = generated(Curve, "json")["properties"]["points"]
    assert floats == {"type": "array", "items": {"type": ["number", "null"]}}
    ints = generated(Counts, "json")["properties"]["per_trial"]
    assert ints == {"type": "array", "items": {"type": "integer"}}
