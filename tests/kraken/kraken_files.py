"""Kraken test files for the tests, in the shape of the TOML they become, against the
session's fleet (tests/conftest.py ``kraken_fleet``)."""

from __future__ import annotations

from pathlib import Path

from hairline.kraken.fleet import LocalFleet

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kraken"


def served_rate_health(folder: Path, ranges: str, *, window: str = "1s") -> Path:
    """A health file with one metric: the requests/s the servers under test answer. It grows
    with the share as nothing else does, so a test can place its thresholds exactly."""
    path = folder / "served.toml"
    path.write_text(
        f"""\
[metric.served]
entity = "cluster"
key = 'sum(rate(sample_requests_total{{status="200",endpoint=~"/api/.*"}}[{window}]))'
time_window = "{window}"
sample_fraction = 0.5
level_ranges = {{ {ranges} }}
"""
    )
    return path


def quiet_health(folder: Path) -> Path:
    """Thresholds far above anything the fleet serves: a test that shifts and keeps going."""
    return served_rate_health(
        folder,
        "BOLD = [0, 2000], MODERATE = [2000, 2100], CAUTIOUS = [2100, 2200], "
        "NOMORE = [2200, 2300], BACKOFF = [2300, inf]",
    )


def kraken_file(
    folder: Path,
    fleet: LocalFleet,
    *,
    health: Path,
    kind: str = "cluster",
    servers: tuple[str, ...] = ("web1", "web2", "web3", "web4"),
    start_share: float | None = 0.2,
    socket: Path | None = None,
    extra_test: str = "",
    rate_per_s: float = 1500,
    max_duration_s: float = 60,
    per_server: float | None = None,
) -> Path:
    """A Kraken file with a 1 s control interval, its [lb] and users' URL the fleet's (or,
    for a HAProxy fleet, ``socket``), so that it runs without --local-fleet."""
    path = folder / "kraken.toml"
    lb = fleet.lb_spec
    if lb.kind == "nginx":
        where = f'config = "{lb.config}"\nupstream_file = "{lb.upstream_file}"\n'
    else:
        where = f'socket = "{socket or lb.socket}"\n'

    start = f"start_share = {start_share}\n" if start_share is not None else ""
    if per_server is not None:  # no server test first
        start += f"per_server_capacity_per_s = {per_server}\n"
    names = ", ".join(f'"{s}"' for s in servers)
    path.write_text(
        f"""\
health = "{health}"

[test]
kind = "{kind}"
servers = [{names}]
control_interval_s = 1.0
sample_interval_s = 0.5
max_duration_s = {max_duration_s}
{start}{extra_test}
[lb]
kind = "{lb.kind}"
{where}backend = "{lb.backend}"

[traffic]
rate_per_s = {rate_per_s}
url = "{fleet.frontend_url}"
"""
    )
    return path


def local_fleet_file(folder: Path, *, health: Path, lb: str = "haproxy") -> Path:
    """A Kraken file for ``--local-fleet 4``, which fills in [lb]'s paths and the users'
    URL: no server test first, and ``health`` (quiet: it shifts and keeps going)."""
    path = folder / "kraken.toml"
    path.write_text(
        f"""\
health = "{health}"

[test]
servers = ["web1", "web2", "web3", "web4"]
control_interval_s = 1.0
sample_interval_s = 0.5
max_duration_s = 60
start_share = 0.2
per_server_capacity_per_s = 100

[lb]
kind = "{lb}"
backend = "web"

[traffic]
rate_per_s = 1500
"""
    )
    return path
