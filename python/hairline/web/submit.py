"""An experiment submitted over the HTTP API: its files written into a folder of their own
and read by the CLI's loader, then held to what the API allows.

The API runs nothing an admin has not registered: the service's start and build commands
must be registered for the service (web/commands.py), word for word; an arm's or the
service's environment may set only keys on an allowlist (:data:`DEFAULT_ENV`, and the keys an
admin registered for the service), and never one that chooses which program runs or what
it loads (``PATH``, ``LD_*``, ``PYTHON*``, ...); every file an experiment names (service
file, trace, an arm's folder or repository) must be inside its submission folder. Arm
``args`` are appended to the registered command as arguments, never read by a shell.

Every problem is a :class:`~hairline.errors.ConfigError` whose ``problems`` name file, line
and field: the loader's in one round, the ones about the service file in a second round
once it has been read (a command cannot be judged before the file parses).
"""

from __future__ import annotations

import re
import shutil
import tomllib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hairline.config import ExperimentConfig, Report
from hairline.config.load import FieldProblems
from hairline.errors import ConfigError, Problem
from hairline.lab.files import load_experiment_file

__all__ = [
    "DEFAULT_ENV",
    "EXPERIMENT_FILE",
    "MAX_FILES",
    "Accepted",
    "check_file_names",
    "env_key_problem",
    "env_key_refused",
    "problems_of",
    "read_submission",
]

EXPERIMENT_FILE = "experiment.toml"
MAX_FILES = 64
# The environment keys any submitted experiment may set: each tunes a runtime (threads,
# heap, time zone, logging) and none names a program, a library, a path searched for code
# or options handed to a compiler or an interpreter. An allowlist, not a denylist: a list
# of dangerous keys is never complete (BASH_FUNC_x%%, RUSTC_WRAPPER, GOFLAGS, CC,
# MAKEFLAGS, _JAVA_OPTIONS, CLASSPATH, NODE_PATH, GIT_SSH_COMMAND and GLIBC_TUNABLES all got
# past the old one). An admin adds a service's own keys (`hairline service register NAME
# --env KEY`).
DEFAULT_ENV = frozenset(
    {"TZ", "LANG", "LC_ALL", "GOMAXPROCS", "GOGC", "GOMEMLIMIT", "MALLOC_ARENA_MAX",
     "OMP_NUM_THREADS", "RAYON_NUM_THREADS", "TOKIO_WORKER_THREADS", "UV_THREADPOOL_SIZE",
     "RUST_LOG", "RUST_BACKTRACE", "NODE_ENV"}
)  # fmt: skip
# Keys no admin may allow either: they choose the program, its libraries or its
# interpreter's code, so allowing one would let every submitter run code of their own.
_REFUSED_ENV = frozenset(
    {"PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS", "NODE_OPTIONS", "NODE_PATH", "RUBYOPT",
     "RUBYLIB", "PERL5OPT", "PERL5LIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
     "JDK_JAVA_OPTIONS", "CLASSPATH", "GCONV_PATH", "GLIBC_TUNABLES", "CC", "CXX", "LD",
     "CFLAGS", "CXXFLAGS", "LDFLAGS", "RUSTFLAGS", "RUSTC", "RUSTC_WRAPPER", "GOFLAGS",
     "MAKEFLAGS", "MFLAGS", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "HOME", "TMPDIR"}
)  # fmt: skip
_REFUSED_ENV_PREFIXES = ("LD_", "DYLD_", "PYTHON", "BASH_FUNC_", "CARGO_", "GIT_CONFIG")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_REGISTER_HINT = "ask an admin to register it: `hairline service register {service} --{kind} '...'`"


@dataclass(frozen=True)
class Accepted:
    """A submission that passed: its folder and its experiment, read as the CLI reads it."""

    folder: Path
    config: ExperimentConfig


def env_key_refused(key: str) -> bool:
    """Whether ``key`` may never be set by a submission, even with an admin's leave."""
    upper = key.upper()
    return (
        upper in _REFUSED_ENV
        or upper.startswith(_REFUSED_ENV_PREFIXES)
        or _ENV_KEY.fullmatch(key) is None
    )


def env_key_problem(key: str, allowed: frozenset[str]) -> str | None:
    """Why a submission may not set ``key`` (``None`` when it may): ``allowed`` are the
    keys an admin registered for the service, on top of :data:`DEFAULT_ENV`."""
    if env_key_refused(key):
        return f"{key} would change what runs"
    if key in DEFAULT_ENV or key in allowed:
        return None
    return f"{key} is not an environment key this service's submissions may set"


def check_file_names(names: list[str]) -> list[str]:
    """Why each unacceptable file name is refused (empty when all are fine). Files are
    flat: one folder, names without a path."""
    refused = []
    if len(names) > MAX_FILES:
        refused.append(f"{len(names)} files: at most {MAX_FILES} are accepted")
    for name in names:
        if name == EXPERIMENT_FILE:
            refused.append(f"{name!r}: the experiment is the body's 'experiment' field")
        elif not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
            refused.append(f"{name!r}: a file name without '/' or '..' (files are one folder)")
        elif name.startswith("."):
            refused.append(f"{name!r}: a file name not starting with '.'")
    return refused


def read_submission(
    root: Path,
    experiment: str,
    files: Mapping[str, str],
    registered: Callable[[str], frozenset[tuple[str, str]]],
) -> Accepted:
    """Write the files into a new folder under ``root`` and read the experiment with every
    check. ``registered(service)`` gives the service's registered ``(kind, command)``
    pairs. A refused submission's folder is removed."""
    refused = check_file_names(list(files))
    if refused:
        problems = FieldProblems()
        for reason in refused:
            problems.add("files", None, "files", reason, "rename or leave out that file")
        raise _without_folder(problems.error(Path(EXPERIMENT_FILE)), root)
    folder = root / uuid.uuid4().hex
    folder.mkdir(parents=True)
    try:
        for name, text in files.items():
            (folder / name).write_text(text)
        path = folder / EXPERIMENT_FILE
        path.write_text(experiment)
        _service_file_inside(path, folder)
        checks = (_inside_folder_and_env(folder, registered),)
        config = load_experiment_file(path, checks=checks)
        _service_allowed(config, path, registered(config.service.name))
    except ConfigError as err:
        shutil.rmtree(folder, ignore_errors=True)
        raise _without_folder(err, folder) from None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Accepted(folder=folder, config=config)


def _without_folder(err: ConfigError, folder: Path) -> ConfigError:
    """The error as its submitter wrote the files: names, not this server's paths."""
    where = str(folder.resolve()) + "/"

    def plain(text: str) -> str:
        return text.replace(where, "").replace(str(folder) + "/", "")

    problems = tuple(
        Problem(file=plain(p.file), line=p.line, field=p.field, message=plain(p.message),
                fix=plain(p.fix))
        for p in err.problems
    )  # fmt: skip
    count = len(problems)
    return ConfigError(
        f"the submission has {count} problem{'s' if count != 1 else ''}"
        if problems
        else plain(err.message),
        hint="fix each problem listed; `hairline run --check FILE` checks the same locally",
        problems=problems,
    )


def _inside(folder: Path, relative: str) -> bool:
    return (folder / relative).resolve().is_relative_to(folder.resolve())


def _service_file_inside(path: Path, folder: Path) -> None:
    """Refuse a service file outside the folder before the loader opens it."""
    try:
        named = tomllib.loads(path.read_text()).get("service")
    except tomllib.TOMLDecodeError:
        return  # the loader reports it, with every other problem
    if isinstance(named, str) and not _inside(folder, named):
        problems = FieldProblems()
        problems.at(
            path, path.read_text(), ("service",), f"{named!r} is outside the submission",
            "send the service file in 'files' and name it, e.g. \"service.toml\"",
        )  # fmt: skip
        raise problems.error(path)


def _inside_folder_and_env(
    folder: Path, registered: Callable[[str], frozenset[tuple[str, str]]]
) -> Callable[[ExperimentConfig, Path, Report], None]:
    """The loader's extra check: what the experiment file names stays in ``folder``, and
    each arm's environment keys are allowed for the service."""

    def check(config: ExperimentConfig, path: Path, report: Report) -> None:
        allowed = _env_allowed(registered(config.service.name))
        if not _inside(folder, config.trace):
            report(("trace",), f"{config.trace!r} is outside the submission",
                   "send the trace in 'files' and name it, e.g. \"trace.jsonl\"")  # fmt: skip
        suggest = config.suggest
        if suggest is not None:
            named = [("repo", suggest.repo)]
            named += [("profiles", p) for p in suggest.profiles]
            for key, named_path in named:
                if not _inside(folder, named_path):
                    report(("suggest", key), f"{named_path!r} is outside the submission",
                           "send the file in 'files' and name it by its file name")  # fmt: skip
        for name, arm in config.arms.items():
            for field, value in (("path", arm.path), ("repo", arm.repo)):
                if value is not None and not _inside(folder, value):
                    report(("arms", name, field), f"{value!r} is outside the submission",
                           "send the arm's files in 'files' and write path = \".\"")  # fmt: skip
            for key in arm.env:
                problem = env_key_problem(key, allowed)
                if problem is not None:
                    report(("arms", name, "env", key), problem,
                           _env_fix(key, config.service.name))  # fmt: skip

    return check


def _env_allowed(registered: frozenset[tuple[str, str]]) -> frozenset[str]:
    return frozenset(command for kind, command in registered if kind == "env")


def _service_allowed(
    config: ExperimentConfig, path: Path, registered: frozenset[tuple[str, str]]
) -> None:
    """The service's commands are registered and its environment leaves them alone."""
    service = config.service
    file = Path(service.root) / _service_file_name(path)
    text = file.read_text() if file.is_file() else ""
    if not text:
        file, text = path, path.read_text()
    nested = "service" in tomllib.loads(text)
    prefix: tuple[str, ...] = ("service",) if nested else ()
    problems = FieldProblems()
    wanted = [("start", service.start, (*prefix, "start"))]
    if service.build.command is not None:
        wanted.append(("build", service.build.command, (*prefix, "build", "command")))
    for kind, command, loc in wanted:
        if (kind, command) not in registered:
            problems.at(file, text, loc,
                        f"{command!r} is not a registered {kind} command of {service.name!r}",
                        _REGISTER_HINT.format(service=service.name, kind=kind))  # fmt: skip
    for key in service.env:
        problem = env_key_problem(key, _env_allowed(registered))
        if problem is not None:
            problems.at(file, text, (*prefix, "env", key), problem,
                        _env_fix(key, service.name))  # fmt: skip
    if problems:
        raise problems.error(file)


def _env_fix(key: str, service: str) -> str:
    if env_key_refused(key):
        return "leave it out: the API runs registered commands only"
    return (
        f"leave it out, or ask an admin to allow it: `hairline service register {service} "
        f'--env {key}` (docs/dashboard.md, "What a submission may run")'
    )


def _service_file_name(path: Path) -> str:
    named = tomllib.loads(path.read_text()).get("service")
    return named if isinstance(named, str) else path.name


def problems_of(err: ConfigError) -> list[dict[str, object]]:
    """The error's problems as JSON objects (its message as one problem when it has none)."""
    if not err.problems:
        return [{"file": None, "line": None, "field": None, "message": err.message,
                 "fix": err.hint}]  # fmt: skip
    return [
        {"file": p.file, "line": p.line, "field": p.field, "message": p.message, "fix": p.fix}
        for p in err.problems
    ]
