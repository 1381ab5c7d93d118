"""The functions and methods of a source file, with the qualified names profilers give them
and their line spans; Python by :mod:`ast` here, Go and Rust by tree-sitter (``treesitter.py``).

Names, as each language's profilers write them:

- Python: ``pkg.module.Class.method`` (the module from the path, ``src/`` and
  ``__init__`` left out; nested functions as ``__qualname__`` has them,
  ``outer.<locals>.inner``);
- Go: ``pkg.Func``, ``pkg.(*Type).Method``, ``pkg.Type.Method`` (pprof's form; pprof puts
  the import path before ``pkg``, which matching allows);
- Rust: ``crate::module::Type::method`` (the module from the path below ``src/``).

A function's ``body_hash`` covers everything but its name, so a rename that keeps the body
is recognised; ``body`` is its text, for a rename whose body changed too.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = ["LANGUAGES", "Function", "digest", "innermost", "language_of", "python_functions"]

LANGUAGES = {".py": "python", ".go": "go", ".rs": "rust"}


@dataclass(frozen=True)
class Function:
    """One function or method of a file."""

    name: str  # qualified: "app.search.Index.lookup"
    local: str  # within its file: "Index.lookup", "(*Index).Lookup", "Index::lookup"
    path: str  # the file, relative to the repository
    start: int  # first line (decorators included), 1-based
    end: int  # last line, inclusive
    body_hash: str
    body: str

    def holds(self, line: int) -> bool:
        return self.start <= line <= self.end


def language_of(path: str) -> str | None:
    """ "python", "go", "rust", or None for a file of another language."""
    return LANGUAGES.get(PurePosixPath(path).suffix)


def innermost(functions: list[Function], line: int) -> Function | None:
    """The smallest function whose span holds ``line`` (a nested function before its
    enclosing one); None for a line outside every function."""
    holding = [f for f in functions if f.holds(line)]
    return min(holding, key=lambda f: (f.end - f.start, -f.start)) if holding else None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def python_module(path: str) -> str:
    """``src/app/search.py`` -> ``app.search``; ``app/__init__.py`` -> ``app``."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if parts and parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def python_functions(path: str, text: str) -> list[Function]:
    """Every function and method of a Python file; [] when it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    module = python_module(path)
    found: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                local = f"{prefix}{child.name}"
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                # Everything but the name: arguments, decorators, body.
                shape = ast.dump(child.args) + "".join(ast.dump(d) for d in child.decorator_list)
                body = "\n".join(ast.unparse(s) for s in child.body)
                found.append(
                    Function(
                        name=f"{module}.{local}" if module else local,
                        local=local,
                        path=path,
                        start=start,
                        end=child.end_lineno or child.lineno,
                        body_hash=digest(shape + "".join(ast.dump(s) for s in child.body)),
                        body=body,
                    )
                )
                visit(child, f"{local}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found
