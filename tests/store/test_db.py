"""The lab's database opens, migrates to the models' schema, and says clearly what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select

from hairline.errors import ConfigError
from hairline.store.db import open_store
from hairline.store.models import Base, Service


def test_migrations_build_exactly_the_models_schema(db_url: str, tmp_path: Path) -> None:
    store = open_store(db_url, home=tmp_path / "home")
    try:
        with store.engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        assert differences == []
        assert "experiments" in inspect(store.engine).get_table_names()
    finally:
        store.close()


def test_opening_twice_keeps_the_data(db_url: str, tmp_path: Path) -> None:
    first = open_store(db_url, home=tmp_path / "home")
    with first.transaction() as session:
        session.add(Service(name="feed", created_at=1.0))
    first.close()
    second = open_store(db_url, home=tmp_path / "home")
    with second.transaction() as session:
        assert session.scalars(select(Service.name)).all() == ["feed"]
    second.close()


def test_a_bad_url_is_a_config_error_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a database URL") as err:
        open_store("not a url", home=tmp_path)
    assert err.value.hint is not None and "sqlite:///" in err.value.hint


def test_an_unreachable_server_is_named(tmp_path: Path) -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    with pytest.raises(ConfigError, match="cannot open the database"):
        open_store("postgresql://nobody@127.0.0.1:1/none", home=tmp_path)
