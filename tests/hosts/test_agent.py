"""The agent's pure parts: CPU lists, the node's labels and resources, the `ray start`
command, and Ray's token checked before anything starts. Starting real nodes is
tests/lab/test_ray_e2e.py's (its cluster fixture is `hairline agent start`) and
tests/hosts/test_node.py's (`--foreground`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from hairline.cli import main
from hairline.errors import ConfigError
from hairline.hosts.agent import (
    AgentSpec,
    host_names,
    node_labels,
    parse_cpu_list,
    ray_environment,
    ray_start_command,
    resource_name,
    server_type,
)
from hairline.hosts.facts import HostFacts

FACTS = HostFacts(
    hostname="rack4-u12", cpu_model="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", arch="x86_64",
    kernel="6.1.0-13-amd64", turbo="off", governor="performance", cores=64,
    memory_bytes=256 << 30, smt="on",
)  # fmt: skip
# Ray's label syntax (Kubernetes'): what `ray start --labels` accepts.
LABEL_VALUE = re.compile(r"[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?")


def spec(**changes: object) -> AgentSpec:
    values: dict[str, object] = {
        "name": "rack4-u12", "home": Path("/var/lib/hairline-agent"),
        "head_address": "10.0.0.1:6379", "node_ip": "10.0.4.12",
        "host_cpus": ((2, 3, 4, 5),), "housekeeping_cpus": (0, 1), "region": "eu-1",
        "server_type": "PowerEdge R650",
    }  # fmt: skip
    values.update(changes)
    return AgentSpec(**values)  # type: ignore[arg-type]


def test_cpu_lists_are_read_as_the_kernel_writes_them_and_a_bad_one_names_its_flag() -> None:
    assert parse_cpu_list("0-3,8", flag="--cpus") == (0, 1, 2, 3, 8)
    assert parse_cpu_list(" 5 ", flag="--cpus") == (5,)
    for bad in ("", "a-b", "3-x", "-1"):
        with pytest.raises(ConfigError, match="--housekeeping-cpus") as caught:
            parse_cpu_list(bad, flag="--housekeeping-cpus")
        assert "--housekeeping-cpus 2-5" in str(caught.value.hint)


def test_every_fact_becomes_a_label_ray_accepts() -> None:
    labels = node_labels(FACTS, region="eu-1", server="PowerEdge R650 (2021)")
    assert labels["hairline/kernel"] == "6.1.0-13-amd64"
    assert labels["hairline/cpu-model"] == "Intel_R_Xeon_R_Gold_6338_CPU_2.00GHz"
    assert labels["hairline/server-type"] == "PowerEdge_R650_2021"
    assert labels["hairline/memory-gib"] == "256"
    long = node_labels(
        HostFacts.from_dict({"cpu_model": "x" * 80 + " @ ", "kernel": ""}), region="-", server=""
    )
    for value in [*labels.values(), *long.values()]:
        assert LABEL_VALUE.fullmatch(value), value


def test_each_host_is_a_resource_of_one_unit_named_after_it() -> None:
    assert host_names("m1", [(2, 3)]) == ["m1"]
    assert host_names("m1", [(2, 3), (4,)]) == ["m1/cpu2-3", "m1/cpu4"]
    assert resource_name("m1/cpu2-3") == "hairline_host_m1_cpu2_3"
    two = spec(host_cpus=((2, 3), (4, 5)))
    command = ray_start_command(two, FACTS)
    resources = json.loads(command[command.index("--resources") + 1])
    assert resources == {"hairline_host_rack4_u12_cpu2_3": 1, "hairline_host_rack4_u12_cpu4_5": 1}
    assert command[command.index("--num-cpus") + 1] == "4"


def test_a_worker_node_joins_the_head_blocking_with_its_address_labels_and_temp_dir() -> None:
    command = ray_start_command(spec(), FACTS, ray="/opt/venv/bin/ray")
    assert command[:4] == ["/opt/venv/bin/ray", "start", "--address", "10.0.0.1:6379"]
    assert command[command.index("--node-ip-address") + 1] == "10.0.4.12"
    assert "--block" in command and "--head" not in command
    labels = dict(pair.split("=") for pair in command[command.index("--labels") + 1].split(","))
    assert labels["hairline/region"] == "eu-1" and labels["hairline/cpu-arch"] == "x86_64"
    temp = command[command.index("--temp-dir") + 1]
    # Ray's socket paths hang below it, and a Unix socket path has at most 107 bytes.
    assert len(temp) < 40, temp
    head = ray_start_command(spec(head_address=None, head_port=6380), FACTS)
    assert head[head.index("--port") + 1] == "6380" and "--head" in head
    assert head[head.index("--num-cpus") + 1] == "0" and "--labels" not in head
    # A secret has no place on a command line that `ps` shows to every user.
    assert not any("token" in word.lower() for word in command + head)


def test_a_head_port_among_rays_worker_ports_is_refused_before_ray_is_started() -> None:
    with pytest.raises(ConfigError, match="16840 lies in Ray's worker port range") as caught:
        spec(head_address=None, head_port=16840)
    assert "--port 6379" in (caught.value.hint or "")
    # A worker node's --port is unused: only the head listens on it.
    assert spec(head_port=16840).head_port == 16840


def test_the_server_type_is_the_firmware_product_name_or_unknown(tmp_path: Path) -> None:
    assert server_type(tmp_path) == "unknown"
    dmi = tmp_path / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_name").write_text("PowerEdge R650\n")
    assert server_type(tmp_path) == "PowerEdge R650"


def test_token_authentication_is_on_and_needs_a_token_only_its_owner_can_read(
    tmp_path: Path,
) -> None:
    home = {"HOME": str(tmp_path)}
    with pytest.raises(ConfigError, match="no token is set") as caught:
        ray_environment(home)
    assert "RAY_AUTH_TOKEN_PATH" in str(caught.value.hint)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o644)
    with pytest.raises(ConfigError, match="may be read by others") as caught:
        ray_environment({**home, "RAY_AUTH_TOKEN_PATH": str(token)})
    assert f"chmod 600 {token}" in str(caught.value.hint)
    token.chmod(0o600)
    env = ray_environment({**home, "RAY_AUTH_TOKEN_PATH": str(token)})
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(token)
    # Ray's own default file counts, and is held to the same rule.
    default = tmp_path / ".ray" / "auth_token"
    default.parent.mkdir()
    default.write_text("s3cret")
    default.chmod(0o640)
    with pytest.raises(ConfigError, match="default token file"):
        ray_environment(home)
    assert ray_environment({**home, "RAY_AUTH_TOKEN": "s3cret"})["RAY_AUTH_MODE"] == "token"


def test_authentication_is_off_only_when_asked_and_an_unknown_mode_is_an_error() -> None:
    assert ray_environment({"RAY_AUTH_MODE": "disabled"})["RAY_AUTH_MODE"] == "disabled"
    with pytest.raises(ConfigError, match="RAY_AUTH_MODE='tokens'"):
        ray_environment({"RAY_AUTH_MODE": "tokens"})


def test_a_heartbeat_is_for_an_agent_that_stays_in_the_foreground() -> None:
    result = CliRunner().invoke(
        main, ["agent", "start", "--address", "10.0.0.1:6379", "--heartbeat-s", "5"]
    )
    assert result.exit_code == 2
    assert "--heartbeat-s is for an agent that stays: add --foreground" in result.output
