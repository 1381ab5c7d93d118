"""Go and Rust functions by tree-sitter (the grammars' PyPI wheels), named as pprof and
Rust's demangler write them; see ``functions.py`` for the forms.

A closure belongs to the function that holds it (its lines map there; pprof's
``pkg.F.func1`` is matched to ``pkg.F`` in ``score.py``).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import PurePosixPath

import tree_sitter
import tree_sitter_go
import tree_sitter_rust

from hairline.suggest.functions import Function, digest

__all__ = ["go_functions", "rust_functions"]

_SPACE = re.compile(rb"\s+")


@cache
def _parser(language: str) -> tree_sitter.Parser:
    grammar = tree_sitter_go.language() if language == "go" else tree_sitter_rust.language()
    return tree_sitter.Parser(tree_sitter.Language(grammar))


def _text(node: tree_sitter.Node | None) -> str:
    return node.text.decode("utf-8", errors="replace") if node is not None and node.text else ""


def _function(
    node: tree_sitter.Node, name: str, local: str, path: str, skip: tree_sitter.Node | None
) -> Function:
    """``skip`` is the name node, left out of the body's hash so that a rename is seen."""
    raw = node.text or b""
    if skip is not None:
        a, b = skip.start_byte - node.start_byte, skip.end_byte - node.start_byte
        raw = raw[:a] + raw[b:]
    body = node.child_by_field_name("body")
    return Function(
        name=name,
        local=local,
        path=path,
        start=node.start_point[0] + 1,
        end=node.end_point[0] + 1,
        body_hash=digest(_SPACE.sub(b" ", raw).decode("utf-8", errors="replace")),
        body=_text(body),
    )


def _walk(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    out = []
    stack = [node]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(reversed(current.children))
    return out


def go_functions(path: str, text: str) -> list[Function]:
    """``pkg.Func``, ``pkg.(*Type).Method`` and ``pkg.Type.Method`` of a Go file."""
    root = _parser("go").parse(text.encode()).root_node
    package = next(
        (_text(c.named_children[0]) for c in root.children if c.type == "package_clause"), "main"
    )
    found = []
    for node in root.children:
        name_node = node.child_by_field_name("name")
        if node.type == "function_declaration":
            local = _text(name_node)
        elif node.type == "method_declaration":
            local = f"{_receiver(node)}.{_text(name_node)}"
        else:
            continue
        found.append(_function(node, f"{package}.{local}", local, path, name_node))
    return found


def _receiver(method: tree_sitter.Node) -> str:
    receiver = method.child_by_field_name("receiver")
    params = [
        c for c in (receiver.named_children if receiver else []) if c.type.endswith("declaration")
    ]
    kind = params[0].child_by_field_name("type") if params else None
    pointer = kind is not None and kind.type == "pointer_type"
    if pointer and kind is not None:
        kind = kind.named_children[0] if kind.named_children else None
    if kind is not None and kind.type == "generic_type":
        kind = kind.child_by_field_name("type")
    name = _text(kind)
    return f"(*{name})" if pointer else name


def rust_module(path: str) -> list[str]:
    """``engine/src/record/proxy.rs`` -> ``["record", "proxy"]``; ``lib.rs``, ``main.rs``
    and ``mod.rs`` name their folder's module."""
    parts = list(PurePosixPath(path).with_suffix("").parts)
    if "src" in parts:
        parts = parts[len(parts) - parts[::-1].index("src") :]
    if parts and parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    return parts


def rust_functions(path: str, text: str, crate: str = "crate") -> list[Function]:
    """``crate::module::Type::method`` and ``crate::module::func`` of a Rust file."""
    root = _parser("rust").parse(text.encode()).root_node
    found: list[Function] = []

    def visit(node: tree_sitter.Node, scope: list[str], local: list[str]) -> None:
        for child in node.named_children:
            if child.type == "function_item":
                name_node = child.child_by_field_name("name")
                names = [*local, _text(name_node)]
                found.append(
                    _function(child, "::".join([*scope, *names]), "::".join(names), path, name_node)
                )
                # Nested fns are items of their own, named after the enclosing fn.
                body = child.child_by_field_name("body")
                if body is not None:
                    visit(body, scope, names)
            elif child.type == "impl_item":
                kind = child.child_by_field_name("type")
                if kind is not None and kind.type == "generic_type":
                    kind = kind.child_by_field_name("type")
                body = child.child_by_field_name("body")
                if body is not None:
                    visit(body, scope, [*local, _text(kind)])
            elif child.type == "mod_item":
                body = child.child_by_field_name("body")
                if body is not None:
                    visit(body, [*scope, _text(child.child_by_field_name("name"))], local)
            elif child.type == "trait_item":
                body = child.child_by_field_name("body")
                if body is not None:
                    visit(body, scope, [*local, _text(child.child_by_field_name("name"))])

    visit(root, [crate, *rust_module(path)], [])
    return found
