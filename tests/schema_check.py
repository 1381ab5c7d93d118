"""Documents checked against their published JSON Schemas (docs/schema/KIND.json), as the
tests that make them go: a report a real run wrote, a TOML file as tomllib reads it, an
answer of the HTTP API.

The schemas are checked closed (``kit/jsonschema.closed``): a key hairline writes that the
schema does not name fails, as a missing or mistyped one does. The files read are the
published ones, not schemas generated here, so this checks what users get;
tests/cli/test_cli_schema.py checks that they are current.

    check_schema("experiment-report", json.loads(out.read_text()))
    check_toml("experiment", path)
    check_api("GET", "/api/v1/experiments/1/gate", 200, answer)
"""

from __future__ import annotations

import json
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from hairline.kit.jsonschema import closed

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "docs" / "schema"


@cache
def _published(kind: str) -> dict[str, Any]:
    path = SCHEMA_DIR / f"{kind}.json"
    assert path.is_file(), f"no schema {path}: `hairline schema` lists the kinds"
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


@cache
def _validator(kind: str, definition: str | None, array: bool) -> Draft202012Validator:
    schema = _published(kind)
    if definition is not None:
        ref = {"$ref": f"#/$defs/{definition}"}
        schema = {"$defs": schema["$defs"], **({"type": "array", "items": ref} if array else ref)}
    checked = closed(schema)
    Draft202012Validator.check_schema(checked)
    return Draft202012Validator(checked)


def check_schema(
    kind: str, document: object, *, definition: str | None = None, array: bool = False
) -> None:
    """Fail, naming each place and what is wrong there, unless ``document`` is valid
    against docs/schema/``kind``.json (with ``definition``: against its ``$defs`` entry of
    that name, or an array of them with ``array``)."""
    errors = sorted(
        _validator(kind, definition, array).iter_errors(document), key=lambda e: list(e.path)
    )
    where = f"{kind}.json" + (f" $defs/{definition}" if definition else "")
    assert not errors, f"not valid against {where}:\n" + "\n".join(
        f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in errors[:20]
    )


def check_toml(kind: str, path: Path) -> None:
    """A TOML file as hairline reads it (tomllib), against its kind's schema."""
    try:
        check_schema(kind, tomllib.loads(path.read_text()))
    except AssertionError as err:
        raise AssertionError(f"{path}: {err}") from None


# Each API route by method and path pattern: the model it declares (web/api.py), whether a
# list of it, None for a text answer (report.md, report.xml); and the models it declares for
# statuses of its own (a Flagger webhook's 409 and 412).
Route = tuple[str, re.Pattern[str], str | None, bool, dict[int, str]]


@cache
def _api_routes() -> list[Route]:
    from fastapi.routing import APIRoute

    from hairline.web.api import router

    routes = []
    for route in router.routes:
        assert isinstance(route, APIRoute)
        model: Any = route.response_model
        many = getattr(model, "__origin__", None) is list
        text = model is None or model is Any
        name = None if text else (model.__args__[0] if many else model).__name__
        own = {int(code): declared["model"].__name__ for code, declared in route.responses.items()
               if str(code).isdigit() and "model" in declared}  # fmt: skip
        for method in route.methods:
            routes.append((method, route.path_regex, name, many, own))
    return routes


def _route(method: str, path: str) -> Route | None:
    return next((r for r in _api_routes() if r[0] == method and r[1].match(path)), None)


def api_answer_model(method: str, path: str, status: int = 200) -> tuple[str | None, bool] | None:
    """The model (a $defs name of docs/schema/api.json, and whether a list of it) an answer
    of ``method path`` with ``status`` is: the route's, a model it declares for that status,
    or ErrorOut for any other 4xx; None for a path no API route serves."""
    route = _route(method, path)
    if route is None:
        return None
    _, _, name, many, own = route
    if status in own:
        return own[status], False
    if 400 <= status < 500:
        return "ErrorOut", False
    return name, many


def check_api(method: str, path: str, status: int, answer: object) -> None:
    """An answer of the HTTP API against docs/schema/api.json (a text answer is not
    checked); a 4xx of a path no route serves is an ErrorOut too."""
    path = path.split("?", 1)[0]
    found = api_answer_model(method, path, status)
    if found is None:
        assert 400 <= status < 500, f"{method} {path}: no API route"
        found = ("ErrorOut", False)
    name, many = found
    if name is not None:
        check_schema("api", answer, definition=name, array=many)
