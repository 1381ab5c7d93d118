"""What the tuning tests share: the sample service's tuning file, and a SQLite store at the
newest schema for the tests that read the tuning tables (tests/conftest.py's ``store`` runs
each test on SQLite and PostgreSQL; these need one real database, not both)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hairline.store.db import Store, open_store
from hairline.tune.config import TuningSpec, load_tuning_file

TUNE_FILE = Path(__file__).resolve().parents[2] / "examples" / "sample-service" / "tune.toml"


@pytest.fixture
def spec() -> TuningSpec:
    return load_tuning_file(TUNE_FILE)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'hairline.db'}", home=tmp_path / "home")
    yield s
    s.close()
