"""docs/ARCHITECTURE.md names every module: a file added without a row fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def named(path: str) -> bool:
    """Named as itself, or inside a folder the table names as a whole (``stats/``,
    ``store/migrations/``)."""
    if f"`{path}`" in DOC:
        return True
    parts = path.split("/")
    return any(f"`{'/'.join(parts[:i])}/`" in DOC or f"`{'/'.join(parts[:i])}/` (all files)"
               in DOC for i in range(1, len(parts)))  # fmt: skip


def test_every_python_module_has_a_row() -> None:
    package = ROOT / "python" / "hairline"
    files = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*.py")
        if p.name != "__init__.py" or p.parent == package
    ]
    missing = [f for f in sorted(files) if not named(f)]
    assert missing == [], f"add these to docs/ARCHITECTURE.md's module table: {missing}"


def test_every_engine_source_file_has_a_row() -> None:
    src = ROOT / "engine" / "src"
    files = [p.relative_to(src).as_posix() for p in src.rglob("*.rs")]
    missing = [f for f in sorted(files) if not named(f)]
    assert missing == [], f"add these to docs/ARCHITECTURE.md's engine table: {missing}"


def test_no_row_names_a_file_that_is_gone() -> None:
    package = ROOT / "python" / "hairline"
    rows = re.findall(r"^\| `([a-z_/]+\.py)` \|", DOC, flags=re.MULTILINE)
    gone = [r for r in rows if not (package / r).exists()]
    assert gone == []
