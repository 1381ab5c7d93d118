"""The layer contract (pyproject.toml's [tool.importlinter], run by `make lint`): the tree
keeps it, and an import that runs up breaks it, naming the import."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_tree_keeps_its_layers() -> None:
    done = lint_imports(ROOT / "python")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


def test_an_import_that_runs_up_breaks_the_contract_and_is_named(tmp_path: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.so", "hairline-engine")
    shutil.copytree(ROOT / "python" / "hairline", tmp_path / "hairline", ignore=skip)
    # stats (the domain) reaching up into the lab's analysis
    (tmp_path / "hairline" / "stats" / "upward.py").write_text(
        "from hairline.lab.analysis import Analysis\n"
    )

    done = lint_imports(tmp_path)

    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 kept, 1 broken" in done.stdout
    assert "hairline.stats.upward -> hairline.lab.analysis" in done.stdout


def test_no_module_imports_another_modules_private_names() -> None:
    """A name with a leading underscore is its module's own: another module that needs it
    needs it public (``report/html/charts.py``'s SVG helpers, ``config/load.py``'s
    ``FieldProblems``)."""

    found = []
    for path in sorted((ROOT / "python" / "hairline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hairline"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private and node.module != "hairline":
                    found.append(f"{path.relative_to(ROOT)}: {node.module} {private}")
    assert found == []
