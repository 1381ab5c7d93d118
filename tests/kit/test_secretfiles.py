"""Secrets come from the environment or a file only its owner may read; the database URL
can be such a file (``HAIRLINE_DB_FILE``), so an agent never needs it on its command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.errors import ConfigError
from hairline.kit.secretfiles import read_secret_file, secret_from_env
from hairline.store.db import default_url


def private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_private_file_is_read_and_a_loose_one_refused_with_the_fix(tmp_path: Path) -> None:
    secret = private(tmp_path / "db", "postgresql://u:pw@db/lab\n")
    assert read_secret_file(secret, what="database URL", variable="X") == "postgresql://u:pw@db/lab"
    for mode in (0o640, 0o604, 0o660):
        secret.chmod(mode)
        with pytest.raises(ConfigError, match=f"mode {mode:04o}") as caught:
            read_secret_file(secret, what="database URL", variable="HAIRLINE_DB_FILE")
        assert f"chmod 600 {secret}" in str(caught.value.hint)
    secret.chmod(0o400)
    assert read_secret_file(secret, what="database URL", variable="X")


def test_a_missing_empty_or_odd_file_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"HAIRLINE_DB_FILE=.*cannot read"):
        read_secret_file(tmp_path / "nope", what="database URL", variable="HAIRLINE_DB_FILE")
    with pytest.raises(ConfigError, match="is empty"):
        read_secret_file(private(tmp_path / "e", " \n"), what="x", variable="V")
    with pytest.raises(ConfigError, match="not a regular file"):
        read_secret_file(tmp_path, what="x", variable="V")


def test_the_variable_wins_over_the_file_and_neither_means_none(tmp_path: Path) -> None:
    secret = private(tmp_path / "s", "from-file")
    env = {"V_FILE": str(secret)}
    assert secret_from_env("V", "V_FILE", what="x", environ=env) == "from-file"
    assert secret_from_env("V", "V_FILE", what="x", environ={**env, "V": "direct"}) == "direct"
    assert secret_from_env("V", "V_FILE", what="x", environ={}) is None


def test_the_database_url_comes_from_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'lab.db'}"
    monkeypatch.delenv("HAIRLINE_DB", raising=False)
    monkeypatch.setenv("HAIRLINE_DB_FILE", str(private(tmp_path / "db-url", url)))
    assert default_url(tmp_path) == url
    (tmp_path / "db-url").chmod(0o644)
    with pytest.raises(ConfigError, match="HAIRLINE_DB_FILE"):
        default_url(tmp_path)
    monkeypatch.delenv("HAIRLINE_DB_FILE")
    assert default_url(tmp_path) == f"sqlite:///{(tmp_path / 'hairline.db').resolve()}"
