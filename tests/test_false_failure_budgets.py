"""Every slow test states its false-failure probability: the rule of the issue "A suite that
is green every time". A test whose outcome depends on timing, load or statistics says, in a
paragraph of its docstring that starts with ``False failure:``, how likely it is to fail
when nothing is wrong, and why; slow tests are the ones that measure, so this test reads
their docstrings (with ``ast``, importing nothing) and names each one without the paragraph.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PARAGRAPH = "False failure:"
_Function = ast.FunctionDef | ast.AsyncFunctionDef


def _is_slow(mark: ast.expr) -> bool:
    """``pytest.mark.slow``, called or not, or a list or tuple holding one."""
    if isinstance(mark, (ast.List, ast.Tuple)):
        return any(_is_slow(item) for item in mark.elts)
    if isinstance(mark, ast.Call):
        mark = mark.func
    return (
        isinstance(mark, ast.Attribute)
        and mark.attr == "slow"
        and ast.unparse(mark.value).endswith("mark")
    )


def _module_is_slow(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        else:
            continue
        if "pytestmark" in targets and node.value is not None and _is_slow(node.value):
            return True
    return False


def _tests(body: list[ast.stmt], slow: bool) -> list[tuple[_Function, bool]]:
    """Test functions in a module or class body, each with whether it is marked slow."""
    found: list[tuple[_Function, bool]] = []
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            class_slow = slow or any(_is_slow(d) for d in node.decorator_list)
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "pytestmark" for t in item.targets
                ):
                    class_slow = class_slow or _is_slow(item.value)
            found.extend(_tests(node.body, class_slow))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.name.startswith("test")
        ):
            found.append((node, slow or any(_is_slow(d) for d in node.decorator_list)))
    return found


def _states_budget(test: _Function) -> bool:
    doc = ast.get_docstring(test) or ""
    return any(paragraph.strip().startswith(PARAGRAPH) for paragraph in doc.split("\n\n"))


def slow_tests_without_budget() -> list[str]:
    """``file:line name`` of each slow test with no ``False failure:`` paragraph."""
    offenders = []
    for path in sorted(TESTS.rglob("test_*.py")):
        name = path.relative_to(TESTS).as_posix()
        tree = ast.parse(path.read_text(), filename=str(path))
        for test, slow in _tests(tree.body, _module_is_slow(tree)):
            if slow and not _states_budget(test):
                offenders.append(f"tests/{name}:{test.lineno} {test.name}")
    return offenders


def test_every_slow_test_states_its_false_failure_probability() -> None:
    offenders = slow_tests_without_budget()
    assert not offenders, (
        f"{len(offenders)} slow test(s) without a '{PARAGRAPH}' paragraph in the docstring "
        "(the probability of failing when nothing is wrong, at most 1 in 1,000, and why):\n"
        + "\n".join(offenders)
    )


def test_the_check_sees_marks_and_paragraphs() -> None:
    """The walker finds a slow mark on a function, a class and a module, and a paragraph
    only where one starts with the words."""
    source = '''
import pytest
pytestmark = [pytest.mark.slow, pytest.mark.skipif(False, reason="")]

def test_module_slow():
    """Slow by the module.

    False failure: none: nothing is measured."""

class TestGroup:
    @pytest.mark.timeout(5)
    def test_in_class(self):
        """Mentions False failure: mid-sentence only."""
'''
    tree = ast.parse(source)
    found = {t.name: (slow, _states_budget(t)) for t, slow in _tests(tree.body, True)}
    assert _module_is_slow(tree)
    assert found == {"test_module_slow": (True, True), "test_in_class": (True, False)}
    plain = ast.parse("import pytest\n@pytest.mark.slow()\ndef test_x():\n    pass\n")
    assert not _module_is_slow(plain)
    assert [slow for _, slow in _tests(plain.body, False)] == [True]
