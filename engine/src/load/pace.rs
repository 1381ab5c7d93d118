//! Send schedules: when request `i` is due, as a function of the schedule alone.
//!
//! Nothing here reads a clock. A [`Pacer`] is given the segment start (nanoseconds since the
//! run's origin) and answers "when is the next request due"; the event loop compares that
//! with its own clock. Due times are computed from the segment start and the request's index
//! within the segment, never accumulated from the previous send, so a late send does not
//! shift any later request (the schedule cannot drift).
//!
//! A rate change starts a new segment at the moment of the change: requests already due keep
//! their due times, the next request is due at the change plus one gap at the new rate.

use std::sync::Arc;

/// How inter-arrival gaps are drawn.
#[derive(Debug, Clone)]
pub enum Arrival {
    /// Evenly spaced: request k of a segment is due at `start + k / rate`.
    Constant,
    /// Exponential gaps (a Poisson process). Gap `i` is a function of `(seed, i)` only, so a
    /// schedule is reproducible and the same on every run with the same seed.
    Poisson { seed: u64 },
    /// Offsets recorded in a trace (already scaled and clamped), looped: one pass lasts
    /// `loop_ns` at the natural rate, which is `offsets_ns.len() / loop_ns`.
    Recorded {
        offsets_ns: Arc<Vec<u64>>,
        loop_ns: u64,
    },
}

impl Arrival {
    /// The rate a recorded schedule has when replayed as recorded.
    pub fn natural_rate_per_s(&self) -> Option<f64> {
        match self {
            Arrival::Recorded {
                offsets_ns,
                loop_ns,
            } if *loop_ns > 0 => Some(offsets_ns.len() as f64 * 1e9 / *loop_ns as f64),
            _ => None,
        }
    }
}

/// A schedule of due times, one segment at a time.
#[derive(Debug, Clone)]
pub struct Pacer {
    arrival: Arrival,
    rate_per_s: f64,
    segment_start_ns: u64,
    segment_first: u64,
    next_index: u64,
    /// Poisson only: offset of `next_index` within its segment, in (fractional) ns.
    poisson_offset_ns: f64,
}

/// Sentinel due time of a paused schedule (rate 0).
pub const NEVER_NS: u64 = u64::MAX;

/// The highest rate a schedule may have, per target: one request per microsecond. Sending
/// or dropping a request takes the event loop about that long, so a denser schedule can
/// only fall further behind; near 1e9/s requests would share a nanosecond.
pub const MAX_RATE_PER_S: f64 = 1_000_000.0;

impl Pacer {
    /// A schedule whose first segment starts at `start_ns` at `rate_per_s`; the first request
    /// has index `first_index`.
    pub fn new(arrival: Arrival, rate_per_s: f64, start_ns: u64, first_index: u64) -> Pacer {
        let mut pacer = Pacer {
            arrival,
            rate_per_s: sanitize_rate(rate_per_s),
            segment_start_ns: start_ns,
            segment_first: first_index,
            next_index: first_index,
            poisson_offset_ns: 0.0,
        };
        pacer.poisson_offset_ns = pacer.poisson_gap_ns(first_index);
        pacer
    }

    pub fn rate_per_s(&self) -> f64 {
        self.rate_per_s
    }

    /// Index of the next request to be sent.
    pub fn next_index(&self) -> u64 {
        self.next_index
    }

    /// Due time of the next request (ns since the origin), or [`NEVER_NS`] when paused.
    pub fn next_due_ns(&self) -> u64 {
        if self.rate_per_s <= 0.0 {
            return NEVER_NS;
        }
        let k = self.next_index - self.segment_first;
        let offset_ns = match &self.arrival {
            Arrival::Constant => k as f64 * 1e9 / self.rate_per_s,
            Arrival::Poisson { .. } => self.poisson_offset_ns,
            Arrival::Recorded {
                offsets_ns,
                loop_ns,
            } => {
                let n = offsets_ns.len() as u64;
                if n == 0 {
                    return NEVER_NS;
                }
                let natural = self.arrival.natural_rate_per_s().unwrap_or(self.rate_per_s);
                let scale = natural / self.rate_per_s;
                // `n > 0` was checked above, so the index is in range.
                let recorded = (k / n) * loop_ns + offsets_ns[(k % n) as usize];
                recorded as f64 * scale
            }
        };
        self.segment_start_ns
            .saturating_add(offset_ns.round() as u64)
    }

    /// Moves to the next request; returns the index that was due.
    pub fn advance(&mut self) -> u64 {
        let index = self.next_index;
        self.next_index += 1;
        if let Arrival::Poisson { .. } = self.arrival {
            self.poisson_offset_ns += self.poisson_gap_ns(self.next_index);
        }
        index
    }

    /// Starts a new segment at `at_ns` with `rate_per_s`; the next request is due one gap
    /// after `at_ns` (at once for a constant or recorded schedule).
    pub fn set_rate(&mut self, at_ns: u64, rate_per_s: f64) {
        self.rate_per_s = sanitize_rate(rate_per_s);
        self.segment_start_ns = at_ns;
        self.segment_first = self.next_index;
        self.poisson_offset_ns = self.poisson_gap_ns(self.next_index);
    }

    /// How many requests are due at or before `now_ns`, counting from the next one.
    /// Used by tests and by the scheduled-count gate; does not move the schedule.
    pub fn count_due(&self, now_ns: u64) -> u64 {
        let mut probe = self.clone();
        let mut n = 0;
        while probe.next_due_ns() <= now_ns {
            probe.advance();
            n += 1;
        }
        n
    }

    fn poisson_gap_ns(&self, index: u64) -> f64 {
        match self.arrival {
            Arrival::Poisson { seed } if self.rate_per_s > 0.0 => {
                exponential_gap_ns(seed, index, self.rate_per_s)
            }
            _ => 0.0,
        }
    }
}

/// Whether the request due at `due_ns` goes out on a turn of the loop at `now_ns` that may
/// send up to `coalesce_ns` early (`--coalesce-us`): it is due, or due soon enough to share
/// this wake-up instead of needing one of its own. With `coalesce_ns` 0, due or past. Pure.
pub fn sends_now(due_ns: u64, now_ns: u64, coalesce_ns: u64) -> bool {
    due_ns <= now_ns.saturating_add(coalesce_ns)
}

/// Where a request's latency starts: its due time, so that a late send's wait for the
/// generator counts (coordinated omission); or its write, when that came first (a coalesced
/// send that went out early: from its due time its latency would read shorter than the
/// target took, and could go negative). `sent_ns` 0: never written. Pure.
pub fn latency_start_ns(intended_ns: u64, sent_ns: u64) -> u64 {
    if sent_ns == 0 {
        intended_ns
    } else {
        intended_ns.min(sent_ns)
    }
}

fn sanitize_rate(rate_per_s: f64) -> f64 {
    if rate_per_s.is_finite() && rate_per_s > 0.0 {
        rate_per_s
    } else {
        0.0
    }
}

/// The exponential gap before request `index` of a Poisson schedule: inverse-CDF of a
/// uniform derived from `(seed, index)` by a 64-bit mixer, so no generator state is carried.
pub fn exponential_gap_ns(seed: u64, index: u64, rate_per_s: f64) -> f64 {
    let bits = splitmix64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    // 53 random bits mapped into (0, 1]: never 0, so the logarithm is finite.
    let u = ((bits >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    -u.ln() * 1e9 / rate_per_s
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Recorded offsets (ns from the first request) from recorded timestamps (µs), each gap
/// divided by `speed` and clamped to `max_gap_ns`; returns the offsets and the loop length
/// (the last offset plus the mean gap, so a looped trace keeps its average rate).
pub fn recorded_offsets(ts_us: &[u64], speed: f64, max_gap_ns: u64) -> (Vec<u64>, u64) {
    let mut offsets = Vec::with_capacity(ts_us.len());
    let mut at_ns: u64 = 0;
    let mut prev: Option<u64> = None;
    for &ts in ts_us {
        if let Some(p) = prev {
            // Out-of-order timestamps count as simultaneous rather than going back in time.
            let gap_ns = (ts.saturating_sub(p) as f64 * 1e3 / speed).round() as u64;
            at_ns += gap_ns.min(max_gap_ns);
        }
        offsets.push(at_ns);
        prev = Some(ts);
    }
    let n = offsets.len() as u64;
    let mean_gap_ns = if n > 1 { at_ns / (n - 1) } else { 1_000_000 };
    let loop_ns = at_ns + mean_gap_ns.max(1);
    (offsets, loop_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_rate_is_exact_and_does_not_drift() {
        let mut p = Pacer::new(Arrival::Constant, 1000.0, 5_000, 0);
        assert_eq!(p.next_due_ns(), 5_000);
        p.advance();
        assert_eq!(p.next_due_ns(), 5_000 + 1_000_000);
        for _ in 1..1_000_000 {
            p.advance();
        }
        // A million requests later the schedule is still exactly start + i / rate.
        assert_eq!(p.next_due_ns(), 5_000 + 1_000_000_000_000);
    }

    #[test]
    fn count_due_includes_the_request_due_exactly_now() {
        let p = Pacer::new(Arrival::Constant, 1000.0, 0, 0);
        assert_eq!(p.count_due(0), 1);
        assert_eq!(p.count_due(999_999), 1);
        assert_eq!(p.count_due(1_000_000), 2);
        assert_eq!(p.count_due(1_000_000_000), 1001);
    }

    #[test]
    fn rate_change_starts_a_segment_at_the_change() {
        let mut p = Pacer::new(Arrival::Constant, 100.0, 0, 0);
        for _ in 0..5 {
            p.advance();
        }
        // Requests 0..4 were due at 0, 10, ..., 40 ms; the change comes at 45 ms.
        p.set_rate(45_000_000, 1000.0);
        assert_eq!(p.next_index(), 5);
        assert_eq!(p.next_due_ns(), 45_000_000);
        p.advance();
        assert_eq!(p.next_due_ns(), 46_000_000);
    }

    #[test]
    fn zero_rate_pauses() {
        let mut p = Pacer::new(Arrival::Constant, 1000.0, 0, 0);
        p.set_rate(10, 0.0);
        assert_eq!(p.next_due_ns(), NEVER_NS);
        assert_eq!(p.count_due(u64::MAX - 1), 0);
        p.set_rate(20, 10.0);
        assert_eq!(p.next_due_ns(), 20);
    }

    #[test]
    fn poisson_is_reproducible_and_has_the_right_mean() {
        let a = Pacer::new(Arrival::Poisson { seed: 7 }, 2000.0, 0, 0);
        let b = Pacer::new(Arrival::Poisson { seed: 7 }, 2000.0, 0, 0);
        let c = Pacer::new(Arrival::Poisson { seed: 8 }, 2000.0, 0, 0);
        assert_eq!(a.next_due_ns(), b.next_due_ns());
        assert_ne!(a.next_due_ns(), c.next_due_ns());
        // 200,000 arrivals at 2000/s take 100 s; the standard error is 100/sqrt(2e5) = 0.22 s.
        let mut p = a;
        for _ in 0..200_000 {
            p.advance();
        }
        let span_s = p.next_due_ns() as f64 / 1e9;
        assert!((span_s - 100.0).abs() < 1.0, "span {span_s}");
    }

    #[test]
    fn poisson_gaps_are_exponential() {
        // Share of gaps longer than the mean is e^-1 for an exponential distribution.
        let n = 100_000;
        let mean_ns = 1e9 / 500.0;
        let longer = (0..n)
            .filter(|&i| exponential_gap_ns(3, i, 500.0) > mean_ns)
            .count();
        let share = longer as f64 / n as f64;
        assert!((share - (-1f64).exp()).abs() < 0.005, "share {share}");
    }

    /// Wake-ups a loop needs to send `pacer`'s requests due before `end_ns` when each
    /// wake-up comes exactly at the first unsent due time and sends everything
    /// [`sends_now`]; and the earliest any request went out, in ns before its due time.
    fn wakeups(mut pacer: Pacer, end_ns: u64, coalesce_ns: u64) -> (u64, u64) {
        let (mut wakes, mut earliest) = (0, 0);
        while pacer.next_due_ns() < end_ns {
            let now = pacer.next_due_ns();
            wakes += 1;
            while sends_now(pacer.next_due_ns(), now, coalesce_ns) {
                earliest = earliest.max(pacer.next_due_ns() - now);
                pacer.advance();
            }
        }
        (wakes, earliest)
    }

    #[test]
    fn coalescing_sends_requests_due_soon_on_the_same_wake_up() {
        assert!(sends_now(100, 100, 0));
        assert!(sends_now(99, 100, 0));
        assert!(!sends_now(101, 100, 0));
        assert!(sends_now(150, 100, 50));
        assert!(!sends_now(151, 100, 50));
        assert!(sends_now(u64::MAX - 1, u64::MAX - 10, 50), "no overflow near the end");
        assert!(!sends_now(NEVER_NS, 0, 1_000_000), "a paused schedule sends nothing");
    }

    #[test]
    fn a_window_as_long_as_the_gap_halves_the_wake_ups_of_a_constant_rate() {
        // 8,000/s is a request every 125 µs: each on its own wake-up without coalescing;
        // with a 150 µs window each wake-up also sends the next one, 125 µs early.
        let pacer = Pacer::new(Arrival::Constant, 8_000.0, 0, 0);
        assert_eq!(wakeups(pacer.clone(), 1_000_000_000, 0), (8_000, 0));
        assert_eq!(wakeups(pacer.clone(), 1_000_000_000, 150_000), (4_000, 125_000));
        // A window shorter than the gap changes nothing.
        assert_eq!(wakeups(pacer, 1_000_000_000, 100_000), (8_000, 0));
    }

    #[test]
    fn coalesced_poisson_sends_are_early_by_at_most_the_window() {
        // A Poisson schedule at 8,000/s has P(gap < 50 µs) = 1 - e^-0.4 = 33% of its gaps
        // inside a 50 µs window; seeded, so the count is exact on every run.
        let pacer = Pacer::new(Arrival::Poisson { seed: 11 }, 8_000.0, 0, 0);
        let (alone, _) = wakeups(pacer.clone(), 1_000_000_000, 0);
        let (shared, earliest) = wakeups(pacer, 1_000_000_000, 50_000);
        assert!(earliest <= 50_000, "a send went out {earliest} ns early");
        let saved = 1.0 - shared as f64 / alone as f64;
        // Each wake-up ends where the next gap is longer than what is left of its window,
        // so fewer than 33% are saved; seeded at 8,000 requests the share is within 0.25-0.33.
        assert!((0.25..0.33).contains(&saved), "saved {saved}");
    }

    #[test]
    fn latency_starts_at_the_due_time_or_the_earlier_write() {
        // Late: from the due time (the wait for the generator counts).
        assert_eq!(latency_start_ns(1_000, 1_300), 1_000);
        // Early (coalesced): from the write, so a response at 1_100 reads 300 ns, not 100.
        assert_eq!(latency_start_ns(1_000, 800), 800);
        // Never written (timed out in a queue): from the due time.
        assert_eq!(latency_start_ns(1_000, 0), 1_000);
        // A response comes after its write: never negative.
        for (due, sent) in [(1_000u64, 800u64), (1_000, 1_300)] {
            assert!(sent >= latency_start_ns(due, sent));
        }
    }

    #[test]
    fn recorded_offsets_scale_and_clamp() {
        let (offsets, loop_ns) =
            recorded_offsets(&[1_000, 1_100, 1_300, 9_000_000], 2.0, 5_000_000);
        // Gaps of 100 and 200 µs at speed 2 are 50 and 100 µs; the 9 s gap is clamped to 5 ms.
        assert_eq!(offsets, vec![0, 50_000, 150_000, 5_150_000]);
        assert_eq!(loop_ns, 5_150_000 + 5_150_000 / 3);
    }

    #[test]
    fn recorded_schedule_loops_and_scales_with_rate() {
        let offsets = Arc::new(vec![0, 1_000_000, 3_000_000]);
        let arrival = Arrival::Recorded {
            offsets_ns: offsets,
            loop_ns: 4_000_000,
        };
        let natural = arrival.natural_rate_per_s().unwrap_or(0.0);
        assert!((natural - 750.0).abs() < 1e-9);
        let mut p = Pacer::new(arrival.clone(), natural, 0, 0);
        let dues: Vec<u64> = (0..5)
            .map(|_| {
                let d = p.next_due_ns();
                p.advance();
                d
            })
            .collect();
        assert_eq!(dues, vec![0, 1_000_000, 3_000_000, 4_000_000, 5_000_000]);
        // Twice the natural rate plays the recording twice as fast.
        let p2 = Pacer::new(arrival, natural * 2.0, 0, 0);
        assert_eq!(p2.count_due(1_500_000), 3);
    }
}
