"""Endpoint labels: which requests are "the same endpoint" in statistics and mixes.

A rule is ``REGEX=NAME`` (the ``--label`` option). The text is split on its **last** ``=``:
labels rarely need ``=``, while regexes may (``(?=...)``, ``(?P=name)``). The regex is
matched with ``search`` against the path without its query; the first rule that matches
wins. NAME may refer to the regex's groups as ``$1``, ``${1}``, ``$name`` or ``${name}``
(``$$`` is a literal ``$``); a reference to a group the regex lacks, or any other ``$``, is
refused when the rule is read, so ``$1a`` must be written ``${1}a``. These are the accepted
templates of Rust regex's ``Captures::expand``, which gives them the same meaning, so the
recorder (``hairline-engine record``) labels exactly as this module does. A group that did
not take part in the match expands to nothing; a NAME that expands to nothing labels the
request as if no rule had matched.

Without a matching rule the label is the path without its query, or with
``normalize_ids`` that path with every id-like segment replaced by ``:id``: all decimal
digits, a UUID (8-4-4-4-12 hex digits), or 16 or more hex digits.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hairline.errors import ConfigError
from hairline.trace.format import path_without_query

__all__ = [
    "ID_LABEL",
    "LabelRule",
    "Labeller",
    "normalize_ids",
    "parse_label_rule",
    "parse_label_rules",
]

ID_LABEL = ":id"
_ID_SEGMENT = re.compile(
    r"[0-9]+"
    r"|[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
    r"|[0-9A-Fa-f]{16,}"
)
# One template piece: $$, ${ref}, $ref, or a lone $ (refused).
_REFERENCE = re.compile(r"\$(?:(\$)|\{([^}]*)\}|([_0-9A-Za-z]+)|)")
_LEADING_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class LabelRule:
    """``REGEX=NAME``: requests whose path matches get the label NAME (expanded)."""

    pattern: re.Pattern[str]
    # Literal text and group references, in order: str is literal, int/str in a tuple a group.
    pieces: tuple[str | tuple[int | str], ...]
    text: str

    def expand(self, match: re.Match[str]) -> str:
        out = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(piece)
            else:
                out.append(match.group(piece[0]) or "")
        return "".join(out)


def _template_pieces(
    name: str, pattern: re.Pattern[str]
) -> tuple[tuple[str | tuple[int | str], ...], list[str]]:
    pieces: list[str | tuple[int | str]] = []
    problems: list[str] = []
    pos = 0
    for m in _REFERENCE.finditer(name):
        if m.start() > pos:
            pieces.append(name[pos : m.start()])
        pos = m.end()
        dollar, braced, bare = m.groups()
        if dollar is not None:
            pieces.append("$")
            continue
        ref = braced if braced is not None else bare
        if ref is None:
            problems.append(
                f"a '$' at offset {m.start()} starts no group reference; write $$ for a '$'"
            )
            continue
        if ref.isdigit():
            index = int(ref)
            if index > pattern.groups:
                problems.append(
                    f"${ref} refers to group {index}, but the regex has {pattern.groups} "
                    f"group(s)" + (f"; write ${{{ref[0]}}}{ref[1:]}" if len(ref) > 1 else "")
                )
                continue
            pieces.append((index,))
        elif ref in pattern.groupindex:
            pieces.append((ref,))
        else:
            digits = _LEADING_DIGITS.match(ref)
            problems.append(
                f"${{{ref}}} names no group of the regex"
                + (f" (its groups: {', '.join(pattern.groupindex)})" if pattern.groupindex else "")
                + (f"; for group {digits[0]} then text, write ${{{digits[0]}}}" if digits else "")
            )
    if pos < len(name):
        pieces.append(name[pos:])
    return tuple(pieces), problems


def _rule_or_problems(text: str) -> LabelRule | list[str]:
    regex, sep, name = text.rpartition("=")
    if not sep:
        return ["expected REGEX=NAME, e.g. '^/users/[0-9]+$=/users/:id'"]
    if not regex:
        return ["the regex is empty; use ^ to match every path"]
    if not name:
        return ["the label NAME after the last '=' is empty"]
    try:
        pattern = re.compile(regex)
    except re.error as err:
        return [f"the regex {regex!r} does not compile: {err}"]
    pieces, problems = _template_pieces(name, pattern)
    if problems:
        return problems
    return LabelRule(pattern=pattern, pieces=pieces, text=text)


def parse_label_rule(text: str, *, source: str = "--label") -> LabelRule:
    """One ``REGEX=NAME`` rule; a :class:`ConfigError` says what is wrong with it."""
    return parse_label_rules([text], source=source)[0]


def parse_label_rules(texts: Iterable[str], *, source: str = "--label") -> tuple[LabelRule, ...]:
    """Every rule, in order; all problems of all rules are reported at once."""
    rules: list[LabelRule] = []
    problems: list[str] = []
    for text in texts:
        result = _rule_or_problems(text)
        if isinstance(result, LabelRule):
            rules.append(result)
        else:
            problems.extend(f"{source} {text!r}: {p}" for p in result)
    if problems:
        raise ConfigError(
            "; ".join(problems),
            hint="a rule is REGEX=NAME split on the last '=', e.g. "
            "--label '^/users/([0-9]+)/posts$=/users/:id/posts' or "
            "--label '^/api/(?P<kind>[a-z]+)/=api-$kind' (docs/traffic.md, 'Labelling')",
        )
    return tuple(rules)


def normalize_ids(path: str) -> str:
    """``/users/123/posts/9`` -> ``/users/:id/posts/:id`` (the query, if any, is dropped)."""
    segments = path_without_query(path).split("/")
    return "/".join(ID_LABEL if _ID_SEGMENT.fullmatch(s) else s for s in segments)


class Labeller:
    """Labels paths by rules, then by the default; remembers labels of paths it has seen."""

    def __init__(self, rules: Sequence[LabelRule] = (), *, normalize_ids: bool = False) -> None:
        self.rules = tuple(rules)
        self.normalize_ids = normalize_ids
        self._cache: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        bare = path_without_query(path)
        label = self._cache.get(bare)
        if label is None:
            label = self._label(bare)
            if len(self._cache) < 100_000:
                self._cache[bare] = label
        return label

    def _label(self, bare: str) -> str:
        for rule in self.rules:
            match = rule.pattern.search(bare)
            if match is not None:
                label = rule.expand(match)
                if label:
                    return label
                break
        return normalize_ids(bare) if self.normalize_ids else bare

    def describe(self) -> dict[str, object]:
        """The rules as text, for a trace header's provenance."""
        return {"rules": [r.text for r in self.rules], "normalize_ids": self.normalize_ids}
