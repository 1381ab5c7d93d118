"""How the suite is ordered and split (tests/suitekit.py, used by tests/conftest.py): which
tests may share the CPUs."""

from __future__ import annotations

from pathlib import Path

from suitekit import runs_alone, shared_order_key, suite_order_key


def test_a_simulation_with_no_service_may_share_the_cpus() -> None:
    assert not runs_alone("tests/stats/test_models.py", ["tmp_path"], slow=False)


def test_a_slow_test_runs_alone_wherever_it_is() -> None:
    assert runs_alone("tests/stats/test_models.py", [], slow=True)


def test_a_test_that_starts_the_engine_or_a_cluster_runs_alone() -> None:
    for fixture in ("engine_path", "ray_cluster", "kraken_fleet"):
        assert runs_alone("tests/web/test_api.py", ["tmp_path", fixture], slow=False)


def test_the_folders_that_measure_time_run_alone() -> None:
    assert runs_alone("tests/engine/test_http.py", [], slow=False)
    assert runs_alone("tests/hosts/test_node.py", [], slow=False)
    assert not runs_alone("tests/hosts/test_factors.py", [], slow=False)


def test_a_test_marked_shares_cpus_runs_beside_another_even_if_slow_and_timed() -> None:
    assert not runs_alone("tests/engine/test_http.py", ["engine_path"], slow=True, shares_cpus=True)


def test_a_cluster_test_runs_alone_even_when_marked() -> None:
    for fixture in ("ray_cluster", "kraken_fleet"):
        assert runs_alone("tests/lab/test_x.py", [fixture], slow=True, shares_cpus=True)


def test_the_tests_marked_shares_cpus_are_dealt_first_in_the_shared_part() -> None:
    assert shared_order_key(shares_cpus=True) < shared_order_key(shares_cpus=False)


def test_the_noisy_session_fixtures_tests_go_last_ray_after_haproxy() -> None:
    quiet, fleet, ray = (suite_order_key(f) for f in ([], ["kraken_fleet"], ["ray_cluster"]))
    assert quiet < fleet < ray


def test_every_test_module_has_a_basename_of_its_own() -> None:
    """pytest imports test modules by basename (rootdir-relative packages are not used here),
    so two test_x.py in different folders make one of them fail to collect: only the part
    of the suite that collects both at once notices."""
    root = Path(__file__).parent
    seen: dict[str, list[str]] = {}
    for path in root.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(root)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
