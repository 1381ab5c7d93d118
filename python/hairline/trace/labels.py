"""Endpoint labels: which requests are "the same endpoint" in statistics and mixes.

A rule is ``REGEX=NAME`` (the ``--label`` option). The text is split on its **last** ``=``:
labels rarely need ``=``, while regexes may (``^/find/q=``). The regex is matched with
``search`` against the path without its query; the first rule that matches wins. It must
keep to the syntax Python's ``re`` and Rust's ``regex`` read alike (docs/trace-format.md):
look-around, back-references, ``\\Z``, possessive repetitions and the like are refused
when the rule is read, here and in the recorder, by the same rules (tests/data/
label_rules.json holds both to them). NAME may refer to the regex's groups as ``$1``,
``${1}``, ``$name`` or ``${name}`` (``$$`` is a literal ``$``); a reference to a group the
regex lacks, or any other ``$``, is refused when the rule is read, so ``$1a`` must be
written ``${1}a``. These are the accepted templates of Rust regex's ``Captures::expand``,
which gives them the same meaning, so the recorder (``hairline-engine record``) labels
exactly as this module does. A group that did not take part in the match expands to
nothing; a NAME that expands to nothing labels the request as if no rule had matched.

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
_ASCII_DIGITS = re.compile(r"[0-9]+")

# The regex syntax Python's re and Rust's regex read alike (docs/trace-format.md): what the
# scanner below lets through either engine compiles to the same matcher, or both refuse.
# engine/src/record/label.rs has the same scanner; tests/data/label_rules.json holds both
# to it.
_MAX_REPEAT = 1000
_MAX_DEPTH = 100
_ESCAPES = frozenset("dDwWsSbBAntrfv")
_FLAGS = frozenset("ims")
_GROUP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REPEAT = re.compile(r"\{([0-9]*)(,([0-9]*))?\}")
_SHARED = "is not in the regex syntax Python and Rust share"


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
        if _ASCII_DIGITS.fullmatch(ref):
            index = int(ref)
            if index > pattern.groups:
                problems.append(
                    f"${ref} refers to a group the regex does not have (it has "
                    f"{pattern.groups})"
                    + (f"; write ${{{ref[0]}}}{ref[1:]}" if len(ref) > 1 else "")
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


def _escape_problem(escaped: str, after: str, in_class: bool) -> str | None:
    """What is wrong with ``\\`` + ``escaped`` (``after`` is the text that follows)."""
    if escaped in "123456789":
        return f"a back-reference (\\{escaped}) {_SHARED}"
    if escaped == "0":
        return f"an octal escape (\\0) {_SHARED}; write \\x00"
    if escaped in "Zz":
        return f"\\{escaped} (end of text) {_SHARED}; write $"
    if escaped in "pP":
        return f"a Unicode class (\\{escaped}) {_SHARED}"
    if escaped in "uUN":
        return f"\\{escaped} {_SHARED}; write the character itself"
    if escaped == "x":
        if len(after) < 2 or not all(c in "0123456789abcdefABCDEF" for c in after[:2]):
            return "\\x takes two hex digits (\\xe9), as both engines read it"
        return None
    if escaped == "b" and in_class:
        return "\\b inside a class is a backspace to Python and an error to Rust"
    if escaped in "<>":
        return f"\\{escaped} is a word boundary to Rust and {escaped} to Python; write {escaped}"
    if escaped.isascii() and escaped.isalnum() and escaped not in _ESCAPES:
        return f"\\{escaped} is not an escape both engines read"
    if not escaped.isascii():
        return f"\\{escaped} is not an escape both engines read; write {escaped}"
    return None


def _group_problem(pattern: str, i: int, at_start: bool) -> tuple[str | None, int, bool]:
    """Reads the group that opens with ``(?`` at ``i``; returns its problem, the index after
    its opening, and whether it is a global flag group such as ``(?i)``."""
    rest = pattern[i + 2 :]
    if rest[:1] in ("=", "!") or rest[:2] in ("<=", "<!"):
        return f"look-around ({pattern[i : i + 4]}) {_SHARED}", i, False
    if rest[:1] == "<":
        return f"a named group written (?<name>...) {_SHARED}; write (?P<name>...)", i, False
    if rest[:2] == "P=":
        return f"a back-reference ({pattern[i : i + 4]}) {_SHARED}", i, False
    if rest[:2] == "P<":
        end = rest.find(">")
        name = rest[2:end] if end >= 0 else ""
        if end < 0 or not _GROUP_NAME.fullmatch(name):
            return (
                f"the group name {name!r} is not letters, digits and _ (not first a digit)",
                i,
                False,
            )
        return None, i + 2 + end + 1, False
    if rest[:1] == "(":
        return f"a conditional group (?(...)...) {_SHARED}", i, False
    if rest[:1] == ">":
        return f"an atomic group (?>...) {_SHARED}", i, False
    if rest[:1] == "#":
        return f"a comment group (?#...) {_SHARED}", i, False
    flags = ""
    for c in rest:
        if not (c.isascii() and (c.isalpha() or c == "-")):
            break
        flags += c
    closer = rest[len(flags) : len(flags) + 1]
    if closer not in (":", ")"):
        return f"(?{flags}{closer} opens no group both engines read", i, False
    for flag in flags.replace("-", ""):
        if flag not in _FLAGS:
            why = "; verbose mode reads spaces in classes differently" if flag == "x" else ""
            return f"the flag {flag} {_SHARED} (use i, m and s){why}", i, False
    if closer == ")" and ("-" in flags or not at_start):
        return (
            f"flags like (?{flags}) go at the start of the regex, and only to turn flags on; "
            f"scope them elsewhere: (?{flags}:...)",
            i,
            False,
        )
    return None, i + 2 + len(flags) + 1, closer == ")"


def _syntax_problem(pattern: str) -> str | None:
    """Why ``pattern`` is outside the syntax both engines read alike (``None`` if it is not;
    the engine may still refuse it, as both would)."""
    i, n, depth = 0, len(pattern), 0
    in_class = class_start = False
    at_start = True
    last = ""  # "repeat", "lazy", "assertion" or "" (anything else)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 == n:
                return None  # a trailing backslash: re refuses it, as Rust does
            problem = _escape_problem(pattern[i + 1], pattern[i + 2 :], in_class)
            if problem is not None:
                return problem
            assertion = not in_class and pattern[i + 1] in "bBA"
            i += 4 if pattern[i + 1] == "x" else 2
            at_start, class_start, last = False, False, "assertion" if assertion else ""
            continue
        if in_class:
            if c == "[":
                if pattern[i + 1 : i + 2] == ":":
                    return f"a POSIX class ([:...:]) {_SHARED}; write the characters"
                return "a [ inside a class nests a class in Rust; write \\["
            if c in "&-~" and pattern[i + 1 : i + 2] == c:
                return f"a set operation ({c}{c}) inside a class {_SHARED}"
            if c == "]" and not class_start:
                in_class = False
            class_start = False
            i += 1
            continue
        if c == "[":
            in_class = class_start = True
            at_start, last = False, ""
            i += 2 if pattern[i + 1 : i + 2] == "^" else 1
            continue
        if c == "(":
            depth += 1
            if depth > _MAX_DEPTH:
                return f"groups nested deeper than {_MAX_DEPTH} {_SHARED}"
            if pattern[i + 1 : i + 2] == "?":
                problem, after, is_global = _group_problem(pattern, i, at_start)
                if problem is not None:
                    return problem
                if is_global:
                    depth -= 1
                else:
                    at_start = False
                i, last = after, ""
                continue
            at_start, last = False, ""
            i += 1
            continue
        if c in "*+?{":
            end = i + 1
            if c == "{":
                m = _REPEAT.match(pattern, i)
                if m is None or (m[1] == "" and m[2] is None):
                    return "a { that starts no repetition; write \\{ for the character"
                if m[1] == "":
                    return f"{m[0]} {_SHARED}; write {{0,{m[3]}}}"
                counts = [int(x) for x in (m[1], m[3]) if x]
                if max(counts) > _MAX_REPEAT:
                    return f"{m[0]}: repetitions are at most {_MAX_REPEAT}"
                end = m.end()
            if last == "repeat" and c == "?":
                last = "lazy"
            elif last == "repeat" and c == "+":
                return f"a possessive repetition (+ after a repetition) {_SHARED}"
            elif last == "assertion":
                return f"a repetition of an assertion (^, $, \\b, \\B, \\A) {_SHARED}"
            elif last:
                return f"a repetition of a repetition {_SHARED}; group it: (?:a*)*"
            else:
                last = "repeat"
            at_start = False
            i = end
            continue
        if c == ")":
            depth = max(0, depth - 1)
        at_start, last = False, "assertion" if c in "^$" else ""
        i += 1
    return None


def _rule_or_problems(text: str) -> LabelRule | list[str]:
    regex, sep, name = text.rpartition("=")
    if not sep:
        return ["no '='; expected REGEX=NAME, e.g. '^/users/[0-9]+$=/users/:id'"]
    if not regex:
        return ["the regex is empty; use ^ to match every path"]
    if not name:
        return ["the label NAME after the last '=' is empty"]
    problem = _syntax_problem(regex)
    if problem is not None:
        return [f"the regex {regex!r}: {problem}"]
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
