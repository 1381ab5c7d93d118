"""The HTTP API, ``/api/v1``: experiments submitted, watched, cancelled and gated."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter(prefix="/api/v1")
