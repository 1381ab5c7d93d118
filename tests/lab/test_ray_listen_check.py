"""`hairline run --check --backend ray` catches a start command that a test machine cannot
reach: one that binds a loopback address, or names no {host} (the sample service then
listens on 127.0.0.1, and its health check at the machine's address got no answer, #31).
The bundled examples' experiment files pass it; the local backend asks nothing of {host}."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from hairline.cli import main

ROOT = Path(__file__).parents[2]
SAMPLE = ROOT / "examples" / "sample-service"
START = "{engine} sample-service --host {host} --port {port} --warmup-s 1"


def experiment(tmp_path: Path, start: str, arm_args: str = "") -> Path:
    for name in ("experiment.toml", "trace.jsonl"):
        shutil.copy(SAMPLE / name, tmp_path / name)
    (tmp_path / "service.toml").write_text(f'[service]\nname = "svc"\nstart = "{start}"\n')
    path = tmp_path / "experiment.toml"
    if arm_args:
        path.write_text(path.read_text().replace('args = ["--regress-cpu", "0.05"]', arm_args))
    return path


def check(path: Path, *backend: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, ["run", str(path), "--check", *backend])
    return done.exit_code, done.output


@pytest.mark.parametrize(
    ("start", "arm_args", "said"),
    [
        (START.replace("{host}", "127.0.0.1"), "", "listens on 127.0.0.1 ('127.0.0.1')"),
        (START.replace("--host {host}", "--listen=localhost:{port}"), "",
         "listens on localhost ('--listen=localhost:{port}')"),
        (START, 'args = ["--bind", "[::1]:9000"]', "listens on [::1] ('[::1]:9000')"),
        (START.replace("--host {host} ", ""), "", "the start command names no {host}"),
    ],
    ids=["literal", "flag=value", "in an arm's args", "no host at all"],
)  # fmt: skip
def test_a_start_command_a_test_machine_cannot_reach_is_refused_on_ray(
    tmp_path: Path, start: str, arm_args: str, said: str
) -> None:
    path = experiment(tmp_path, start, arm_args)
    code, output = check(path, "--backend", "ray")
    assert code == 2, output
    assert f"{path}:" in output and said in output
    assert 'e.g. "--host {host}"' in output
    local_code, local_output = check(path)
    assert local_code == 0, local_output


@pytest.mark.parametrize(
    "start", [START, START.replace("--host {host}", "--host 0.0.0.0")], ids=["{host}", "0.0.0.0"]
)
def test_a_start_command_on_host_or_every_address_passes_on_ray(tmp_path: Path, start: str) -> None:
    code, output = check(experiment(tmp_path, start), "--backend", "ray")
    assert code == 0, output


@pytest.mark.parametrize(
    "example",
    ["sample-service/experiment.toml", "sample-service/three-sided.toml",
     "nginx-gzip/experiment.toml", "nginx-config/experiment.toml",
     "nginx-config/experiment-quarter.toml",
     "suggest/experiment.toml"],
)  # fmt: skip
def test_the_bundled_examples_listen_on_host(example: str) -> None:
    code, output = check(ROOT / "examples" / example, "--backend", "ray")
    assert code == 0, output


def test_the_routing_example_is_refused_on_ray_with_the_reason() -> None:
    """Its fleet's HAProxy listens on 127.0.0.1 only: a local-backend example (docs/routing.md)."""
    code, output = check(ROOT / "examples" / "routing" / "experiment.toml", "--backend", "ray")
    assert code == 2 and "names no {host}" in output
