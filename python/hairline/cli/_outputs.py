"""Where a command writes what it produces: the one meaning of ``-`` for every output flag.

An output file flag (``--json``, ``--markdown``, ``--html``, ``--junit``, ``--output``...)
takes ``-`` for standard output: the document alone there, whole, and the command's tables
and progress on stderr instead (:func:`stdout_taken`, read by ``_base.console``). Only one
flag of a command may take stdout, or two documents would run into each other. A flag that
writes a folder, or a file some other process writes, refuses ``-`` when the command line is
read, saying why. Every output flag is declared with :class:`OutputFile` or
:class:`OutputFolder`, so that tests/cli/test_cli_outputs.py finds each one by walking the
command tree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from hairline.kit.atomic import write_text_atomic
from hairline.kit.jsonout import to_jsonable, write_json

__all__ = [
    "STDOUT",
    "OutputFile",
    "OutputFolder",
    "is_stdout",
    "stdout_taken",
    "write_json_output",
    "write_output",
]

STDOUT = "-"
# Kept in click's context meta, which a command's context shares with its group's.
_TAKEN = "hairline.stdout_taken_by"


def is_stdout(path: object) -> bool:
    """Whether an output flag's value means standard output."""
    return path is not None and str(path) == STDOUT


def stdout_taken() -> str | None:
    """The flag (``--json``...) whose document goes to stdout in the running command, if
    any: then everything else the command prints goes to stderr."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(_TAKEN)


def _flag(param: click.Parameter | None) -> str:
    if isinstance(param, click.Option) and param.opts:
        return max(param.opts, key=len)
    return param.human_readable_name if param is not None else "this option"


class OutputFile(click.Path):
    """A file a command writes, or ``-`` for standard output (unless ``refuse_stdout``
    says why it cannot be: then ``-`` is refused with that reason)."""

    def __init__(self, *, refuse_stdout: str | None = None) -> None:
        super().__init__(dir_okay=False, path_type=Path)
        self.refuse_stdout = refuse_stdout

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if is_stdout(value):
            if self.refuse_stdout is not None:
                self.fail(f"'-' (standard output) is not possible here: {self.refuse_stdout}; "
                          "give a file name", param, ctx)  # fmt: skip
            if ctx is not None:
                taken = ctx.meta.get(_TAKEN)
                flag = _flag(param)
                if taken is not None and taken != flag:
                    self.fail(f"'-' (standard output) is already {taken}'s: only one document "
                              f"can go to stdout; give {flag} a file name", param, ctx)  # fmt: skip
                ctx.meta[_TAKEN] = flag
            return Path(STDOUT)
        return super().convert(value, param, ctx)


class OutputFolder(click.Path):
    """A folder a command writes several files into; ``-`` is refused, saying why."""

    def __init__(self, why_not_stdout: str) -> None:
        super().__init__(file_okay=False, path_type=Path)
        self.why_not_stdout = why_not_stdout

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if is_stdout(value):
            self.fail(f"'-' (standard output) is not possible here: {self.why_not_stdout}; "
                      "give a folder", param, ctx)  # fmt: skip
        return super().convert(value, param, ctx)


def write_output(out: Console, path: Path, text: str) -> None:
    """A command's document: to ``path`` whole or not at all, and a line saying so on
    ``out``; for ``-``, the text alone on stdout (``out`` is then stderr), never a file
    named ``-``."""
    if is_stdout(path):
        click.echo(text, nl=not text.endswith("\n"))
    else:
        write_text_atomic(path, text)
        out.print(f"wrote {path}")


def write_json_output(out: Console, path: Path, payload: Any) -> None:
    """``payload`` as JSON through :func:`write_output` (a file is written atomically)."""
    if is_stdout(path):
        write_output(out, path, json.dumps(to_jsonable(payload), indent=2, default=str))
    else:
        write_json(path, payload)
        out.print(f"wrote {path}")
