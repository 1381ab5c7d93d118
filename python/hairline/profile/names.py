"""How a profiler's frame names a function that source code names (pure).

A profiler writes more than the source's qualified name: pprof puts Go's import path in
front (``github.com/x/store.(*Index).Lookup``), a Rust symbol keeps its crate path and,
with the legacy mangling, a hash (``::h0123456789abcdef``), a trait method reads
``<T as Trait>::f``, a Go closure ends ``.func1``. :func:`plain_name` takes off what varies
between builds; :func:`ends_at_separator` says whether one name is the other with a
longer path in front. The diff suggester (suggest/score.py) and the report's marking of
the suggester's functions (report/context/functions.py) match names the same way.
"""

from __future__ import annotations

import re

__all__ = ["ends_at_separator", "name_parts", "plain_name", "same_function"]

_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_RUST_TRAIT_IMPL = re.compile(r"<([^<>]+?) as [^<>]+>")
_GO_CLOSURE = re.compile(r"(\.func\d+)+(\.\d+)*$")
_SEPARATORS = "./:"


def plain_name(name: str) -> str:
    """``name`` without a Rust hash, a trait impl's ``as Trait``, a Go closure's suffix."""
    name = _RUST_HASH.sub("", name)
    name = _RUST_TRAIT_IMPL.sub(r"\1", name)
    return _GO_CLOSURE.sub("", name)


def ends_at_separator(long: str, short: str) -> bool:
    """Whether ``long`` is ``short``, or ends with it right after a ``.``, ``/`` or ``:``
    (``app.search.lookup`` ends with ``search.lookup``, not with ``h.lookup``)."""
    return long == short or (
        len(long) > len(short) and long.endswith(short) and long[-len(short) - 1] in _SEPARATORS
    )


def name_parts(name: str) -> int:
    """How many path parts ``name`` has (``a.b::c`` has 3)."""
    return len(re.findall(r"[^./:]+", name))


def same_function(frame: str, qualified: str) -> bool:
    """Whether the profile's ``frame`` names the function the source calls ``qualified``:
    the frame, plain, is that name or ends with it at a separator."""
    return ends_at_separator(plain_name(frame), qualified)
