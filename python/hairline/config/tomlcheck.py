"""The problems of a set of TOML files, found in one round and reported together.

As the experiment files' (``config/load.py``): each problem is ``file:line: field: what is
wrong`` with the fix on the next line, so that one run of the command shows them all.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

# Config's reporter, so that Kraken's files and experiment files word their problems alike.
from hairline.config.load import FieldProblems
from hairline.errors import ConfigError

__all__ = ["Problems", "Report", "read_model", "read_toml"]

Model = TypeVar("Model", bound=BaseModel)
Report = Callable[[tuple[str, ...], str, str], None]
"""A problem of the field at a location: (loc, what is wrong, the fix)."""


class Problems(FieldProblems):
    """Every problem found in a file set: config's, with Kraken's tables' field names."""

    def validation(
        self,
        file: Path,
        text: str,
        err: ValidationError,
        known_fields: Callable[[tuple[str, ...]], Sequence[str]],
    ) -> None:
        """Each of a validation's errors; ``known_fields(table)`` names a table's fields
        (for "did you mean")."""
        for item in err.errors():
            loc = tuple(str(p) for p in item["loc"])
            if item["type"] == "extra_forbidden":
                known = list(known_fields(loc[:-1]))
                close = difflib.get_close_matches(loc[-1], known, n=1)
                fix = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
                self.at(file, text, loc, "unknown field", fix)
            else:
                self.pydantic(file, text, loc, item)

    def raise_if_any(self, path: Path, hint: str) -> None:
        if self.items:
            count = len(self.items)
            head = f"{path}: {count} problem{'s' if count != 1 else ''}"
            raise ConfigError(head + "\n  " + "\n  ".join(self.items), hint=hint)


def read_toml(path: Path, problems: Problems, *, field: str = "file") -> tuple[str, dict[str, Any]]:
    """The file's text and table; a missing file or bad TOML is a problem and ``{}``."""
    try:
        text = path.read_text()
    except OSError as err:
        reason = "no such file" if isinstance(err, FileNotFoundError) else str(err)
        problems.add(str(path), None, field, reason, "check the path")
        return "", {}
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        problems.add(
            str(path), getattr(err, "lineno", None), "toml", str(err), "fix the TOML syntax"
        )
        return text, {}


def read_model(
    path: Path,
    model: type[Model],
    problems: Problems,
    known_fields: Callable[[tuple[str, ...]], Sequence[str]],
    hint: str,
) -> tuple[str, Model]:
    """A file's text and its table validated as ``model``; a missing file, bad TOML or any
    field's problem raises every problem at once (with ``hint``)."""
    text, data = read_toml(path, problems)
    problems.raise_if_any(path, hint)
    try:
        return text, model.model_validate(data)
    except ValidationError as err:
        problems.validation(path, text, err, known_fields)
        problems.raise_if_any(path, hint)
        raise AssertionError("a validation error reports a problem") from err
