"""Scrape a Prometheus text-format endpoint into ``{(name, labels): value}``."""

from __future__ import annotations

import math
import re
import urllib.request
from collections.abc import Mapping, Sequence

from hairline.errors import HairlineError

__all__ = ["Sample", "counters_per_request", "parse_text", "scrape"]

Sample = tuple[str, tuple[tuple[str, str], ...]]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_text(text: str) -> dict[Sample, float]:
    """Parse the exposition format; comments and malformed lines are skipped."""
    out: dict[Sample, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, labels, value = m.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isnan(number):
            continue
        pairs = tuple(sorted(_LABEL.findall(labels or "")))
        out[(name, pairs)] = number
    return out


def scrape(url: str, *, timeout_s: float = 2.0) -> dict[Sample, float]:
    """Fetch and parse ``url``; a failure is a :class:`HairlineError` naming the URL."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read().decode("utf-8", errors="replace")
    except OSError as err:
        raise HairlineError(
            f"cannot scrape metrics from {url}: {err}",
            hint="check the service's metrics URL, or remove it from the service file",
        ) from err
    return parse_text(body)


def counters_per_request(
    before: Mapping[Sample, float],
    after: Mapping[Sample, float],
    names: Sequence[str],
    *,
    requests: int,
    endpoint_requests: Mapping[str, int],
) -> dict[str, float]:
    """Each wanted counter's increase per request: ``name`` over all ``requests``, or
    ``name[endpoint]`` over that endpoint's requests when the counter is so labelled (an
    endpoint that served none has no value). Pure."""
    increase: dict[tuple[str, str | None], float] = {}
    for key, value in after.items():
        name, labels = key
        if name in names:
            slot = (name, dict(labels).get("endpoint"))
            increase[slot] = increase.get(slot, 0.0) + value - before.get(key, 0.0)
    out: dict[str, float] = {}
    for (name, endpoint), delta in increase.items():
        if endpoint is None:
            out[name] = delta / max(requests, 1)
        elif endpoint_requests.get(endpoint):
            out[f"{name}[{endpoint}]"] = delta / endpoint_requests[endpoint]
    return out
