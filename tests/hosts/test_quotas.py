"""What each team holds, as the claim order reads it: hosts held are read at most once a
HELD_TTL_S per process (a scan of every held host), this process's own allocations count
at once, and experiments on their way to hosts are read at every claim."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_inventory import FakeClock, _experiments, _machines, _ray

from hairline.hosts import quotas
from hairline.hosts.inventory import Allocation
from hairline.hosts.quotas import set_quota, team_usage
from hairline.store.db import Store, open_store
from hairline.store.models import Host


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Store:
    s = open_store(db_url, home=tmp_path / "home")
    yield s  # type: ignore[misc]
    s.close()


def _usage(store: Store, now: float) -> quotas.TeamUsage:
    with store.autocommit() as connection:
        return team_usage(store, connection, now, teams=["t", "other"])


def test_hosts_held_are_read_once_a_ttl_and_this_processs_allocations_count_at_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quotas, "HELD_TTL_S", 3600.0)
    set_quota(store, "t", 10)
    hosts = _machines(store, (6, {}))
    clock = FakeClock()
    first, second = _experiments(store, 2)
    assert isinstance(_ray(store, first, "t", 2, clock), Allocation)
    assert _usage(store, clock.now).held == {"t": 2}
    assert _usage(store, clock.now).quotas == {"t": 10}

    # Another processor gives a host to team "other": not seen until the TTL runs out...
    with store.transaction() as session:
        row = session.get(Host, hosts[-1])
        assert row is not None
        row.experiment_id, row.team, row.lease_expires_at = second, "other", clock.now + 60
    assert _usage(store, clock.now).held == {"t": 2}
    # ...while this process's own allocation counts at once.
    (third,) = _experiments(store, 1)
    assert isinstance(_ray(store, third, "t", 2, clock), Allocation)
    assert _usage(store, clock.now).held == {"t": 4}

    monkeypatch.setattr(quotas, "HELD_TTL_S", 0.0)
    assert _usage(store, clock.now).held == {"t": 4, "other": 1}
