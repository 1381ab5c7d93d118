"""The demo's one contract: exit 0 when its verdict is true to what it injected."""

from __future__ import annotations

import pytest

from hairline.cli.demo import demo_outcome


@pytest.mark.parametrize(
    ("regress_cpu", "flagged", "ok", "word"),
    [
        (0.05, True, True, "caught"),
        (0.05, False, False, "missed"),
        (0.0, False, True, "correct"),
        (0.0, True, False, "false alarm"),
    ],
)
def test_the_demo_passes_when_its_verdict_matches_what_was_injected(
    regress_cpu: float, flagged: bool, ok: bool, word: str
) -> None:
    passed, message = demo_outcome(regress_cpu, flagged)
    assert passed is ok
    assert message.startswith(word)
