"""bench/engine/wakeups.py: its table from known runs (no engine, no nginx: milliseconds)."""

from __future__ import annotations

from benchscript import load_bench


def run(cpu_us: float, behind: float, poisson_p: float | None = None) -> dict[str, object]:
    return {"cpu_us_per_request": cpu_us, "engine_cpu_share": 0.5, "behind_share": behind,
            "late_share": 2 * behind, "pacing_p50_us": 30.0, "pacing_p99_us": 120.0,
            "poisson_p": poisson_p, "valid": poisson_p is None}  # fmt: skip


def test_the_table_gives_each_variants_median_and_its_ratio_to_the_first() -> None:
    results = {
        "8,000/s": {
            "off": [run(40.0, 0.001), run(44.0, 0.002), run(42.0, 0.001)],
            "on": [run(28.0, 0.001), run(27.3, 0.001), run(30.0, 0.003)],
        },
        "2,000/s": {"off": [run(50.0, 0.0, 1e-20)], "on": [run(50.0, 0.0, 1e-80)]},
    }

    text = load_bench("engine/wakeups.py").table(results)

    assert "| 8,000/s | off | 42.0 | 1.00x | 50% | 0.100% | 0.200% | 30 / 120 | - | 3/3 |" in text
    assert "| 8,000/s | on | 28.0 | 0.67x |" in text
    # Each rate is against its own first variant; a failed Poisson fit shows and counts.
    assert (
        "| 2,000/s | on | 50.0 | 1.00x | 50% | 0.000% | 0.000% | 30 / 120 | 1e-80 | 0/1 |" in text
    )
