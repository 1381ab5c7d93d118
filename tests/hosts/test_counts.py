"""Free hosts per class, as allocation ranks the classes by them: read at most once a
COUNTS_TTL_S per process; older counts are used while a thread reads them again, up to
STALE_MAX_S, so that no allocation waits for the scan of the whole inventory."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from sqlalchemy import true

from hairline.hosts import counts
from hairline.hosts.counts import cached_counts, class_counts, forget_counts
from hairline.store.db import Store, open_store
from hairline.store.models import Host


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = open_store(f"sqlite:///{tmp_path / 'hairline.db'}", home=tmp_path / "home")
    with s.transaction() as session:
        host = Host(name="node1", backend="ray", machine="node1", cpus="0", facts="{}",
                    enabled=True, healthy=True, region="eu", server_type="web",
                    cpu_arch="x86_64", kernel="6.1", cpu_model="Xeon", turbo="off")  # fmt: skip
        session.add(host)
    forget_counts()
    yield s  # type: ignore[misc]
    s.close()


def _read(store: Store) -> counts.ClassCounts:
    with store.engine.connect() as connection:
        return class_counts(connection, store, "ray", enabled=[Host.backend == "ray"],
                            free=true(), fresh=True)  # fmt: skip


def test_old_counts_are_used_while_a_thread_reads_them_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _read(store)
    assert cached_counts(store, "ray") is first
    monkeypatch.setattr(counts, "COUNTS_TTL_S", 0.0)
    # Too old to use as they are; with a refresh they are used and read again meanwhile.
    assert cached_counts(store, "ray") is None
    refreshed = threading.Event()

    def refresh() -> None:
        _read(store)
        refreshed.set()

    assert cached_counts(store, "ray", refresh=refresh) is first
    assert refreshed.wait(10)
    again = counts._counts[(store.url, "ray")]
    assert again is not first and again.groups == first.groups


def test_counts_past_the_stale_limit_are_read_in_the_allocation(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _read(store)
    monkeypatch.setattr(counts, "COUNTS_TTL_S", 0.0)
    monkeypatch.setattr(counts, "STALE_MAX_S", 0.0)
    called = []
    assert cached_counts(store, "ray", refresh=lambda: called.append(1)) is None
    assert called == []
