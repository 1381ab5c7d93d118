"""The dashboard's pages, rendered on the server."""

from __future__ import annotations

from fastapi import FastAPI

__all__ = ["install"]


def install(app: FastAPI) -> None:
    """Add the pages' routes (and the 401 page for browsers) to ``app``."""
