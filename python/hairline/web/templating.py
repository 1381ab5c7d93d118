"""The pages' Jinja2 environment (autoescaped: every value is escaped unless it is our own
server-rendered SVG or report HTML, passed as ``Markup``), its filters, and the one call
that renders a page for a principal."""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from hairline.web.auth import Principal

__all__ = ["Markup", "environment", "page", "percent", "teams_of", "when"]

# app.TEMPLATES names the same folder; importing it would make app and the pages a cycle.
TEMPLATES = Path(__file__).parent / "templates"


def when(at: float | None) -> str:
    """A Unix time as the pages print it (UTC, to the second)."""
    if at is None:
        return "–"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S")


def percent(fraction: float | None, signed: bool = True) -> str:
    """A fraction as a percentage with two decimals (``+1.25%``), "–" when absent."""
    if fraction is None or not math.isfinite(fraction):
        return "–"
    return f"{fraction * 100:+.2f}%" if signed else f"{fraction * 100:.2f}%"


def teams_of(who: Principal) -> Collection[str] | None:
    """The teams whose experiments ``who`` sees; None for every team (an admin)."""
    return None if who.admin else (who.team,)


environment = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
environment.filters["when"] = when
environment.filters["percent"] = percent


def page(
    request: Request, name: str, who: Principal | None, *, status_code: int = 200, **context: Any
) -> HTMLResponse:
    """Render the template ``name`` for ``who`` (None on the login page)."""
    text = environment.get_template(name).render(request=request, who=who, **context)
    return HTMLResponse(text, status_code=status_code)
