"""Open the lab's database: SQLite in ``.hairline/`` by default, any SQLAlchemy URL with
``--db``, ``$HAIRLINE_DB`` or a private file named by ``$HAIRLINE_DB_FILE`` (PostgreSQL for a
lab of several machines). Opening migrates to the newest schema.

SQLite is put in WAL mode with a busy timeout so that several processors on one machine
(``hairline lab process`` next to ``hairline run``) can share it; every state change is a
short transaction.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from hairline.errors import ConfigError
from hairline.kit.secretfiles import secret_from_env

__all__ = [
    "DEFAULT_HOME",
    "SCHEMA_HEAD",
    "Store",
    "default_url",
    "open_store",
    "pairs",
    "url_has_password",
    "url_shown",
]

DEFAULT_HOME = Path(".hairline")
_MIGRATIONS = Path(__file__).parent / "migrations"
# The newest migration's revision (tests/store/test_db.py checks it against the scripts'):
# a database already there is not handed to alembic, whose import and script loading cost
# 0.6 s of every command's 4 s start (2026-11-28).
SCHEMA_HEAD = "0008"
# Any constant works; it only has to be the same for every hairline process.
_PG_MIGRATION_LOCK = 0x6861_6972
# A pooled server connection unused for this long is pinged before it is handed out (a
# server restart or an idle timeout may have closed it meanwhile). One used more recently
# is not: pinging at every checkout cost a round trip per transaction, a fifth of a busy
# processor's round trips (bench/control).
PING_IDLE_S = 1.0


def default_url(home: Path = DEFAULT_HOME) -> str:
    """``$HAIRLINE_DB`` if set, else the URL in the file ``$HAIRLINE_DB_FILE`` names (mode
    0600: the URL may hold a password, and a command line is no place for one), else
    SQLite at ``home/hairline.db``."""
    url = secret_from_env("HAIRLINE_DB", "HAIRLINE_DB_FILE", what="database URL")
    if url:
        return url
    return f"sqlite:///{(home / 'hairline.db').resolve()}"


# "scheme://user:secret@": the password of a URL SQLAlchemy cannot parse, to hide it anyway.
_PASSWORD = re.compile(r"(://[^/:@]*):[^/@]*@")


def url_shown(url: str) -> str:
    """``url`` as it may be printed, logged or sent: its password, if any, as ``***``. The
    URL may come from a private file (``$HAIRLINE_DB_FILE``) whose point is that nobody else
    reads the password; a CI log or a JSON event must not undo that."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return _PASSWORD.sub(r"\1:***@", url)


def url_has_password(url: str) -> bool:
    """Whether ``url`` carries a password."""
    try:
        return make_url(url).password is not None
    except ArgumentError:
        return _PASSWORD.search(url) is not None


@dataclass
class Store:
    """The database and where experiments keep their files."""

    url: str
    engine: Engine
    sessions: sessionmaker[Session]
    home: Path

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def shown_url(self) -> str:
        """The URL with its password hidden: the one to print (:func:`url_shown`)."""
        return url_shown(self.url)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        with self.sessions.begin() as session:
            yield session

    @contextlib.contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection on which each statement commits by itself: for a single
        compare-and-set or a read, which then costs no BEGIN and COMMIT round trips."""
        with self.engine.connect() as connection:
            yield connection.execution_options(isolation_level="AUTOCOMMIT")

    def close(self) -> None:
        self.engine.dispose()


def open_store(
    url: str | None = None, *, home: Path = DEFAULT_HOME, read_only: bool = False
) -> Store:
    """Connect to ``url`` (default :func:`default_url`) and migrate it to the newest schema.

    ``read_only`` (the commands that only list or show): the database must exist and be at
    the newest schema; nothing is created, migrated or written (SQLite opened without
    creating the file and with ``query_only``, PostgreSQL in read-only transactions), so
    that listing a shared lab from a laptop changes nothing in it."""
    url = url or default_url(home)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError(
            f"{url_shown(url)!r} is not a database URL",
            hint="use sqlite:///path/to/hairline.db or postgresql+psycopg://user@host/db",
        ) from None
    options: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if read_only:
            parsed = _sqlite_existing(parsed, url)
        elif database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        options["connect_args"] = {"timeout": 30}
    elif parsed.get_backend_name() == "postgresql":
        if parsed.drivername == "postgresql":
            # psycopg 3 is the driver hairline installs; plain postgresql:// means it.
            parsed = parsed.set(drivername="postgresql+psycopg")
        if read_only:
            options["connect_args"] = {"options": "-c default_transaction_read_only=on"}
    try:
        engine = create_engine(parsed, **options)
    except Exception as err:  # a missing driver, a bad option
        raise ConfigError(f"{url_shown(url)!r}: {err}", hint="check the database URL") from None
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
        if read_only:
            event.listen(engine, "connect", _sqlite_query_only)
    else:
        _ping_when_idle(engine)
    try:
        if read_only:
            _check_head(engine, url)
        else:
            home.mkdir(parents=True, exist_ok=True)
            _migrate(engine, home)
    except OperationalError as err:
        engine.dispose()
        raise ConfigError(
            f"cannot open the database {url_shown(url)}: {str(err.orig).strip()}",
            hint="check that the server runs and the URL (user, host, database) is right",
        ) from None
    except ConfigError:
        engine.dispose()
        raise
    return Store(
        url=url,
        engine=engine,
        sessions=sessionmaker(engine, expire_on_commit=False),
        home=home.resolve(),
    )


_NO_LAB_HINT = (
    "a lab's database is made by its first `hairline run`, `hairline lab process` or "
    "`hairline serve`; to read another lab's, give --db URL or set $HAIRLINE_DB, or "
    "$HAIRLINE_DB_FILE to a file holding the URL (docs/scale-out.md)"
)


def _sqlite_existing(parsed: URL, url: str) -> URL:
    """The SQLite URL opened read-write but never created (``mode=rw``: a missing file is
    an error, not an empty new database)."""
    database = parsed.database or ""
    if not database or database == ":memory:" or not Path(database).is_file():
        raise ConfigError(f"no lab database at {url_shown(url)}", hint=_NO_LAB_HINT)
    path = quote(str(Path(database).resolve()))
    return parsed.set(database=f"file:{path}", query={"mode": "rw", "uri": "true"})


def _sqlite_query_only(dbapi_connection: Any, _record: Any) -> None:
    # After _sqlite_pragmas: a statement that would write raises instead. Read-write mode
    # (not mode=ro) lets the last connection to close remove the -wal and -shm files.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA query_only=ON")
    cursor.close()


def _check_head(engine: Engine, url: str) -> None:
    if not _at_head(engine):
        raise ConfigError(
            f"the database {url_shown(url)} is not at this hairline's schema ({SCHEMA_HEAD}); "
            "a command that only reads does not migrate it",
            hint="a command that writes (`hairline lab process`, `hairline serve`) brings a "
            "lab's database to the newest schema; a file that is not a lab's: check --db, "
            "--home, $HAIRLINE_DB and $HAIRLINE_DB_FILE",
        )


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection at checkout when it has been idle PING_IDLE_S or more; a
    dead one is replaced (the pool retries the checkout on DisconnectionError)."""

    def checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as err:
            raise DisconnectionError(f"a pooled connection was closed: {err}") from err

    event.listen(engine, "checkin", checkin)
    event.listen(engine, "checkout", checkout)


def _at_head(engine: Engine) -> bool:
    """Whether the database's schema is the newest (a fresh one has no version table)."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return False
        versions = connection.execute(text("SELECT version_num FROM alembic_version"))
        return list(versions.scalars()) == [SCHEMA_HEAD]


def _migrate(engine: Engine, home: Path) -> None:
    if _at_head(engine):
        return
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with contextlib.ExitStack() as stack:
        if engine.dialect.name == "sqlite":
            # Two processes opening a fresh database at once must not both create tables.
            lock = stack.enter_context((home / ".migrate.lock").open("w"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        with engine.begin() as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK}
                )
            config.attributes["connection"] = connection
            command.upgrade(config, "head")


def pairs(result: Any) -> dict[Any, Any]:
    """A two-column query result (key, value) as a dict."""
    return {key: value for key, value in result}
