"""web/submit's environment allowlist, on submissions read as the API reads them (no
server: ``read_submission`` with a registry given as a function)."""

from __future__ import annotations

from pathlib import Path

import pytest
from weblab import SERVICE, START, experiment_toml, service_toml, submission

from hairline.errors import ConfigError, HairlineError
from hairline.store.db import Store
from hairline.web.commands import register_command, registered_set
from hairline.web.submit import DEFAULT_ENV, Accepted, env_key_problem, read_submission
from schema_check import check_toml

# The keys a security review found accepted by the old denylist (issue 28), and the usual.
DANGEROUS = [
    "BASH_FUNC_make%%", "RUSTC_WRAPPER", "GOFLAGS", "CC", "MAKEFLAGS", "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS", "CLASSPATH", "RUBYLIB", "NODE_PATH", "GIT_SSH_COMMAND",
    "GLIBC_TUNABLES", "LD_PRELOAD", "PYTHONPATH", "PATH", "cargo_home",
]  # fmt: skip


def registry(*env_keys: str) -> frozenset[tuple[str, str]]:
    return frozenset({("start", START), *(("env", key) for key in env_keys)})


def read(
    tmp_path: Path, *, arm_env: str = "", service_env: str = "", allowed: tuple[str, ...] = ()
) -> Accepted:
    body = submission(
        experiment_toml(b_args=f"env = {{ {arm_env} }}" if arm_env else ""),
        service=service_toml(extra=f"env = {{ {service_env} }}" if service_env else ""),
    )
    return read_submission(tmp_path / "submissions", body["experiment"], body["files"],
                           lambda _service: registry(*allowed))  # fmt: skip


@pytest.mark.parametrize("key", DANGEROUS)
def test_every_key_the_review_found_is_refused_even_with_an_admins_leave(key: str) -> None:
    assert env_key_problem(key, frozenset()) == f"{key} would change what runs"
    assert env_key_problem(key, frozenset({key})) == f"{key} would change what runs"


def test_a_key_off_the_allowlist_is_refused_until_an_admin_allows_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        read(tmp_path, arm_env='SHOP_WORKERS = "4"', service_env='GOMAXPROCS = "2"')
    [problem] = caught.value.problems
    assert problem.field == "arms.B.env.SHOP_WORKERS" and problem.line is not None
    assert "not an environment key this service's submissions may set" in problem.message
    assert f"hairline service register {SERVICE} --env SHOP_WORKERS" in problem.fix
    assert not any((tmp_path / "submissions").iterdir())  # a refused submission leaves nothing

    accepted = read(tmp_path, arm_env='SHOP_WORKERS = "4"', service_env='GOMAXPROCS = "2"',
                    allowed=("SHOP_WORKERS",))  # fmt: skip
    assert accepted.config.arms["B"].env == {"SHOP_WORKERS": "4"}
    assert "GOMAXPROCS" in DEFAULT_ENV


def test_a_refused_key_in_the_service_file_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        read(tmp_path, service_env='RUSTC_WRAPPER = "/tmp/x"', allowed=("RUSTC_WRAPPER",))
    [problem] = caught.value.problems
    assert problem.file == "service.toml" and problem.field == "service.env.RUSTC_WRAPPER"
    assert "leave it out" in problem.fix


def test_an_admin_may_allow_a_services_key_but_not_one_that_chooses_the_code(
    store: Store,
) -> None:
    assert register_command(store, service="shop", kind="env", command="SHOP_WORKERS",
                            actor="admin")  # fmt: skip
    assert ("env", "SHOP_WORKERS") in registered_set(store, "shop")
    for key in ("LD_PRELOAD", "GOFLAGS", "BASH_FUNC_x%%", "A B"):
        with pytest.raises(HairlineError, match="cannot be allowed") as caught:
            register_command(store, service="shop", kind="env", command=key, actor="admin")
        assert "--env WORKERS" in (caught.value.hint or "")
    assert registered_set(store, "shop") == {("env", "SHOP_WORKERS")}


def test_the_suggest_tables_files_stay_inside_the_submission(tmp_path: Path) -> None:
    body = submission(experiment_toml() + '\n[suggest]\nprofiles = ["/etc/shadow"]\n')
    with pytest.raises(ConfigError) as caught:
        read_submission(tmp_path / "s", body["experiment"], body["files"],
                        lambda _service: registry())  # fmt: skip
    [problem] = caught.value.problems
    assert problem.field == "suggest.profiles" and "'/etc/shadow' is outside" in problem.message


def test_the_files_the_web_tests_submit_validate_against_their_schemas(tmp_path: Path) -> None:
    """docs/schema/experiment.json and service.json accept what these tests submit."""
    for kind, text in (
        ("experiment", experiment_toml(b_args='args = ["--regress-cpu", "0.10"]')),
        ("service", service_toml(extra='env = { RUST_LOG = "warn" }')),
    ):
        path = tmp_path / f"{kind}.toml"
        path.write_text(text)
        check_toml(kind, path)
