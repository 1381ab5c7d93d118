"""Experiment files read: TOML, the service file it names, every problem in one round.

Each problem names its file, line and field and says what to write instead; a field of the
wrong type does not hide the others (the checks run on the file without it).
"""

from __future__ import annotations

import copy
import difflib
import re
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from hairline.config.checks import Report, check_experiment, check_service, idle_settings
from hairline.config.experiment import (
    AaConfig,
    ArmConfig,
    BuildConfig,
    ExperimentConfig,
    MetricConfig,
    ServiceConfig,
)
from hairline.config.sections import (
    AnalysisConfig,
    DesignConfig,
    HostClassConfig,
    HostsConfig,
    LoadConfig,
    ModeConfig,
)
from hairline.errors import ConfigError, Problem

__all__ = ["ExtraCheck", "idle_setting_warnings", "load_experiment"]

# A check of a layer above config (the lab's: model names, the trace's first lines), run in
# the same round as config's own, reporting as config's checks do.
ExtraCheck = Callable[[ExperimentConfig, Path, Report], None]


def load_experiment(path: Path, *, checks: Sequence[ExtraCheck] = ()) -> ExperimentConfig:
    """Read an experiment file (and the service file it names); report every problem at once.

    Raises :class:`ConfigError` whose message lists each problem as ``file:line: field:
    what is wrong`` followed by what to write instead. A field of the wrong type does not
    hide the other problems: the checks then run on the file without that field.
    ``checks`` are run on the result with the same reporting (``hairline.lab.files``).
    """
    problems = FieldProblems()
    data = _read_toml(path, problems)
    service_data: Any = data.get("service")
    service_path = path
    service_text: str | None = None
    if isinstance(service_data, str):
        service_path = (path.parent / service_data).resolve()
        service_doc = _read_toml(service_path, problems, field="service")
        service_text = service_path.read_text() if service_path.is_file() else None
        service_data = service_doc.get("service", service_doc)
        if isinstance(service_data, dict):
            service_data = {**service_data}
            for key in ("build", "metrics", "aa"):
                if key in service_doc and key not in service_data:
                    service_data[key] = service_doc[key]
    if isinstance(service_data, dict):
        service_data = {**service_data, "root": str(service_path.parent.resolve())}
    if problems:
        raise problems.error(path)
    text = path.read_text()
    service_file = service_path if service_text is not None else path
    service_doc_text = service_text if service_text is not None else text
    service: ServiceConfig | None = None
    if isinstance(service_data, dict):
        nested = service_text is None or "service" in tomllib.loads(service_text)
        try:
            service = ServiceConfig.model_validate(service_data)
        except ValidationError as err:
            for item in err.errors():
                loc = tuple(str(p) for p in item["loc"])
                problems.pydantic(service_file, service_doc_text, _service_loc(loc, nested), item)
            checkable = _without_bad_fields(ServiceConfig, service_data, err)
        else:
            checkable = service
        if checkable is not None:
            check_service(
                checkable,
                lambda loc, msg, fix: problems.at(
                    service_file, service_doc_text, _service_loc(loc, nested), msg, fix
                ),
            )
    raw = {**data, "service": service.model_dump() if service is not None else _PLACEHOLDER}
    raw["source"] = str(path.resolve())
    config: ExperimentConfig | None = None
    checked: ExperimentConfig | None = None
    try:
        config = checked = ExperimentConfig.model_validate(raw)
    except ValidationError as err:
        for item in err.errors():
            loc = tuple(str(p) for p in item["loc"])
            if loc and loc[0] == "service" and service is None:
                continue
            problems.pydantic(path, text, loc, item)
        checked = _without_bad_fields(ExperimentConfig, raw, err)
    if checked is not None:

        def report(loc: tuple[str, ...], message: str, fix: str) -> None:
            problems.at(path, text, loc, message, fix)

        check_experiment(checked, path, report)
        for check in checks:
            check(checked, path, report)
    if problems or config is None or service is None:
        raise problems.error(path)
    return _resolve(config, path)


_PLACEHOLDER = {"name": "x", "start": "x"}

_M = TypeVar("_M", bound=BaseModel)


def _without_bad_fields(model: type[_M], data: Any, err: ValidationError) -> _M | None:
    """``data`` validated again without the fields that failed (so their defaults apply),
    for the checks that need a typed config; None when a required field is among them."""
    trimmed = copy.deepcopy(data)
    for _ in range(3):
        for item in err.errors():
            # The loc may run past the data (a union's member names): drop the deepest key
            # that is really there.
            where: Any = trimmed
            parent: dict[Any, Any] | None = None
            last: Any = None
            for key in item["loc"]:
                if not isinstance(where, dict) or key not in where:
                    break
                parent, last, where = where, key, where[key]
            if parent is not None:
                parent.pop(last, None)
        try:
            return model.model_validate(trimmed)
        except ValidationError as again:
            err = again
    return None


def _read_toml(path: Path, problems: FieldProblems, *, field: str | None = None) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        problems.add(str(path), None, field or "file", "no such file", "check the path")
        return {}
    except OSError as err:
        problems.add(str(path), None, field or "file", str(err), "check the path")
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        line = getattr(err, "lineno", None)
        problems.add(str(path), line, "toml", str(err), "fix the TOML syntax")
        return {}


def _service_loc(loc: tuple[str, ...], nested: bool) -> tuple[str, ...]:
    """Where a service field lives: under [service] (inline or in a service file with a
    [service] table), except [build], [metrics] and [aa], which may also stand at the top."""
    return ("service", *loc) if nested else loc


def _resolve(config: ExperimentConfig, path: Path) -> ExperimentConfig:
    here = path.parent.resolve()
    arms = {
        name: arm.model_copy(
            update={
                "path": str((here / arm.path).resolve()) if arm.path is not None else None,
                "repo": str((here / (arm.repo or ".")).resolve()) if arm.git is not None else None,
            }
        )
        for name, arm in config.arms.items()
    }
    return config.model_copy(update={"trace": str((here / config.trace).resolve()), "arms": arms})


class FieldProblems:
    """Every problem found in a file set, reported together."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.found: list[Problem] = []  # the same problems, as values

    def __bool__(self) -> bool:
        return bool(self.items)

    def add(self, file: str, line: int | None, field: str, message: str, fix: str) -> None:
        where = f"{file}:{line}" if line else file
        self.found.append(Problem(file=file, line=line, field=field, message=message, fix=fix))
        self.items.append(f"{where}: {field}: {message}" + (f"\n    fix: {fix}" if fix else ""))

    def at(self, file: Path, text: str, loc: tuple[str, ...], message: str, fix: str) -> None:
        self.add(str(file), _line_of(text, loc), ".".join(loc), message, fix)

    def pydantic(self, file: Path, text: str, loc: tuple[str, ...], item: Any) -> None:
        kind = item["type"]
        if kind == "extra_forbidden":
            parent, field = loc[:-1], loc[-1]
            known = _known_fields(parent)
            close = difflib.get_close_matches(field, known, n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(known)}"
            self.at(file, text, loc, "unknown field", fix)
        elif kind == "missing":
            self.at(file, text, loc, "missing", f"add {loc[-1]} = ...")
        elif kind == "literal_error":
            expected = item.get("ctx", {}).get("expected", "")
            self.at(file, text, loc, f"{item['input']!r} is not allowed", f"use {expected}")
        elif kind == "string_pattern_mismatch":
            self.at(file, text, loc, f"{item['input']!r} is not a valid name",
                    "use letters, digits, '.', '_' or '-'")  # fmt: skip
        else:
            self.at(file, text, loc, item["msg"].lower(), _FIXES.get(kind, ""))

    def error(self, path: Path) -> ConfigError:
        count = len(self.items)
        head = f"{path}: {count} problem{'s' if count != 1 else ''}"
        return ConfigError(
            head + "\n  " + "\n  ".join(self.items),
            hint="fix each line above; `hairline run --check FILE` checks without running",
            problems=tuple(self.found),
        )


_FIXES = {
    "greater_than": "use a positive number",
    "greater_than_equal": "use a number at least as large as shown",
    "less_than": "use a smaller number",
    "less_than_equal": "use a number no larger than shown",
    "float_parsing": "write a number, e.g. 400 or 2.5",
    "float_type": "write a number, e.g. 400 or 2.5",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "string_type": 'write a quoted string, e.g. "value"',
    "list_type": 'write a list, e.g. ["a", "b"]',
    "dict_type": "write a table",
    "model_type": "write a table",
    "bool_type": "write true or false",
}


def _known_fields(parent: tuple[str, ...]) -> list[str]:
    models: dict[tuple[str, ...], type[BaseModel]] = {
        (): ExperimentConfig,
        ("service",): ServiceConfig,
        ("service", "build"): BuildConfig,
        ("service", "aa"): AaConfig,
        ("load",): LoadConfig,
        ("design",): DesignConfig,
        ("analysis",): AnalysisConfig,
        ("hosts",): HostsConfig,
        ("mode",): ModeConfig,
    }
    if len(parent) == 2 and parent[0] == "arms":
        return list(ArmConfig.model_fields)
    if len(parent) == 3 and parent[0] == "arms" and parent[2] == "hosts":
        return list(HostClassConfig.model_fields)
    if len(parent) == 3 and parent[:2] == ("service", "metrics"):
        return list(MetricConfig.model_fields)
    model = models.get(parent)
    if model is None:
        return []
    return [f for f in model.model_fields if f not in ("root", "source")]


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\"'-]+)\s*=")


def _line_of(text: str, loc: tuple[str, ...]) -> int | None:
    """The 1-based line that defines ``loc`` (or its nearest enclosing table), if any."""
    table: tuple[str, ...] = ()
    found: dict[tuple[str, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = tuple(_unquote(p) for p in header.group(1).split("."))
            found.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            path = (*table, *(_unquote(p) for p in key.group(1).split(".")))
            found.setdefault(path, number)
            # Inline tables: ``name = { threshold = "x" }`` defines name.threshold too.
            for inner in re.finditer(r"([A-Za-z0-9_-]+)\s*=", line[key.end() :]):
                found.setdefault((*path, inner.group(1)), number)
    for depth in range(len(loc), 0, -1):
        if loc[:depth] in found:
            return found[loc[:depth]]
        if loc[0] == "service" and loc[1:depth] and loc[1:depth] in found:
            return found[loc[1:depth]]
    return None


def idle_setting_warnings(config: ExperimentConfig) -> list[str]:
    """checks.idle_settings as lines naming the file, line and field, and the fix."""
    source = Path(config.source) if config.source else None
    text = source.read_text() if source is not None and source.is_file() else ""
    lines = []
    for loc, what, fix in idle_settings(config):
        line = _line_of(text, loc) if text else None
        where = f"{source}:{line}" if line is not None else str(source or "the experiment")
        lines.append(f"{where}: {'.'.join(loc)}: {what} (fix: {fix})")
    return lines


def _unquote(part: str) -> str:
    return part.strip().strip("\"'")
