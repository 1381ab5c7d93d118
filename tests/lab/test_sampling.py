"""What a batch keeps of its arms' profiles: the functions' rows, and a record saying how
many samples each arm had, where it was sampled (a Ray arm's node) and why it has none.
(Sampling itself, with the real perf: tests/profile/test_perf.py, tests/arms/
test_node_profile.py, tests/lab/test_profiling_e2e.py, tests/lab/test_ray_profiling.py.)"""

from __future__ import annotations

from hairline.lab.sampling import SAMPLES_METRIC, BatchProfiles
from hairline.profile.formats import Frame, Profile
from hairline.profile.functions import SELF, TOTAL, function_metric
from hairline.profile.perf import ROOT, Sampled

STACKS = {
    (ROOT, (Frame("main"), Frame("work"))): 3.0,
    (ROOT, (Frame("main"),)): 1.0,
}


def test_the_record_says_where_each_arm_was_sampled_and_why_one_has_no_profile() -> None:
    profiles = BatchProfiles()
    profiles.sampled["A"] = Sampled(Profile(STACKS), 4, 2, host="w2")
    missing = "on w3: perf is not installed (apt-get install linux-perf, ...)"
    profiles.sampled["B"] = Sampled(None, 0, 0, missing, host="w3")
    profiles.sampled["L"] = Sampled(Profile(STACKS), 4, 0)  # a local arm: sampled here
    assert profiles.record() == {
        "A": {"samples": 4, "others": 2, "on": "w2"},
        "B": {"samples": 0, "others": 0, "on": "w3", "why": missing},
        "L": {"samples": 4, "others": 0},
    }


def test_only_the_arms_with_a_profile_get_function_rows() -> None:
    profiles = BatchProfiles()
    profiles.sampled["A"] = Sampled(Profile(STACKS), 4, 0, host="w2")
    profiles.sampled["B"] = Sampled(None, 0, 0, "on w3: perf recorded no sample", host="w3")
    rows = list(profiles.rows({"A": 1000.0, "B": 1000.0}))
    assert {arm for arm, _, _ in rows} == {"A"}
    assert ("A", SAMPLES_METRIC, 4.0) in rows
    # "work" is three samples of four: 750 of the arm's 1,000 ns a request, its own.
    assert ("A", function_metric(SELF, "work"), 750.0) in rows
    assert ("A", function_metric(TOTAL, "main"), 1000.0) in rows
