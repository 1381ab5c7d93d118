"""A PID controller that drives a service's load to the rate at which its latency meets a
target (HHVM autotuning paper, section 5.1): the capacity at the target, as the tuning
objective, instead of speed at an arbitrary load.

Pure: the caller measures (lab/capacity_pid.py against a real service, the tests against a
simulated one) and feeds each update's latency to :func:`step`, which returns the next
rate. The controller works on logarithms, ``log(rate)`` against ``log(target / latency)``,
because both spread over orders of magnitude and a relative error should move the rate by
a relative step whatever the scale.

Near the knee latency rises steeply with rate (a queue's ``1 / (capacity - rate)``), so the
loop's gain is large there and small far below it; the gains are chosen small enough not
to oscillate at the knee, and the integral term carries the rate up from far below it.
Three guards keep it stable:

- anti-windup: the integral is clamped so that it alone can never ask for a rate outside
  the bounds, and it does not grow while the output is at a bound in its own direction;
- the error of one update is clamped to ``[-max_error, max_error]``: past the knee the
  latency of a growing queue says how long the queue is, not how far the rate is off;
  a latency that is NaN (nothing answered) counts as ``-max_error``;
- each update moves the rate by at most ``max_step`` (x2 up, x0.5 down by default).

A real service's p99 is nearly a step at the knee (a few ms below it, a growing queue's
hundreds above): the error's size says little there and a fixed gain goes round a limit
cycle (on the sample service, 3,000-4,400/s around a 4,000/s knee, +-14% a step). So the
gain follows Kesten's rule for stochastic approximation (Kesten 1958): it is multiplied by
``gain_decay`` each time the error changes sign, down to ``min_gain``. Far below the knee
the error keeps its sign and the climb keeps its speed; around the knee each crossing
shortens the step, and the rate converges instead of circling.

It has settled when the last ``settle_updates`` rates lie within ``settle_band`` of their
mean (:func:`settled`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

__all__ = ["PidSettings", "PidState", "settled", "settled_rate", "start", "step"]


@dataclass(frozen=True)
class PidSettings:
    """Gains are per unit of ``log(target / latency)``; ``ki`` per second."""

    target_latency_ms: float
    start_rate_per_s: float
    min_rate_per_s: float = 1.0
    max_rate_per_s: float = 1e6
    # Integral-only by default: at the knee d log(p99) / d log(rate) is ~16 for a queue at
    # 94% load, so a proportional or derivative term passes each measurement's noise
    # (15-30% on a p99 of a 0.5 s interval) to the rate 16-fold; on the simulated service
    # (tests/capacity/test_pid.py) kp = 0.02 already doubled the swing after settling.
    kp: float = 0.0
    ki: float = 0.12
    kd: float = 0.0
    # Far below the knee log(target / latency) is ~3 (20 ms against ~1 ms): letting it
    # count climbs there fast; past the knee the clamp keeps a backlog's latency from
    # throwing the rate down.
    max_error: float = 3.0
    # Halving (0.5) locked in an early crossing that noise made: 2 of 40 seeds of the
    # simulated service settled 6% off with 50% noise; at 0.7, 1.
    gain_decay: float = 0.7
    min_gain: float = 0.2
    max_step: float = 2.0
    settle_updates: int = 8
    settle_band: float = 0.05

    def __post_init__(self) -> None:
        # Programming errors: the lab's config checks give users the field-naming messages.
        assert self.target_latency_ms > 0 and self.max_step > 1
        assert 0 < self.min_rate_per_s <= self.start_rate_per_s <= self.max_rate_per_s
        assert self.settle_updates >= 2 and 0 < self.settle_band < 1
        assert 0 < self.gain_decay <= 1 and 0 < self.min_gain <= 1


@dataclass(frozen=True)
class PidState:
    """Where the controller stands: the rate in force, the integral term, the gain (Kesten's
    rule), the previous error (for the derivative and the sign changes), and the rates of
    the recent updates (for the settle rule)."""

    settings: PidSettings
    rate_per_s: float
    integral: float = 0.0
    gain: float = 1.0
    previous_error: float | None = None
    recent_rates: tuple[float, ...] = field(default=())
    updates: int = 0


def start(settings: PidSettings) -> PidState:
    """The state before the first update: the start rate in force."""
    return PidState(settings=settings, rate_per_s=settings.start_rate_per_s)


def step(state: PidState, measured_latency_ms: float, dt_s: float) -> tuple[PidState, float]:
    """One update: the latency measured over the last ``dt_s`` seconds at
    ``state.rate_per_s`` in, the next state and the rate to offer out.

    A latency that is NaN (nothing answered) or not positive counts as far over the
    target: nothing answering is the worst case, not no information."""
    s = state.settings
    if math.isnan(measured_latency_ms) or measured_latency_ms <= 0:
        error = -s.max_error
    else:
        error = math.log(s.target_latency_ms / measured_latency_ms)
        error = min(max(error, -s.max_error), s.max_error)
    base = math.log(s.start_rate_per_s)
    low, high = math.log(s.min_rate_per_s) - base, math.log(s.max_rate_per_s) - base
    previous = state.previous_error
    derivative = 0.0 if previous is None else (error - previous) / dt_s
    gain = state.gain
    if previous is not None and previous * error < 0:
        gain = max(gain * s.gain_decay, s.min_gain)
    integral = min(max(state.integral + gain * s.ki * error * dt_s, low), high)
    wanted = gain * s.kp * error + integral + s.kd * derivative
    # Conditional integration: when the output is held at a bound or by the step limit in
    # the direction the integral pushes, the integral keeps its old value.
    current = math.log(state.rate_per_s) - base
    limit = math.log(s.max_step)
    held = min(max(wanted, current - limit, low), current + limit, high)
    if held != wanted and (held - wanted) * error < 0:
        integral = state.integral
    rate = math.exp(base + held)
    recent = (*state.recent_rates, rate)[-s.settle_updates :]
    new = replace(
        state,
        rate_per_s=rate,
        integral=integral,
        gain=gain,
        previous_error=error,
        recent_rates=recent,
        updates=state.updates + 1,
    )
    return new, rate


def settled(state: PidState) -> bool:
    """The last ``settle_updates`` rates lie within ``settle_band`` of their mean."""
    s = state.settings
    if len(state.recent_rates) < s.settle_updates:
        return False
    mean = sum(state.recent_rates) / len(state.recent_rates)
    return all(abs(r / mean - 1) <= s.settle_band for r in state.recent_rates)


def settled_rate(state: PidState) -> float:
    """The mean of the recent rates: the rate the controller settled at."""
    return sum(state.recent_rates) / len(state.recent_rates) if state.recent_rates else math.nan
