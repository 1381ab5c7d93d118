"""Which batches are spoiled: each reason alone, and late sends never."""

from __future__ import annotations

from hairline.lab.validity import ArmReading, arm_steal_shares, batch_problems


def reading(**changes: object) -> ArmReading:
    values: dict[str, object] = {
        "requests": 1000, "errors": 0, "cpu_ns": 500_000_000, "cpus": 1, "running": True,
    }  # fmt: skip
    values.update(changes)
    return ArmReading(**values)  # type: ignore[arg-type]


def problems(**arms: ArmReading) -> list[str]:
    return batch_problems(arms, failed_gates=[], wall_s=2.0, max_error_rate=0.01)


def test_a_sound_batch_has_no_problem() -> None:
    assert problems(A=reading(), B=reading()) == []


def test_late_sends_and_a_poor_poisson_fit_hit_every_arm_alike_and_spoil_nothing() -> None:
    gates = [("late_sends", "12 of 800 sends late"), ("poisson_fit", "p = 0.001")]
    found = batch_problems({"A": reading()}, failed_gates=gates, wall_s=2.0, max_error_rate=0.01)
    assert found == []


def test_a_failed_rate_or_dropped_gate_spoils_the_batch() -> None:
    gates = [("rate", "worst: B"), ("dropped", "40 requests dropped")]
    found = batch_problems({"A": reading()}, failed_gates=gates, wall_s=2.0, max_error_rate=0.01)
    # Each reason says what went wrong before the engine's own detail, which can read
    # like a pass ("within 1.45% of the scheduled rate" when the limit is 1%).
    assert found == [
        "load gate rate failed: a target did not get the scheduled rate (engine: worst: B)",
        "load gate dropped failed: requests were dropped at the in-flight limit "
        "(engine: 40 requests dropped)",
    ]


def test_errors_above_the_services_bound_spoil_the_batch() -> None:
    [problem] = problems(A=reading(), B=reading(errors=20))
    assert problem.startswith("arm B answered 20 of 1000 requests with errors")
    assert problems(A=reading(errors=10)) == []  # exactly 1% is allowed


def test_an_arm_that_crashed_spoils_the_batch() -> None:
    assert problems(B=reading(running=False)) == [
        "arm B was not running at the end of the measurement"
    ]


def test_an_arm_whose_main_process_changed_restarted_and_spoils_the_batch() -> None:
    # (pid, start time): the start command's process at the start, a child at the end.
    restarted = reading(main_before=(4120, 90_001), main_after=(4133, 90_002))
    assert problems(A=reading(), B=restarted) == [
        "arm B restarted during the measurement: its main process (pid 4120) ended and "
        "pid 4133 serves now"
    ]
    # The same pid started again later is another process (the kernel reused the pid).
    [problem] = problems(B=reading(main_before=(4120, 90_001), main_after=(4120, 95_000)))
    assert problem.startswith("arm B restarted during the measurement")


def test_an_arm_that_kept_its_main_process_or_was_not_watched_is_sound() -> None:
    same = reading(main_before=(4120, 90_001), main_after=(4120, 90_001))
    assert problems(A=same, B=reading()) == []
    # Nothing known at the start (a remote arm's node could not say): nothing to compare.
    assert problems(A=reading(main_before=None, main_after=(4133, 90_002))) == []
    # A crash is said once, as a crash.
    assert problems(B=reading(running=False, main_before=(4120, 1), main_after=None)) == [
        "arm B was not running at the end of the measurement"
    ]


def test_impossible_cpu_readings_spoil_the_batch() -> None:
    assert problems(A=reading(cpu_ns=0)) == ["arm A used no CPU while serving 1000 requests"]
    [problem] = problems(A=reading(cpu_ns=3_000_000_000))  # 3 s of CPU in 2 s on one CPU
    assert "more than its CPUs can give" in problem
    assert problems(A=reading(cpu_ns=3_000_000_000, cpus=2)) == []


def test_a_batch_the_hypervisor_took_more_from_one_arm_than_another_is_spoiled() -> None:
    arm = ArmReading(requests=100, errors=0, cpu_ns=10**9, cpus=1, running=True)
    shares = arm_steal_shares({0: 40.0, 1: 560.0, 2: 0.0}, {"A": [0], "B": [1]}, wall_s=4.0)

    problems = batch_problems(
        {"A": arm, "B": arm}, failed_gates=[], wall_s=4.0, max_error_rate=0.01,
        steal_share=shares,
    )  # fmt: skip

    assert shares == {"A": 0.01, "B": 0.14}
    assert problems == [
        "the hypervisor took 14.0% of arm B's CPU time and 1.0% of arm A's "
        "(a gap over 10%): a neighbour slowed one arm and not the other"
    ]


def test_steal_that_hits_every_arm_alike_is_noise_not_a_spoiled_batch() -> None:
    """CI's shared host took 10-15% of both CPUs for minutes (2026-11-27)."""
    arm = ArmReading(requests=100, errors=0, cpu_ns=10**9, cpus=1, running=True)
    shares = arm_steal_shares({0: 120.0, 1: 160.0}, {"A": [0], "B": [1]}, wall_s=1.06)

    assert batch_problems(
        {"A": arm, "B": arm}, failed_gates=[], wall_s=1.06, max_error_rate=0.01,
        steal_share=shares,
    ) == []  # fmt: skip


def test_an_arm_on_a_cpu_that_was_not_read_has_no_steal_share() -> None:
    assert arm_steal_shares({0: 10.0}, {"A": [0], "B": [0, 1]}, wall_s=1.0) == {"A": 0.01}
