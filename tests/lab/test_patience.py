"""How long an experiment has waited (for hosts, for a Ray head), when that is shown, and
when `hairline run` gives up: a fake clock, no lab."""

from __future__ import annotations

from hairline.lab.patience import Patience, duration_text

HEAD = "waiting: Ray head unreachable (connection refused)"
HOSTS = "waiting for hosts: no free host of the class (2 held)"


def test_a_wait_is_shown_at_once_then_every_so_often_and_at_once_when_its_reason_changes() -> None:
    patience = Patience(600, every_s=15)
    first = patience.observe(100.0, mark=("running", 2), reason=HEAD)
    assert first is not None and first.waited_s == 0 and first.reason == HEAD
    assert patience.observe(102.0, mark=("running", 2), reason=HEAD) is None
    again = patience.observe(116.0, mark=("running", 2), reason=HEAD)
    assert again is not None and again.waited_s == 16
    assert again.text() == f"{HEAD} (16 s so far, gives up at 10 min 00 s)"
    changed = patience.observe(118.0, mark=("running", 2), reason=HOSTS)
    assert changed is not None and changed.reason == HOSTS and changed.waited_s == 18


def test_it_gives_up_after_the_limit_and_never_sleeps_past_it() -> None:
    patience = Patience(10)
    assert not patience.expired(0.0) and patience.sleep_s(0.0, 2.0) == 2.0
    patience.observe(0.0, mark="m", reason=HOSTS)
    assert patience.sleep_s(9.0, 2.0) == 1.0
    assert not patience.expired(9.9)
    assert patience.expired(10.0) and patience.waited_s(10.0) == 10.0
    assert patience.sleep_s(12.0, 2.0) == 0.0


def test_zero_waits_forever() -> None:
    patience = Patience(0)
    patience.observe(0.0, mark="m", reason=HEAD)
    assert not patience.expired(1e9) and patience.sleep_s(1e9, 2.0) == 2.0
    note = patience.observe(1e9, mark="m", reason=HEAD)
    assert note is not None and "gives up" not in note.text()


def test_a_trial_that_ends_or_a_phase_that_changes_starts_the_count_again() -> None:
    patience = Patience(30)
    patience.observe(0.0, mark=("running", 1), reason=HEAD)
    patience.observe(25.0, mark=("running", 2), reason=None)  # a trial ended meanwhile
    assert patience.waited_s(25.0) == 0 and not patience.expired(40.0)
    note = patience.observe(40.0, mark=("running", 2), reason=HEAD)
    assert note is not None and note.waited_s == 0
    assert not patience.expired(69.0) and patience.expired(70.0)


def test_work_seen_going_on_after_a_wait_is_not_given_up_on() -> None:
    """Another processor took the experiment up after a long wait and runs a long trial:
    seen "running", it is not given up on, however long the trial takes."""
    patience = Patience(30)
    patience.observe(0.0, mark=("running", 1), reason=HEAD)
    patience.observe(40.0, mark=("running", 1), reason=None)
    assert not patience.expired(40.0) and patience.sleep_s(40.0, 2.0) == 2.0
    # A processor retrying a dead head shows "running trial ..." during each attempt:
    # seen waiting again with no trial ended, it is given up on.
    patience.observe(42.0, mark=("running", 1), reason=HEAD)
    assert patience.expired(42.0) and patience.waited_s(42.0) == 42.0


def test_a_head_that_comes_and_goes_between_trials_never_adds_up_to_a_give_up() -> None:
    """Simulated: a 2 s retry; the head is away 20 of every 60 s, and each 40 s it is
    there a trial ends. With a 30 s limit the run never gives up; a head that stays away
    makes it give up 30 s after the wait began."""
    patience, trials, now = Patience(30), 0, 0.0
    while now < 600:
        head_up = now % 60 >= 20
        if head_up and now % 60 == 58:
            trials += 1
        patience.observe(now, mark=("running", trials), reason=None if head_up else HEAD)
        assert not patience.expired(now), now
        now += 2.0
    while not patience.expired(now):
        patience.observe(now, mark=("running", trials), reason=HEAD)
        now += 2.0
    assert 600 + 30 <= now <= 600 + 30 + 2 + 20  # the wait began when the head left


def test_durations_read_as_people_say_them() -> None:
    assert duration_text(45.9) == "45 s"
    assert duration_text(125) == "2 min 05 s"
    assert duration_text(3780) == "1 h 03 min"
