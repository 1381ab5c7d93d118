"""The functions a diff modifies: each changed line mapped to the innermost function that
holds it, on the head side (added lines) and on the base side (removed lines).

A function is matched between the sides by its name within the file (``Class.method``), so
a moved file (``git diff -M``) keeps its functions' history. A function that vanished from
the base and one that appeared in the head are a rename when their bodies hash the same
("renamed": the same code runs, so it scores nothing), or when their bodies are still
alike (a rename whose body changed too: "modified" under the new name, with the old name
kept, since the old name is what a profile of production knows). A function whose lines
changed but whose syntax did not (a comment, spacing in Python) is not modified.

:func:`map_changes` is pure (the files come from a reader); :func:`modified_functions`
reads them with git.
"""

from __future__ import annotations

import difflib
import tomllib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Literal

from hairline.suggest.diff import FileChange, changed_files, file_at
from hairline.suggest.functions import Function, innermost, language_of, python_functions
from hairline.suggest.treesitter import go_functions, rust_functions

__all__ = [
    "ChangedFunction",
    "DiffFunctions",
    "functions_of",
    "map_changes",
    "modified_functions",
]

# How alike two bodies must be (difflib's ratio) for a vanished and a new function to be
# one function renamed; an unrelated function that replaced another stays "added".
RENAME_SIMILARITY = 0.6

Side = Literal["base", "head"]
Reader = Callable[[Side, str], str | None]


@dataclass(frozen=True)
class ChangedFunction:
    """A function the diff touches, under its head name (its base name when deleted)."""

    name: str
    path: str
    change: Literal["modified", "added", "deleted", "renamed"]
    lines: int  # changed lines inside it, both sides
    local: str = ""  # its name within the file ("Class.method"): the rest is the module
    old_name: str | None = None  # its base name when that differs (renamed or moved)
    old_path: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Every name a profile may know it by: the base's first."""
        return (self.old_name, self.name) if self.old_name else (self.name,)

    @property
    def paths(self) -> tuple[str, ...]:
        return (
            (self.old_path, self.path)
            if self.old_path and self.old_path != self.path
            else (self.path,)
        )

    @property
    def scored(self) -> bool:
        """Whether its production cost counts: a pure rename runs the same code."""
        return self.change != "renamed"

    @property
    def change_text(self) -> str:
        """``modified``, ``renamed from x.old``, ``modified, was x.old``."""
        if self.old_name and self.old_name != self.name:
            return (
                f"renamed from {self.old_name}"
                if self.change == "renamed"
                else (f"{self.change}, was {self.old_name}")
            )
        return self.change


@dataclass(frozen=True)
class DiffFunctions:
    functions: tuple[ChangedFunction, ...]
    unmapped_lines: int  # changed lines of read files outside every function
    other_files: tuple[str, ...]  # changed files of languages not read


def _pairs(vanished: list[Function], new: list[Function]) -> dict[str, Function]:
    """New head function's local name -> the vanished base function it was."""
    paired: dict[str, Function] = {}
    left = list(vanished)
    for f in new:
        same = next((b for b in left if b.body_hash == f.body_hash), None)
        if same is not None:
            paired[f.local] = same
            left.remove(same)
    scored = sorted(
        (
            (difflib.SequenceMatcher(None, b.body, f.body, autojunk=False).ratio(), i, j)
            for j, f in enumerate(new)
            if f.local not in paired
            for i, b in enumerate(left)
        ),
        reverse=True,
    )
    taken: set[int] = set()
    for ratio, i, j in scored:
        if ratio < RENAME_SIMILARITY or i in taken or new[j].local in paired:
            continue
        paired[new[j].local] = left[i]
        taken.add(i)
    return paired


def functions_of(path: str, text: str, *, crate: str = "crate") -> list[Function]:
    """Every function and method of ``text`` (the file at ``path``); [] for a language not
    read here, or a file that does not parse."""
    language = language_of(path)
    if language == "python":
        return python_functions(path, text)
    if language == "go":
        return go_functions(path, text)
    if language == "rust":
        return rust_functions(path, text, crate)
    return []


def _side(
    side: Side, path: str | None, read: Reader, crate: Callable[[Side, str], str]
) -> list[Function]:
    if path is None:
        return []
    text = read(side, path) or ""
    return functions_of(path, text, crate=crate(side, path) if path.endswith(".rs") else "crate")


def _holders(functions: list[Function], lines: Sequence[int]) -> list[str | None]:
    """The local name of the innermost function holding each line (None: outside all)."""
    holders = [innermost(functions, line) for line in lines]
    return [f.local if f is not None else None for f in holders]


def _file(
    change: FileChange, read: Reader, crate: Callable[[Side, str], str]
) -> tuple[list[ChangedFunction], int]:
    base = _side("base", change.old_path, read, crate)
    head = _side("head", change.new_path, read, crate)
    head_lines = Counter(_holders(head, change.added))
    base_lines = Counter(_holders(base, change.removed))
    unmapped = head_lines.pop(None, 0) + base_lines.pop(None, 0)
    base_by = {f.local: f for f in base}
    head_by = {f.local: f for f in head}
    vanished = [f for f in base if f.local not in head_by]
    new = [f for f in head if f.local not in base_by]
    was = _pairs(vanished, new)
    out: list[ChangedFunction] = []
    for f in head:
        old = base_by.get(f.local) or was.get(f.local)
        lines = head_lines[f.local] + (base_lines[old.local] if old else 0)
        if not lines or (old is not None and old.body_hash == f.body_hash and old.local == f.local):
            continue
        if old is None:
            change_kind: Literal["modified", "added", "renamed"] = "added"
        elif old.body_hash == f.body_hash:
            change_kind = "renamed"
        else:
            change_kind = "modified"
        out.append(
            ChangedFunction(
                name=f.name,
                path=f.path,
                change=change_kind,
                lines=lines,
                local=f.local,
                old_name=old.name if old is not None and old.name != f.name else None,
                old_path=old.path if old is not None and old.path != f.path else None,
            )
        )
    paired_old = {b.local for b in was.values()}
    for b in vanished:
        if b.local not in paired_old and base_lines[b.local]:
            out.append(ChangedFunction(b.name, b.path, "deleted", base_lines[b.local], b.local))
    return out, unmapped


def map_changes(
    changes: Sequence[FileChange], read: Reader, *, crate: Callable[[Side, str], str] | None = None
) -> DiffFunctions:
    """The functions ``changes`` touch; ``read(side, path)`` gives a file's text at the
    base or the head (None: not there), ``crate(side, path)`` a Rust file's crate name."""
    functions: list[ChangedFunction] = []
    unmapped = 0
    others = []
    for change in changes:
        if language_of(change.path) is None or (
            change.old_path is not None and language_of(change.old_path) is None
        ):
            if change.added or change.removed:
                others.append(change.path)
            continue
        found, outside = _file(change, read, crate or (lambda _side, _path: "crate"))
        functions += found
        unmapped += outside
    return DiffFunctions(tuple(functions), unmapped, tuple(others))


def modified_functions(repo: Path, base: str, head: str) -> DiffFunctions:
    """The functions ``head`` changes against ``base`` in the git repository ``repo``."""
    changes = changed_files(repo, base, head)
    revs: dict[Side, str] = {"base": base, "head": head}

    @cache
    def crate(side: Side, folder: str) -> str:
        # The crate's name as symbols carry it: [package] name of the nearest Cargo.toml.
        for parent in [PurePosixPath(folder), *PurePosixPath(folder).parents]:
            text = file_at(repo, revs[side], (parent / "Cargo.toml").as_posix())
            if text is None:
                continue
            try:
                name = tomllib.loads(text).get("package", {}).get("name")
            except tomllib.TOMLDecodeError:
                name = None
            return str(name).replace("-", "_") if name else "crate"
        return "crate"

    return map_changes(
        changes,
        lambda side, path: file_at(repo, revs[side], path),
        crate=lambda side, path: crate(side, PurePosixPath(path).parent.as_posix()),
    )
