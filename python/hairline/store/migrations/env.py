"""Alembic environment: hairline runs migrations itself (``hairline.store.db``), always on a
connection it opened, so there is no ini file and no offline mode."""

from __future__ import annotations

from alembic import context

from hairline.store.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
