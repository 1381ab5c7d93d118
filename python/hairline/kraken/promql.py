"""A subset of PromQL, parsed once and evaluated over a :class:`SeriesStore`.

The subset (docs/kraken.md, "Queries (the PromQL subset)"): numbers; selectors
``name{label="v",label!="v",label=~"re",label!~"re"}``; range selectors ``x[5s]`` inside
``rate``, ``increase``, ``avg_over_time`` and ``max_over_time``; ``sum``, ``avg``, ``max``,
``min`` with an optional ``by (label, ...)``; ``histogram_quantile(q, v)`` over ``_bucket``
series; ``+ - * /`` between numbers and vectors (vectors matched one-to-one on their labels
without the metric name); parentheses.

Departures from Prometheus, on purpose: ``rate`` and ``increase`` do not extrapolate to the
window's edges (the increase is the one counted between the window's first and last
samples, counter resets included), so a rate needs two samples in its window; a result of
NaN (no requests, say, in ``sum / count``) is "no data", like an empty result.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import cast

from hairline.errors import ConfigError
from hairline.kit.durations import duration_s
from hairline.kraken.series import Labels, Matcher, MatchOp, SeriesStore

__all__ = [
    "Aggregate",
    "Binary",
    "Call",
    "Expr",
    "Negate",
    "Number",
    "Selector",
    "evaluate",
    "longest_range_s",
    "parse",
    "parse_duration_s",
]

RANGE_FUNCTIONS = ("rate", "increase", "avg_over_time", "max_over_time")
AGGREGATIONS = ("sum", "avg", "max", "min")
_NOT_IN_SUBSET = ("==", "!=", ">", "<", ">=", "<=", "^", "%")
_HINT = 'see "Queries (the PromQL subset)" in docs/kraken.md for what a key may use'


@dataclass(frozen=True)
class Number:
    value: float


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[Matcher, ...] = ()
    range_s: float | None = None


@dataclass(frozen=True)
class Call:
    """``rate``, ``increase``, ``avg_over_time``, ``max_over_time`` (one range selector) or
    ``histogram_quantile`` (a number, then a vector)."""

    func: str
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Aggregate:
    op: str
    expr: Expr
    by: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Binary:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Negate:
    expr: Expr


Expr = Number | Selector | Call | Aggregate | Binary | Negate


def parse_duration_s(text: str) -> float:
    """``"500ms"``, ``"6s"``, ``"4m"``, ``"1h"`` in seconds; ValueError otherwise."""
    seconds = duration_s(text, units=("ms", "s", "m", "h"))
    if seconds is None:
        raise ValueError(f"{text!r} is not a duration such as 500ms, 6s, 4m or 1h")
    return seconds


_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<duration>\d+(?:\.\d+)?(?:ms|s|m|h)(?![A-Za-z0-9_:]))
    |(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?:[Ii]nf|NaN)(?![A-Za-z0-9_:]))
    |(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<op>=~|!~|!=|==|>=|<=|[-+*/(){}\[\],=<>^%])""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    column: int


def _tokens(source: str) -> list[_Token]:
    out: list[_Token] = []
    at = 0
    while at < len(source):
        m = _TOKEN.match(source, at)
        if not m or m.lastgroup is None:
            raise _error(source, at + 1, f"unexpected {source[at]!r}")
        if m.lastgroup != "ws":
            out.append(_Token(m.lastgroup, m.group(), at + 1))
        at = m.end()
    out.append(_Token("end", "", len(source) + 1))
    return out


def _error(source: str, column: int, problem: str) -> ConfigError:
    return ConfigError(f"query {source!r}: column {column}: {problem}", hint=_HINT)


def parse(source: str) -> Expr:
    """The query ``source`` as an expression; :class:`ConfigError` with the column of the
    first problem otherwise."""
    return _Parser(source).parse()


class _Parser:
    """Recursive descent: sum := product (('+'|'-') product)*; product := unary (('*'|'/')
    unary)*; unary := '-' unary | primary."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = _tokens(source)
        self.at = 0

    def parse(self) -> Expr:
        expr, _ = self._sum()
        if self._peek().text in _NOT_IN_SUBSET:
            raise self._fail(
                self._peek(), f"{self._peek().text!r} is not in the subset: use + - * /"
            )
        self._expect("end", "the end of the query")
        return expr

    def _peek(self) -> _Token:
        return self.tokens[self.at]

    def _take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def _is(self, text: str) -> bool:
        token = self._peek()
        return token.kind in ("op", "ident") and token.text == text

    def _expect(self, what: str, described: str) -> _Token:
        token = self._peek()
        if (token.kind == what == "end") or (token.kind != "end" and token.text == what):
            return self._take()
        found = "the end" if token.kind == "end" else repr(token.text)
        raise self._fail(token, f"expected {described}, found {found}")

    def _fail(self, token: _Token, problem: str) -> ConfigError:
        return _error(self.source, token.column, problem)

    # Each rule returns the expression and the column it starts at (for later errors).
    def _sum(self) -> tuple[Expr, int]:
        left, column = self._product()
        while self._is("+") or self._is("-"):
            op = self._take().text
            right, _ = self._product()
            left = Binary(op, left, right)
        return left, column

    def _product(self) -> tuple[Expr, int]:
        left, column = self._unary()
        while self._is("*") or self._is("/"):
            op = self._take().text
            right, _ = self._unary()
            left = Binary(op, left, right)
        return left, column

    def _unary(self) -> tuple[Expr, int]:
        if self._is("-"):
            column = self._take().column
            inner, _ = self._unary()
            return (Number(-inner.value) if isinstance(inner, Number) else Negate(inner)), column
        if self._is("+"):
            self._take()
        expr, column = self._primary()
        if isinstance(expr, Selector) and expr.range_s is not None:
            raise _error(
                self.source,
                column,
                f"a range selector is allowed only inside {', '.join(RANGE_FUNCTIONS)}",
            )
        return expr, column

    def _primary(self) -> tuple[Expr, int]:
        token = self._take()
        if token.kind == "number":
            return Number(float(token.text)), token.column
        if token.kind == "op" and token.text == "(":
            inner, _ = self._sum()
            self._expect(")", "')'")
            return inner, token.column
        if token.kind == "op" and token.text in _NOT_IN_SUBSET:
            raise self._fail(token, f"{token.text!r} is not in the subset: use + - * /")
        if token.kind != "ident":
            found = "the end" if token.kind == "end" else repr(token.text)
            raise self._fail(token, f"expected a number, a metric or a function, found {found}")
        if token.text in AGGREGATIONS:
            return self._aggregate(token), token.column
        if self._is("("):
            return self._call(token), token.column
        return self._selector(token), token.column

    def _aggregate(self, op: _Token) -> Expr:
        by = self._by() if self._is("by") else None
        self._expect("(", f"'(' after {op.text}")
        inner, column = self._sum()
        self._expect(")", "')'")
        if self._is("by"):
            if by is not None:
                raise self._fail(self._peek(), "'by' given twice")
            by = self._by()
        if not _is_vector(inner):
            raise _error(self.source, column, f"{op.text}() needs a vector, not a number")
        return Aggregate(op.text, inner, by)

    def _by(self) -> tuple[str, ...]:
        self._take()
        self._expect("(", "'(' after by")
        labels: list[str] = []
        while not self._is(")"):
            token = self._take()
            if token.kind != "ident":
                raise self._fail(token, f"expected a label name, found {token.text!r}")
            labels.append(token.text)
            if not self._is(")"):
                self._expect(",", "',' or ')'")
        self._take()
        return tuple(labels)

    def _call(self, name: _Token) -> Expr:
        if name.text not in (*RANGE_FUNCTIONS, "histogram_quantile"):
            known = ", ".join((*RANGE_FUNCTIONS, "histogram_quantile", *AGGREGATIONS))
            raise self._fail(name, f"unknown function {name.text!r}: the subset has {known}")
        self._take()
        args: list[tuple[Expr, int]] = []
        while not self._is(")"):
            if name.text in RANGE_FUNCTIONS:
                token = self._take()
                if token.kind != "ident":
                    raise self._fail(token, f"{name.text}() needs a range selector such as x[5s]")
                args.append((self._selector(token), token.column))
            else:
                args.append(self._sum())
            if not self._is(")"):
                self._expect(",", "',' or ')'")
        self._take()
        if name.text in RANGE_FUNCTIONS:
            if len(args) != 1 or not isinstance(args[0][0], Selector) or args[0][0].range_s is None:
                column = args[0][1] if args else name.column
                raise _error(
                    self.source, column, f"{name.text}() needs one range selector such as x[5s]"
                )
        else:
            if len(args) != 2:
                raise self._fail(name, "histogram_quantile() needs (q, vector)")
            if _is_vector(args[0][0]):
                raise _error(self.source, args[0][1], "the quantile must be a number, e.g. 0.99")
            if not _is_vector(args[1][0]):
                raise _error(self.source, args[1][1], "histogram_quantile() needs _bucket series")
        return Call(name.text, tuple(a for a, _ in args))

    def _selector(self, name: _Token) -> Selector:
        if name.text in ("by", "without", "on", "ignoring", "offset"):
            raise self._fail(name, f"{name.text!r} is not in the subset here")
        matchers: list[Matcher] = []
        if self._is("{"):
            self._take()
            while not self._is("}"):
                label = self._take()
                if label.kind != "ident":
                    raise self._fail(label, f"expected a label name, found {label.text!r}")
                op = self._take()
                if op.text not in ("=", "!=", "=~", "!~"):
                    raise self._fail(op, "expected =, !=, =~ or !~ after the label name")
                value = self._take()
                if value.kind != "string":
                    raise self._fail(value, 'expected a quoted value, e.g. "200"')
                text = re.sub(r"\\(.)", r"\1", value.text[1:-1])
                try:
                    matchers.append(Matcher(label.text, cast(MatchOp, op.text), text))
                except re.error as err:
                    raise self._fail(value, f"bad regular expression: {err}") from err
                if not self._is("}"):
                    self._expect(",", "',' or '}'")
            self._take()
        range_s: float | None = None
        if self._is("["):
            self._take()
            token = self._take()
            if token.kind != "duration":
                raise self._fail(token, "expected a duration such as 500ms, 5s or 1m")
            range_s = parse_duration_s(token.text)
            self._expect("]", "']'")
        return Selector(name.text, tuple(matchers), range_s)


def _is_vector(expr: Expr) -> bool:
    if isinstance(expr, Number):
        return False
    if isinstance(expr, Negate):
        return _is_vector(expr.expr)
    if isinstance(expr, Binary):
        return _is_vector(expr.left) or _is_vector(expr.right)
    return True


def longest_range_s(expr: Expr) -> float:
    """The longest range selector's window (0 without one): what the store must retain."""
    if isinstance(expr, Selector):
        return expr.range_s or 0.0
    if isinstance(expr, Call):
        return max(longest_range_s(a) for a in expr.args)
    if isinstance(expr, Aggregate | Negate):
        return longest_range_s(expr.expr)
    if isinstance(expr, Binary):
        return max(longest_range_s(expr.left), longest_range_s(expr.right))
    return 0.0


Vector = dict[Labels, float]
Value = float | Vector


def evaluate(
    expr: Expr, store: SeriesStore, at_s: float, instances: Collection[str]
) -> float | None:
    """The query's one value at ``at_s`` over ``instances``' series; None without data (no
    series, a rate with one scrape, NaN). A result of several values is a ConfigError that
    says to aggregate."""
    value = _eval(expr, store, at_s, instances)
    if isinstance(value, dict):
        if len(value) > 1:
            shown = "; ".join(_show(labels) for labels in list(value)[:3])
            more = "; ..." if len(value) > 3 else ""
            raise ConfigError(
                f"query gives {len(value)} values, not one ({shown}{more})",
                hint="aggregate it to one value: wrap it in sum(...), avg(...) or max(...)",
            )
        if not value:
            return None
        (value,) = value.values()
    return None if math.isnan(value) else value


def _show(labels: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels) + "}"


def _eval(expr: Expr, store: SeriesStore, at_s: float, instances: Collection[str]) -> Value:
    if isinstance(expr, Number):
        return expr.value
    if isinstance(expr, Selector):
        return store.instant(expr.name, expr.matchers, at_s, instances)
    if isinstance(expr, Negate):
        return _binary("*", -1.0, _eval(expr.expr, store, at_s, instances))
    if isinstance(expr, Binary):
        left = _eval(expr.left, store, at_s, instances)
        return _binary(expr.op, left, _eval(expr.right, store, at_s, instances))
    if isinstance(expr, Aggregate):
        inner = _eval(expr.expr, store, at_s, instances)
        assert isinstance(inner, dict)
        return _aggregate(expr.op, inner, expr.by)
    if expr.func == "histogram_quantile":
        q = _eval(expr.args[0], store, at_s, instances)
        buckets = _eval(expr.args[1], store, at_s, instances)
        assert isinstance(q, float) and isinstance(buckets, dict)
        return _histogram_quantile(q, buckets)
    selector = expr.args[0]
    assert isinstance(selector, Selector) and selector.range_s is not None
    windows = store.range_samples(
        selector.name, selector.matchers, at_s, selector.range_s, instances
    )
    over = _OVER_TIME[expr.func]
    return {labels: v for labels, samples in windows.items() if (v := over(samples)) is not None}


def _increase(samples: list[tuple[float, float]]) -> float | None:
    if len(samples) < 2:
        return None
    total = 0.0
    for (_, before), (_, after) in itertools.pairwise(samples):
        # A counter that went down was reset (its process restarted) and counts from 0.
        total += after - before if after >= before else after
    return total


def _rate(samples: list[tuple[float, float]]) -> float | None:
    total = _increase(samples)
    return None if total is None else total / (samples[-1][0] - samples[0][0])


_OVER_TIME: dict[str, Callable[[list[tuple[float, float]]], float | None]] = {
    "rate": _rate,
    "increase": _increase,
    "avg_over_time": lambda s: sum(v for _, v in s) / len(s),
    "max_over_time": lambda s: max(v for _, v in s),
}


def _arith(op: str, a: float, b: float) -> float:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a)
    return a / b


def _binary(op: str, left: Value, right: Value) -> Value:
    if isinstance(left, float) and isinstance(right, float):
        return _arith(op, left, right)
    if isinstance(left, float):
        assert isinstance(right, dict)
        return {labels: _arith(op, left, v) for labels, v in right.items()}
    if isinstance(right, float):
        return {labels: _arith(op, v, right) for labels, v in left.items()}
    return {labels: _arith(op, v, right[labels]) for labels, v in left.items() if labels in right}


def _aggregate(op: str, vector: Vector, by: tuple[str, ...] | None) -> Vector:
    groups: dict[Labels, list[float]] = {}
    for labels, value in vector.items():
        have = dict(labels)
        key = tuple(sorted((k, have[k]) for k in set(by or ()) if have.get(k, "")))
        groups.setdefault(key, []).append(value)
    return {key: _REDUCE[op](values) for key, values in groups.items()}


def _extreme(pick: Callable[[list[float]], float]) -> Callable[[list[float]], float]:
    # As in Prometheus, max and min pass over NaN (a server without requests in a ratio).
    def reduce(values: list[float]) -> float:
        numbers = [v for v in values if not math.isnan(v)]
        return pick(numbers) if numbers else math.nan

    return reduce


_REDUCE: dict[str, Callable[[list[float]], float]] = {
    "sum": math.fsum,
    "avg": lambda vs: math.fsum(vs) / len(vs),
    "max": _extreme(max),
    "min": _extreme(min),
}


def _histogram_quantile(q: float, buckets: Vector) -> Vector:
    """Prometheus's interpolation: the bucket holding rank q * count, linearly within it
    (from 0 for the first bucket); the +Inf bucket gives the highest finite bound."""
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for labels, count in buckets.items():
        have = dict(labels)
        try:
            upper = float(have.pop("le"))
        except (KeyError, ValueError):
            continue
        groups.setdefault(tuple(sorted(have.items())), []).append((upper, count))
    return {key: _quantile(q, sorted(group)) for key, group in groups.items()}


def _quantile(q: float, group: list[tuple[float, float]]) -> float:
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if len(group) < 2 or group[-1][0] != math.inf:
        return math.nan
    counts: list[float] = []
    for _, count in group:
        # Buckets scraped mid-update may dip; cumulative counts never fall.
        counts.append(max(count, counts[-1]) if counts else count)
    total = counts[-1]
    if total == 0:
        return math.nan
    rank = q * total
    i = next(i for i, c in enumerate(counts) if c >= rank)
    if i == len(group) - 1:
        return group[-2][0]
    start = 0.0 if i == 0 else group[i - 1][0]
    if i == 0 and group[0][0] <= 0:
        return group[0][0]
    below = 0.0 if i == 0 else counts[i - 1]
    inside = counts[i] - below
    return start + (group[i][0] - start) * ((rank - below) / inside if inside else 1.0)
