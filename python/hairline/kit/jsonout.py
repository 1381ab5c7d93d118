"""Every result can be had as JSON: dataclasses, numpy values and tuples, made plain.

A JSON document hairline writes is typed (a TypedDict, or the dataclass it is made of) so
that its JSON Schema is generated from the type (hairline/schema, docs/schema/); such a type
is :data:`documented`, and its fields' docstrings become the schema's descriptions.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler, with_config
from pydantic_core import CoreSchema, core_schema

from hairline.kit.atomic import atomic_path

__all__ = ["ArrayJson", "documented", "to_jsonable", "write_json"]

#: A class decorator for a TypedDict or dataclass that types a JSON document: pydantic reads
#: its fields' docstrings as their descriptions. (TypedDicts that pydantic reads must come
#: from typing_extensions on Python 3.11.)
documented = with_config(ConfigDict(use_attribute_docstrings=True))


@dataclass(frozen=True)
class ArrayJson:
    """``Annotated[NDArray[...], ArrayJson("number")]``: a numpy array field, which
    :func:`to_jsonable` writes as a list of numbers ("number", NaN as null) or of
    "integer"s; pydantic knows no numpy, so this tells it the field's JSON Schema."""

    items: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.any_schema()

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        item = ["number", "null"] if self.items == "number" else self.items
        return {"type": "array", "items": {"type": item}}


# Returned as they are, checked first: most of a large result's values (a trace's stats hold
# 1.5 million of them for 70,000 endpoints) are these, and dataclasses.is_dataclass is slow.
_PLAIN = (str, int, bool, type(None))


def to_jsonable(obj: Any) -> Any:
    """Plain JSON values; NaN and infinities become ``null`` (JSON has no NaN)."""
    if type(obj) in _PLAIN:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    # numpy's values only where numpy is loaded already (there are none otherwise): every
    # `hairline` command imports this module, and importing numpy here cost each one 0.1 s.
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if np is not None and isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_json(path: str | os.PathLike[str], payload: Any) -> Path:
    """Write ``payload`` as JSON atomically (a reader never sees half a file)."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        json.dump(to_jsonable(payload), f, indent=2)
        f.write("\n")
    return Path(path)
