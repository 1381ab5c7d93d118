"""The experiment lifecycle: schedules, the trial runner, analysis."""
