"""Secrets from the environment or from a file only its owner can read.

The database URL (with its password) and Ray's cluster token must never be command-line
arguments: any user of the machine reads those in ``ps``. They come from an environment
variable, or from a file whose path an environment variable names; such a file is refused
when its group or others may read or write it, so that a careless ``chmod`` cannot leak
the secret to every user of a shared test machine.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from hairline.errors import ConfigError

__all__ = ["check_private", "read_secret_file", "secret_from_env"]


def check_private(path: Path, *, what: str, variable: str) -> None:
    """Raise :class:`ConfigError` unless ``path`` is a regular file that only its owner
    may read or write (mode 0600 or 0400)."""
    try:
        info = path.stat()
    except OSError as err:
        raise ConfigError(
            f"{variable}={path}: cannot read the {what} file: {err.strerror}",
            hint=f"write the {what} into {path} and `chmod 600 {path}`, or unset {variable}",
        ) from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            f"{variable}={path} is not a regular file",
            hint=f"point {variable} at a file that holds only the {what}",
        )
    loose = stat.S_IMODE(info.st_mode) & 0o077
    if loose:
        raise ConfigError(
            f"{variable}={path}: the {what} file may be read by others "
            f"(mode {stat.S_IMODE(info.st_mode):04o})",
            hint=f"`chmod 600 {path}`: a secret readable by other users of the machine is refused",
        )


def read_secret_file(path: Path, *, what: str, variable: str) -> str:
    """The secret in ``path`` (surrounding whitespace stripped), after
    :func:`check_private`; an empty file is an error."""
    check_private(path, what=what, variable=variable)
    text = path.read_text().strip()
    if not text:
        raise ConfigError(
            f"{variable}={path}: the {what} file is empty",
            hint=f"write the {what} into {path}",
        )
    return text


def secret_from_env(
    value_variable: str,
    file_variable: str,
    *,
    what: str,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """``$value_variable`` if set, else the content of the file ``$file_variable`` names
    (checked by :func:`read_secret_file`), else None."""
    env = os.environ if environ is None else environ
    value = env.get(value_variable)
    if value:
        return value
    file_name = env.get(file_variable)
    if file_name:
        return read_secret_file(Path(file_name), what=what, variable=file_variable)
    return None
