"""Periodic A/A runs (``[aa] every`` in a service file): which are due, enqueued."""

from __future__ import annotations

from hairline.store.db import Store

__all__ = ["enqueue_due"]


def enqueue_due(store: Store) -> list[int]:
    """Enqueue every due periodic A/A run; the new experiments' ids."""
    return []
