"""How Argo Rollouts' ``web`` metric provider and Flagger's webhooks call a URL and judge the
answer, written from their documentation and code (Argo Rollouts: docs/analysis/web.md,
metricproviders/webmetric, utils/evaluate; Flagger: docs/gitbook/usage/webhooks.md,
pkg/controller/webhook.go), for tests that ask hairline's gate as they do.

Argo Rollouts' web provider: the request (GET by default) with the template's headers and a
``timeoutSeconds`` (default 10) timeout; a status outside 2xx, a transport error, a JSONPath
that finds nothing or a condition that cannot be evaluated is an **Error** measurement.
The body is JSON-decoded; the first value the JSONPath (Kubernetes' syntax, ``{$}`` when
none is given) selects is ``result``, as decoded (a string, a number, a map). Then
``successCondition`` and ``failureCondition`` (expr-lang) decide: failure if the failure
condition holds; **Inconclusive** if neither holds; without a failure condition a false
success condition is a failure, without a success condition a false failure condition a
success.

Flagger: a POST of ``{name, namespace, phase, checksum, metadata}`` as JSON
(``Content-Type: application/json``, no other header) with the webhook's ``timeout``
(default 10s); a status above 202 (or an error) is a failed check.

    phase = argo_measure(metric, {"experiment": "42", ...}).phase   # "Successful"
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from schema_check import check_api

__all__ = [
    "ExprError",
    "Measurement",
    "argo_measure",
    "evaluate_condition",
    "evaluate_result",
    "flagger_call",
    "go_duration_s",
    "jsonpath_first",
    "urllib_send",
]

# (method, url, headers, body, timeout_s) -> (status, body); a transport error raises OSError.
Send = Callable[[str, str, Mapping[str, str], bytes | None, float], tuple[int, bytes]]


def urllib_send(
    method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float
) -> tuple[int, bytes]:
    """One request over the network, as a Go http.Client makes it (no redirects asked for).
    A JSON answer of hairline's API is checked against docs/schema/api.json on the way."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            status, raw, kind = resp.status, resp.read(), resp.headers.get("content-type", "")
    except urllib.error.HTTPError as err:
        status, raw, kind = err.code, err.read(), err.headers.get("content-type", "")
    path = urllib.parse.urlsplit(url).path
    if path.startswith("/api/v1/") and "json" in kind and raw:
        check_api(method, path, status, json.loads(raw))
    return status, raw


# --- Argo Rollouts ----------------------------------------------------------------------


def resolve_args(text: str, args: Mapping[str, str]) -> str:
    """``{{args.NAME}}`` (spaces allowed inside the braces) replaced by the argument."""
    return re.sub(r"\{\{\s*args\.([\w-]+)\s*\}\}", lambda m: args[m.group(1)], text)


def jsonpath_first(path: str, data: Any) -> Any:
    """The first value a Kubernetes JSONPath of the form ``{$}``, ``{$.a.b}``, ``{.a[0].b}``
    selects (the subset Argo's documentation uses); KeyError when it selects nothing."""
    inner = path.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise KeyError(f"{path!r} is not a template in braces")
    inner = inner[1:-1].strip().removeprefix("$")
    value = data
    for name, index in re.findall(r"\.([\w-]+)|\[(\d+)\]", inner):
        if name:
            if not isinstance(value, dict) or name not in value:
                raise KeyError(f"{name} is not found")
            value = value[name]
        else:
            if not isinstance(value, list) or int(index) >= len(value):
                raise KeyError(f"array index out of bounds: index {index}")
            value = value[int(index)]
    if re.sub(r"\.([\w-]+)|\[(\d+)\]", "", inner):
        raise KeyError(f"{path!r} is beyond this test's JSONPath subset")
    return value


class ExprError(Exception):
    """A condition expr-lang would refuse (a bad token, a mismatched comparison)."""


_TOKEN = re.compile(r"""\s*(?:(\d+\.\d*|\d+)|("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|"""
                    r"""(==|!=|>=|<=|&&|\|\||[<>!().\[\]])|([A-Za-z_]\w*))""")  # fmt: skip


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    while pos < len(text.rstrip()):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ExprError(f"unexpected character at {pos} of {text!r}")
        number, string, op, name = m.groups()
        if number is not None:
            out.append(("value", float(number) if "." in number else int(number)))
        elif string is not None:
            inner = string[1:-1]
            out.append(("value", inner.replace("\\'", "'").replace('\\"', '"')))
        elif op is not None:
            out.append(("op", op))
        else:
            out.append(("name", name))
        pos = m.end()
    return out


class _Expr:
    """A recursive-descent evaluator of the expr-lang subset conditions use: literals
    (numbers, strings, true, false, nil), ``result`` with ``.field`` and ``[index]``,
    ``== != < <= > >=``, ``!``, ``&&`` and ``||`` (short-circuit), parentheses."""

    def __init__(self, text: str, result: Any) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.result = result

    def run(self) -> bool:
        value = self.either(evaluate=True)
        if self.pos != len(self.tokens):
            raise ExprError(f"unexpected token {self.tokens[self.pos][1]!r}")
        if not isinstance(value, bool):
            raise ExprError(f"expected bool, but got {type(value).__name__}")
        return value

    def peek(self) -> Any:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, op: str) -> bool:
        if self.pos < len(self.tokens) and self.tokens[self.pos] == ("op", op):
            self.pos += 1
            return True
        return False

    def either(self, *, evaluate: bool) -> Any:
        value = self.both(evaluate=evaluate)
        while self.take("||"):
            done = evaluate and _bool(value)
            right = self.both(evaluate=evaluate and not done)
            if evaluate and not done:
                value = _bool(right)
        return value

    def both(self, *, evaluate: bool) -> Any:
        value = self.negation(evaluate=evaluate)
        while self.take("&&"):
            done = evaluate and not _bool(value)
            right = self.negation(evaluate=evaluate and not done)
            if evaluate and not done:
                value = _bool(right)
        return value

    def negation(self, *, evaluate: bool) -> Any:
        if self.take("!"):
            value = self.negation(evaluate=evaluate)
            return (not _bool(value)) if evaluate else None
        return self.comparison(evaluate=evaluate)

    def comparison(self, *, evaluate: bool) -> Any:
        left = self.primary(evaluate=evaluate)
        op = self.peek()
        if op in ("==", "!=", "<", "<=", ">", ">=") and self.tokens[self.pos][0] == "op":
            self.pos += 1
            right = self.primary(evaluate=evaluate)
            return _compare(op, left, right) if evaluate else None
        return left

    def primary(self, *, evaluate: bool) -> Any:
        if self.pos >= len(self.tokens):
            raise ExprError("unexpected end of the condition")
        kind, token = self.tokens[self.pos]
        self.pos += 1
        if kind == "op" and token == "(":
            value = self.either(evaluate=evaluate)
            if not self.take(")"):
                raise ExprError("a '(' is not closed")
            return value
        if kind == "value":
            return token
        if kind == "name":
            constants = {"true": True, "false": False, "nil": None}
            if token in constants:
                return constants[token]
            if token != "result":
                raise ExprError(f"unknown name {token!r}")
            return self.access(self.result, evaluate=evaluate)
        raise ExprError(f"unexpected token {token!r}")

    def access(self, value: Any, *, evaluate: bool) -> Any:
        while True:
            if self.take("."):
                kind, name = self.tokens[self.pos]
                self.pos += 1
                if kind != "name":
                    raise ExprError(f"expected a field name, got {name!r}")
                if evaluate:
                    # expr-lang: a map's missing key is nil; a field of nil is an error.
                    if not isinstance(value, dict):
                        raise ExprError(f"cannot fetch {name} from {type(value).__name__}")
                    value = value.get(name)
            elif self.take("["):
                index = self.either(evaluate=evaluate)
                if not self.take("]"):
                    raise ExprError("a '[' is not closed")
                if evaluate:
                    try:
                        value = value[index]
                    except (KeyError, IndexError, TypeError) as err:
                        raise ExprError(f"cannot index: {err}") from None
            else:
                return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ExprError(f"invalid operation: && or || on {type(value).__name__}")
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compare(op: str, left: Any, right: Any) -> bool:
    if op in ("==", "!="):
        same = (
            (left == right)
            if (_number(left) and _number(right)) or type(left) is type(right)
            else False
        )
        return same if op == "==" else not same
    if not (_number(left) and _number(right)) and not (
        isinstance(left, str) and isinstance(right, str)
    ):
        raise ExprError(f"invalid operation: {op} (mismatched types {left!r} and {right!r})")
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def evaluate_condition(condition: str, result: Any) -> bool:
    return _Expr(condition, result).run()


def evaluate_result(result: Any, success: str, failure: str) -> str:
    """Argo Rollouts' phase of a measurement whose value is ``result``."""
    try:
        succeeded = evaluate_condition(success, result) if success else False
        failed = evaluate_condition(failure, result) if failure else False
    except ExprError:
        return "Error"
    if not success and not failure:
        return "Successful"
    if success and not failure:
        failed = not succeeded
    elif failure and not success:
        succeeded = not failed
    if failed:
        return "Failed"
    return "Successful" if succeeded else "Inconclusive"


@dataclass(frozen=True)
class Measurement:
    phase: str  # Successful | Failed | Inconclusive | Error
    value: Any
    status: int | None
    message: str = ""


def argo_measure(
    metric: Mapping[str, Any], args: Mapping[str, str], *, send: Send = urllib_send
) -> Measurement:
    """One measurement of an AnalysisTemplate's ``web`` metric with ``args`` resolved."""
    web = metric["provider"]["web"]
    method = web.get("method", "GET")
    url = resolve_args(web["url"], args)
    headers = {h["key"]: resolve_args(h["value"], args) for h in web.get("headers", [])}
    timeout_s = float(web.get("timeoutSeconds", 0) or 0) or 10.0
    try:
        status, raw = send(method, url, headers, None, timeout_s)
    except OSError as err:
        return Measurement("Error", None, None, str(err))
    if not 200 <= status < 300:
        return Measurement("Error", None, status, f"received non 2xx response code: {status}")
    try:
        data = json.loads(raw)
    except ValueError:
        # Argo Rollouts takes a body that is not JSON as a successful string.
        return Measurement("Successful", raw.decode(), status)
    try:
        value = jsonpath_first(web.get("jsonPath") or "{$}", data)
    except KeyError as err:
        return Measurement("Error", None, status, f"Could not find JSONPath in body: {err}")
    phase = evaluate_result(value, metric.get("successCondition", ""),
                            metric.get("failureCondition", ""))  # fmt: skip
    return Measurement(phase, value, status)


# --- Flagger ----------------------------------------------------------------------------


def go_duration_s(text: str) -> float:
    """A Go duration ("5m", "1m30s", "10s", "250ms") in seconds."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{text!r} is not a Go duration")
    return sum(float(n) * units[u] for n, u in parts)


def flagger_call(
    hook: Mapping[str, Any], *, name: str, namespace: str, phase: str = "Progressing",
    checksum: str = "85d557f47b", send: Send = urllib_send,
) -> tuple[bool, int, bytes]:  # fmt: skip
    """(passed, status, body) of a Canary's webhook called as Flagger calls it."""
    payload = {"name": name, "namespace": namespace, "phase": phase, "checksum": checksum,
               "metadata": dict(hook.get("metadata") or {})}  # fmt: skip
    timeout_s = go_duration_s(hook.get("timeout") or "10s")
    status, body = send("POST", hook["url"], {"Content-Type": "application/json"},
                        json.dumps(payload).encode(), timeout_s)  # fmt: skip
    return status <= 202, status, body
