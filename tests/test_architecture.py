"""docs/ARCHITECTURE.md names every module and what each imports: a file added without a row, or an
import the row does not list, fails here."""

from __future__ import annotations

import ast
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


def imported_modules(path: Path, package: Path) -> set[str]:
    """The hairline modules a file imports, as the table writes them (``lab.analysis``;
    ``config`` for a name from a package's ``__init__``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hairline"):
            module = (node.module or "").removeprefix("hairline").removeprefix(".")
            for alias in node.names:
                if not module:
                    found.update(set() if alias.name == "__version__" else {alias.name})
                elif (package / module.replace(".", "/") / f"{alias.name}.py").exists():
                    found.add(f"{module}.{alias.name}")
                else:
                    found.add(module)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("hairline.") for a in node.names
                         if a.name.startswith("hairline."))  # fmt: skip
    own = path.relative_to(package).with_suffix("").as_posix().replace("/", ".")
    return found - {own}


def covers(listed: str, module: str) -> bool:
    """``lab`` covers ``lab.analysis``; ``routing.*`` covers every module of routing."""
    stem = listed.removesuffix(".*")
    return module == stem or module.startswith(stem + ".")


def test_each_rows_imports_column_is_what_the_file_imports() -> None:
    package = ROOT / "python" / "hairline"
    # The module table's rows (not "Long files", whose second column starts "about").
    row = r"^\| `([a-z_/]+\.py)` \| (?!about ).*\| ([^|]*) \|$"
    rows = re.findall(row, DOC, flags=re.MULTILINE)
    wrong = []
    for name, column in rows:
        listed = set() if "nothing" in column else set(re.findall(r"`([a-z_.*]+)`", column))
        actual = imported_modules(package / name, package)
        missing = sorted(m for m in actual if not any(covers(entry, m) for entry in listed))
        unused = sorted(e for e in listed if not any(covers(e, m) for m in actual))
        if missing or unused:
            wrong.append(f"{name}: add {missing}, remove {unused}")
    assert wrong == [], "docs/ARCHITECTURE.md's imports column:\n" + "\n".join(wrong)


def lines_before_tests(path: Path) -> int:
    """A file's lines, a Rust file's up to its ``#[cfg(test)]`` module."""
    text = path.read_text()
    if path.suffix == ".rs":
        text = text.split("#[cfg(test)]")[0]
    return len(text.splitlines())


def test_long_files_are_only_those_the_architecture_says_why() -> None:
    """Python under 500 lines, Rust under 600 before its tests, or a row in "Long files"."""
    listed = set(re.findall(r"^\| `([a-z_/]+\.(?:py|rs))` \| about", DOC, flags=re.MULTILINE))
    package, src = ROOT / "python" / "hairline", ROOT / "engine" / "src"
    long = {f"{p.relative_to(package).as_posix()}" for p in package.rglob("*.py")
            if lines_before_tests(p) > 500}  # fmt: skip
    long |= {f"engine/src/{p.relative_to(src).as_posix()}" for p in src.rglob("*.rs")
             if lines_before_tests(p) > 600}  # fmt: skip
    assert sorted(long - listed) == [], "split these, or say why in Long files"
    assert sorted(listed - long) == [], "no longer long: take them out of Long files"


def engine_module(path: Path, src: Path) -> str:
    """``record/proxy.rs`` -> ``record::proxy``; a folder's ``mod.rs`` is the folder."""
    parts = path.relative_to(src).with_suffix("").parts
    return "::".join(parts[:-1] if parts[-1] == "mod" else parts)


def use_paths(tree: str) -> list[str]:
    """A ``use`` tree's paths: ``a::{b, c::{d, e}}`` -> ``a::b``, ``a::c::d``, ``a::c::e``."""
    tree = re.sub(r"\s+as\s+\w+", "", re.sub(r"\s", " ", tree)).replace(" ", "")
    if "{" not in tree:
        return [tree]
    head, inner = tree.split("{", 1)
    inner, depth, items, item = inner[:-1], 0, [], ""
    for ch in inner:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
        else:
            item += ch
    items.append(item)
    return [f"{head}{p}".removesuffix("::self") for i in items if i for p in use_paths(i)]


def engine_imports(path: Path, src: Path, modules: set[str]) -> set[str]:
    """The engine modules a file's code (its tests left out) names: ``crate::`` and
    ``super::`` paths, and a folder's own modules, which it declares."""
    me = engine_module(path, src)
    parent = me if path.name == "mod.rs" else me.rpartition("::")[0]
    base = me.rpartition("::")[0] if path.name == "mod.rs" else parent
    code = re.sub(r"//.*", "", path.read_text().split("#[cfg(test)]")[0])
    children = set(re.findall(r"^\s*(?:pub )?mod (\w+);", code, flags=re.MULTILINE))
    paths = [p for t in re.findall(r"\buse ([^;]+);", code) for p in use_paths(t)]
    paths += re.findall(r"\b(?:crate|super)(?:::\w+)+", code)
    paths += [m for m in re.findall(r"\b(\w+)::", code) if m in children]
    paths += list(children)  # a folder depends on the modules it declares
    found = set()
    for p in paths:
        segments = p.split("::")
        if segments[0] == "crate":
            segments = segments[1:]
        elif segments[0] == "super":
            segments = [*base.split("::"), *segments[1:]] if base else segments[1:]
        elif segments[0] in children:
            segments = [*me.split("::"), *segments] if me else segments
        else:
            continue
        prefixes = ("::".join(segments[:i]) for i in range(len(segments), 0, -1))
        found |= {next((m for m in prefixes if m in modules), "")} - {"", me}
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for n in graph.get(todo.pop(), set()) - seen:
            seen.add(n)
            todo.append(n)
    return seen


def test_no_engine_modules_import_each_other_even_through_others() -> None:
    """A module imports what it uses, not the root of its folder: no circle of imports (the
    sample service's cache, ops, stall and metrics imported ``sample_service.rs``, which
    imported them: issue #26). The one exception is ``load/replay/``, whose files are one
    type's methods split by job."""
    src = ROOT / "engine" / "src"
    files = {engine_module(p, src): p for p in src.rglob("*.rs")
             if p.name not in ("lib.rs", "main.rs", "tests.rs")}  # fmt: skip
    graph = {m: engine_imports(p, src, set(files)) for m, p in files.items()}
    # What the reading must see: a sibling, a child named by its folder, a parent by super.
    assert {"sample::handler", "net::listen"} <= graph["sample::service"]
    assert "record::recorder" in graph["record"]
    assert "load::replay" in graph["load::replay::stats"]
    reach = {m: reachable(graph, m) for m in graph}
    circles = {
        frozenset({m} | {n for n in reach[m] if m in reach[n]}) for m in graph if m in reach[m]
    }
    replay = {c for c in circles if all(m.startswith("load::replay") for m in c)}
    assert frozenset({"load::replay", "load::replay::stats", "load::replay::requests"}) <= max(
        replay, key=len
    )
    assert sorted(sorted(c) for c in circles - replay) == [], "these import each other"
