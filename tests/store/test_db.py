"""The lab's database opens, migrates to the models' schema, and says clearly what is wrong."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select, text

from hairline.errors import ConfigError
from hairline.store import db
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


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(db.__file__).parent / "migrations"))
    return config


def test_the_schema_head_is_the_newest_migration() -> None:
    """Opening skips alembic when the database is at SCHEMA_HEAD: a new migration must
    move it, or databases would never be upgraded to it."""
    from alembic.script import ScriptDirectory

    assert ScriptDirectory.from_config(_alembic_config()).get_heads() == [db.SCHEMA_HEAD]


def test_a_database_one_migration_behind_is_upgraded(db_url: str, tmp_path: Path) -> None:
    """A database whose version is not the head goes through alembic (the fast path only
    skips a database already at the head)."""
    from alembic import command

    store = open_store(db_url, home=tmp_path / "home")
    with store.engine.begin() as connection:
        config = _alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, "-1")
    store.close()
    again = open_store(db_url, home=tmp_path / "home")
    try:
        columns = {c["name"] for c in inspect(again.engine).get_columns("tuning_evaluations")}
        assert "candidate_failures" in columns  # 0008's column, back
        with again.engine.connect() as connection:
            version = connection.scalar(text("SELECT version_num FROM alembic_version"))
            assert version == db.SCHEMA_HEAD
    finally:
        again.close()


def test_a_bad_url_is_a_config_error_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a database URL") as err:
        open_store("not a url", home=tmp_path)
    assert err.value.hint is not None and "sqlite:///" in err.value.hint


def test_an_unreachable_server_is_named(tmp_path: Path) -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    with pytest.raises(ConfigError, match="cannot open the database"):
        open_store("postgresql://nobody@127.0.0.1:1/none", home=tmp_path)


def test_a_pooled_connection_the_server_closed_is_replaced_after_an_idle_pause(
    postgres_server: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """False failure: about 1e-4 (not measured): the terminated backend must have exited within the
    0.1 s sleep, which takes it milliseconds; the idle time (0.1 s against 0.05 s) is exact."""
    # A busy processor's connections are not pinged at every checkout (a round trip per
    # transaction); one idle for PING_IDLE_S is, and a dead one is replaced, not an error.
    monkeypatch.setattr(db, "PING_IDLE_S", 0.05)
    store = open_store(postgres_server.new_database(), home=tmp_path)  # type: ignore[attr-defined]
    with store.autocommit() as connection:
        backend_pid = connection.scalar(text("SELECT pg_backend_pid()"))
    killer = open_store(store.url, home=tmp_path)
    with killer.autocommit() as connection:
        assert connection.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": backend_pid})
    time.sleep(0.1)
    with store.transaction() as session:
        session.add(Service(name="after", created_at=0.0))
    with store.autocommit() as connection:
        assert connection.scalar(text("SELECT pg_backend_pid()")) != backend_pid
        assert connection.scalar(select(Service.name)) == "after"
    killer.close()
    store.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://lab:s3cret@db.internal:5432/hairline",
         "postgresql+psycopg://lab:***@db.internal:5432/hairline"),
        ("postgresql://lab@db.internal/hairline", "postgresql://lab@db.internal/hairline"),
        ("sqlite:////var/lib/hairline/hairline.db", "sqlite:////var/lib/hairline/hairline.db"),
        # Not a URL SQLAlchemy parses, and its password is still hidden.
        ("not a scheme://lab:s3cret@host/db", "not a scheme://lab:***@host/db"),
    ],
)  # fmt: skip
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert db.url_shown(url) == shown
    assert db.url_has_password(url) == ("s3cret" in url)


def test_a_store_opened_from_a_private_file_shows_its_url_without_the_password(
    tmp_path: Path,
) -> None:
    # Opening would connect; the URL's rendering needs only the Store.
    engine = db.create_engine("postgresql+psycopg://lab:s3cret@127.0.0.1:1/hairline")
    store = db.Store(url=str(engine.url.render_as_string(hide_password=False)), engine=engine,
                     sessions=db.sessionmaker(engine), home=tmp_path)  # fmt: skip
    assert store.shown_url == "postgresql+psycopg://lab:***@127.0.0.1:1/hairline"
    assert "s3cret" not in store.shown_url


def test_an_unparsable_url_is_named_without_its_password(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("nonsense://lab:s3cret@", home=tmp_path)
    assert "s3cret" not in caught.value.message


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_read_only_open_of_a_missing_sqlite_file_names_it_and_creates_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "lab"
    with pytest.raises(ConfigError, match="no lab database at sqlite:///") as err:
        open_store(home=home, read_only=True)
    assert str(home / "hairline.db") in err.value.message
    assert err.value.hint is not None and "HAIRLINE_DB_FILE" in err.value.hint
    assert not home.exists()


def test_a_read_only_store_reads_and_refuses_to_write(db_url: str, tmp_path: Path) -> None:
    """SQLite: the file and its folder as they were (no -wal or -shm left either);
    PostgreSQL: read-only transactions."""
    from sqlalchemy.exc import DBAPIError

    home = tmp_path / "home"
    writer = open_store(db_url, home=home)
    with writer.transaction() as session:
        session.add(Service(name="feed", created_at=1.0))
    writer.close()
    before = _files(home)
    reader = open_store(db_url, home=home, read_only=True)
    try:
        with reader.transaction() as session:
            assert session.scalars(select(Service.name)).all() == ["feed"]
        with pytest.raises(DBAPIError, match=r"read-?only"), reader.transaction() as session:
            session.add(Service(name="search", created_at=2.0))
    finally:
        reader.close()
    assert _files(home) == before


def test_a_read_only_open_does_not_migrate_an_older_database(db_url: str, tmp_path: Path) -> None:
    from alembic import command

    store = open_store(db_url, home=tmp_path / "home")
    with store.engine.begin() as connection:
        config = _alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, "-1")
    store.close()
    with pytest.raises(ConfigError, match="not at this hairline's schema") as err:
        open_store(db_url, home=tmp_path / "home", read_only=True)
    assert err.value.hint is not None and "`hairline lab process`" in err.value.hint
    again = open_store(db_url, home=tmp_path / "home")  # a writer migrates it, as before
    again.close()
