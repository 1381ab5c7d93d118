//! Which requests are recorded: all, a uniform fraction, or an interval reservoir.
//!
//! The reservoir keeps, for each consecutive interval of length T (aligned to the Unix
//! epoch, in the recorded `ts_us`), a uniform random sample of at most K of the requests
//! that arrived in it, exactly K when at least K did. It is Algorithm R split in two:
//! [`Sampler::decide`] runs on the proxy thread at arrival and only says whether the
//! request takes a slot (and which), which needs a counter and a random number;
//! [`Reservoirs`] runs on the writer thread, keeps the latest arrival per slot and hands
//! the interval's sample over once the interval is over. Only requests that take a slot
//! are copied, so the proxy does no work for the others.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::Rng;

/// How requests are chosen for the trace.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleSpec {
    All,
    /// Each request independently with probability `p`.
    Uniform {
        p: f64,
    },
    /// At most `k` per interval of `interval_us`, per endpoint label if `per_endpoint`.
    Reservoir {
        k: u32,
        interval_us: u64,
        per_endpoint: bool,
    },
}

impl SampleSpec {
    /// How the trace header describes the sampling.
    pub fn describe(&self) -> String {
        match self {
            SampleSpec::All => "all".to_owned(),
            SampleSpec::Uniform { p } => format!("uniform {p}"),
            SampleSpec::Reservoir {
                k,
                interval_us,
                per_endpoint,
            } => format!(
                "reservoir {k}/{}{}",
                format_interval(*interval_us),
                if *per_endpoint { " per endpoint" } else { "" }
            ),
        }
    }
}

/// Parses `--sample P`: a probability in (0, 1].
pub fn parse_probability(p: f64) -> Result<f64, String> {
    if p.is_finite() && p > 0.0 && p <= 1.0 {
        Ok(p)
    } else {
        Err(format!(
            "--sample {p}: write a probability in (0, 1], e.g. --sample 0.01 to record 1% of requests"
        ))
    }
}

/// Parses `--reservoir K/T` as `hairline trace sample` does: `K` a positive integer, `/`,
/// then `T`, an optional decimal number (default 1) and a unit (`us`, `µs`, `ms`, `s`, `m`,
/// `h`), with no spaces: `100/1s`, `10/500ms`, `5/1m`, `1/1.5s`, `100/s`. T must be a whole,
/// positive number of microseconds. Returns `(K, T in µs)`.
pub fn parse_reservoir(text: &str) -> Result<(u32, u64), String> {
    let hint = "write K/T: at most K requests per interval T, e.g. --reservoir 100/1s, \
                10/500ms or 5/1m (units us, ms, s, m, h)";
    let fail = |why: &str| format!("--reservoir {text:?}: {why}; {hint}");
    let trimmed = text.trim();
    let (k_text, t_text) = trimmed.split_once('/').ok_or_else(|| fail("no '/'"))?;
    if k_text.is_empty() || !k_text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(fail("K is not a positive integer"));
    }
    let k: u32 = k_text
        .parse()
        .map_err(|_| fail("K is larger than 4294967295"))?;
    if k == 0 {
        return Err(fail("K must be at least 1"));
    }
    let unit_at = t_text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| fail("T has no unit"))?;
    let (number, unit) = t_text.split_at(unit_at);
    let us_per_unit: u128 = match unit {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        _ => return Err(fail(&format!("unknown unit {unit:?}"))),
    };
    let (whole, fraction) = match number.split_once('.') {
        None if number.is_empty() => ("1", ""),
        None => (number, ""),
        Some((w, f)) if !w.is_empty() && !f.is_empty() && !f.contains('.') => (w, f),
        Some(_) => return Err(fail("T is not a number")),
    };
    let fraction = fraction.trim_end_matches('0');
    let too_long = || fail("T is too long");
    let whole: u128 = whole.parse().map_err(|_| too_long())?;
    let scale = 10u128
        .checked_pow(u32::try_from(fraction.len()).map_err(|_| too_long())?)
        .ok_or_else(too_long)?;
    let frac: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| too_long())?
    };
    let frac_us = frac.checked_mul(us_per_unit).ok_or_else(too_long)?;
    if frac_us % scale != 0 {
        return Err(fail("T must be a whole number of microseconds"));
    }
    let interval_us = whole
        .checked_mul(us_per_unit)
        .and_then(|w| w.checked_add(frac_us / scale))
        .and_then(|t| u64::try_from(t).ok())
        .ok_or_else(too_long)?;
    if interval_us == 0 {
        return Err(fail("T must be above 0"));
    }
    Ok((k, interval_us))
}

fn format_interval(us: u64) -> String {
    if us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us.is_multiple_of(1_000) {
        format!("{}ms", us / 1_000)
    } else {
        format!("{}s", us as f64 / 1e6)
    }
}

/// The reservoir slot a request takes at arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// `ts_us / interval_us`.
    pub interval: u64,
    /// Index in `0..K`.
    pub index: u32,
    /// 1-based arrival number within the interval (and label); a later arrival in the same
    /// slot replaces an earlier one.
    pub arrival: u64,
}

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Skip,
    /// Record it (all / uniform).
    Keep,
    /// It takes a reservoir slot; whether it stays is known when the interval closes.
    Slot(Slot),
}

/// Arrival counts of one reservoir: `(interval, arrivals so far)`.
type Count = (u64, u64);

/// Decides at arrival; pure apart from its own seeded random numbers.
#[derive(Debug)]
pub struct Sampler {
    spec: SampleSpec,
    rng: StdRng,
    overall: Count,
    by_label: HashMap<String, Count>,
    /// The newest interval seen, to forget labels of intervals that are over.
    newest: u64,
}

impl Sampler {
    pub fn new(spec: SampleSpec, rng: StdRng) -> Sampler {
        Sampler {
            spec,
            rng,
            overall: (0, 0),
            by_label: HashMap::new(),
            newest: 0,
        }
    }

    pub fn spec(&self) -> &SampleSpec {
        &self.spec
    }

    /// Whether [`Sampler::decide`] needs the endpoint label.
    pub fn needs_label(&self) -> bool {
        matches!(
            self.spec,
            SampleSpec::Reservoir {
                per_endpoint: true,
                ..
            }
        )
    }

    /// The decision for a request that arrived at `ts_us`, labelled `label` (used only by
    /// the per-endpoint reservoir).
    pub fn decide(&mut self, ts_us: u64, label: &str) -> Decision {
        let (k, interval_us, per_endpoint) = match self.spec {
            SampleSpec::All => return Decision::Keep,
            SampleSpec::Uniform { p } => {
                return if p >= 1.0 || self.rng.gen::<f64>() < p {
                    Decision::Keep
                } else {
                    Decision::Skip
                };
            }
            SampleSpec::Reservoir {
                k,
                interval_us,
                per_endpoint,
            } => (k, interval_us, per_endpoint),
        };
        let interval = ts_us / interval_us;
        if interval > self.newest {
            self.newest = interval;
            // Labels of intervals before the previous one cannot take slots any more.
            self.by_label.retain(|_, (i, _)| *i + 1 >= interval);
        } else if interval + 1 < self.newest {
            // A request stamped long before others already counted (a descheduled thread):
            // its interval's reservoir may already be closed.
            return Decision::Skip;
        }
        let count = if per_endpoint {
            match self.by_label.get_mut(label) {
                Some(c) => c,
                None => self
                    .by_label
                    .entry(label.to_owned())
                    .or_insert((interval, 0)),
            }
        } else {
            &mut self.overall
        };
        if count.0 < interval {
            *count = (interval, 0);
        } else if count.0 > interval {
            // Stamped in an earlier interval than one already counted: see above.
            return Decision::Skip;
        }
        count.1 += 1;
        let n = count.1;
        let index = if n <= u64::from(k) {
            n - 1
        } else {
            // Algorithm R: the n-th arrival replaces a uniform slot with probability K/n.
            let j = self.rng.gen_range(0..n);
            if j >= u64::from(k) {
                return Decision::Skip;
            }
            j
        };
        Decision::Slot(Slot {
            interval,
            index: index as u32,
            arrival: n,
        })
    }
}

/// The K slots of one reservoir: `(arrival number, item)` of the latest arrival in each.
type Slots<T> = Vec<Option<(u64, T)>>;

/// The writer's side of the reservoir: per interval (and label), the latest arrival in
/// each slot.
#[derive(Debug)]
pub struct Reservoirs<T> {
    k: usize,
    interval_us: u64,
    open: HashMap<(u64, String), Slots<T>>,
    /// Intervals up to this one are closed (written); `None` before the first close.
    closed_through: Option<u64>,
}

/// What [`Reservoirs::offer`] did with an item.
#[derive(Debug, PartialEq, Eq)]
pub enum Offer<T> {
    /// Held in its slot; it may still be replaced.
    Held,
    /// Its interval was already closed; the item is given back.
    Late(T),
}

impl<T> Reservoirs<T> {
    pub fn new(k: u32, interval_us: u64) -> Reservoirs<T> {
        Reservoirs {
            k: k as usize,
            interval_us,
            open: HashMap::new(),
            closed_through: None,
        }
    }

    pub fn interval_us(&self) -> u64 {
        self.interval_us
    }

    /// Items held now (they are neither written nor dropped yet).
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.open
            .values()
            .map(|slots| slots.iter().filter(|s| s.is_some()).count())
            .sum()
    }

    /// Puts an item in its slot unless a later arrival holds it already. The key is the
    /// endpoint label in per-endpoint mode and empty otherwise.
    pub fn offer(&mut self, slot: Slot, key: &str, item: T) -> Offer<T> {
        if self.closed_through.is_some_and(|c| slot.interval <= c) {
            return Offer::Late(item);
        }
        let k = self.k;
        let slots = match self.open.get_mut(&(slot.interval, key.to_owned())) {
            Some(s) => s,
            None => self
                .open
                .entry((slot.interval, key.to_owned()))
                .or_insert_with(|| (0..k).map(|_| None).collect()),
        };
        let Some(entry) = slots.get_mut(slot.index as usize) else {
            return Offer::Late(item);
        };
        // Arrivals can reach the writer out of order; the later arrival wins, as in
        // Algorithm R applied in arrival order.
        if entry.as_ref().is_none_or(|(n, _)| *n < slot.arrival) {
            *entry = Some((slot.arrival, item));
        }
        Offer::Held
    }

    /// Closes every interval up to and including `interval` and returns their items (the
    /// ones that stayed in their slots).
    pub fn close_through(&mut self, interval: u64) -> Vec<T> {
        self.closed_through = Some(self.closed_through.map_or(interval, |c| c.max(interval)));
        let done: Vec<(u64, String)> = self
            .open
            .keys()
            .filter(|(i, _)| *i <= interval)
            .cloned()
            .collect();
        let mut out = Vec::new();
        for key in done {
            if let Some(slots) = self.open.remove(&key) {
                out.extend(slots.into_iter().flatten().map(|(_, item)| item));
            }
        }
        out
    }

    /// Closes everything (at shutdown) and returns what was held.
    pub fn close_all(&mut self) -> Vec<T> {
        let newest = self.open.keys().map(|(i, _)| *i).max().unwrap_or(0);
        self.close_through(newest)
    }

    /// The earliest open interval, if any.
    pub fn oldest_open(&self) -> Option<u64> {
        self.open.keys().map(|(i, _)| *i).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};
    use rand::SeedableRng;

    #[test]
    fn reservoir_specs_parse_with_units() {
        assert_eq!(parse_reservoir("100/1s"), Ok((100, 1_000_000)));
        assert_eq!(parse_reservoir(" 10/500ms "), Ok((10, 500_000)));
        assert_eq!(parse_reservoir("5/1m"), Ok((5, 60_000_000)));
        assert_eq!(parse_reservoir("1/2h"), Ok((1, 7_200_000_000)));
        assert_eq!(parse_reservoir("20/0.5s"), Ok((20, 500_000)));
        assert_eq!(parse_reservoir("1/1.5s"), Ok((1, 1_500_000)));
        assert_eq!(parse_reservoir("100/s"), Ok((100, 1_000_000)));
        assert_eq!(parse_reservoir("7/250us"), Ok((7, 250)));
        assert_eq!(parse_reservoir("7/250µs"), Ok((7, 250)));
        assert_eq!(parse_reservoir("3/0.1ms"), Ok((3, 100)));
        assert_eq!(parse_reservoir("3/1.0000s"), Ok((3, 1_000_000)));
        for bad in [
            "",
            "100",
            "0/1s",
            "-1/1s",
            "+1/1s",
            "x/1s",
            "5/1",
            "5/1d",
            "5/0s",
            "5/0.0s",
            "5/1.2.3s",
            "5/.5s",
            "5/5.s",
            "5/1 s",
            "5 /1s",
            "5/0.0000001s",
            "5/0.5us",
            "99999999999/1s",
            "1/99999999999999999999999999h",
        ] {
            let err = parse_reservoir(bad).expect_err(bad);
            assert!(err.contains("--reservoir"), "{err}");
        }
    }

    #[test]
    fn probabilities_are_in_zero_one() {
        assert_eq!(parse_probability(0.25), Ok(0.25));
        assert_eq!(parse_probability(1.0), Ok(1.0));
        for bad in [0.0, -0.1, 1.5, f64::NAN] {
            assert!(parse_probability(bad).unwrap_err().contains("--sample"));
        }
    }

    fn seeded(spec: SampleSpec) -> Sampler {
        Sampler::new(spec, StdRng::seed_from_u64(7))
    }

    /// Feeds arrivals `(ts_us, label)` through a sampler and reservoirs in order and returns
    /// the kept ones per (interval, label).
    fn run_reservoir(
        k: u32,
        interval_us: u64,
        per_endpoint: bool,
        arrivals: &[(u64, &str)],
    ) -> HashMap<(u64, String), Vec<u64>> {
        let mut sampler = seeded(SampleSpec::Reservoir {
            k,
            interval_us,
            per_endpoint,
        });
        let mut res = Reservoirs::new(k, interval_us);
        for &(ts, label) in arrivals {
            if let Decision::Slot(slot) = sampler.decide(ts, label) {
                let key = if per_endpoint { label } else { "" };
                assert_eq!(res.offer(slot, key, (ts, label.to_owned())), Offer::Held);
            }
        }
        let mut kept: HashMap<(u64, String), Vec<u64>> = HashMap::new();
        for (ts, label) in res.close_all() {
            let key = if per_endpoint { label } else { String::new() };
            kept.entry((ts / interval_us, key)).or_default().push(ts);
        }
        kept
    }

    #[test]
    fn the_reservoir_keeps_exactly_k_of_a_busy_interval_and_all_of_a_quiet_one() {
        let mut arrivals: Vec<(u64, &str)> = (0..1000).map(|i| (i, "a")).collect();
        arrivals.extend((1000..1003).map(|i| (i, "a")));
        let kept = run_reservoir(10, 1000, false, &arrivals);
        assert_eq!(kept[&(0, String::new())].len(), 10);
        assert_eq!(kept[&(1, String::new())].len(), 3);
    }

    #[test]
    fn the_reservoir_is_uniform_over_the_interval() {
        // 200 intervals of 100 arrivals, K = 10: each position is kept with probability
        // 1/10; the first and second halves of the interval must be kept equally often.
        let arrivals: Vec<(u64, &str)> = (0..20_000u64).map(|i| (i, "a")).collect();
        let kept = run_reservoir(10, 100, false, &arrivals);
        let early = kept.values().flatten().filter(|&&ts| ts % 100 < 50).count();
        let total: usize = kept.values().map(Vec::len).sum();
        assert_eq!(total, 2000);
        // Binomial(2000, 0.5): sd 22.4; 4 sd either side.
        assert!((910..=1090).contains(&early), "early {early} of {total}");
    }

    #[test]
    fn per_endpoint_reservoirs_keep_k_for_each_label() {
        let arrivals: Vec<(u64, &str)> = (0..300u64)
            .map(|i| (i, if i % 3 == 0 { "rare" } else { "common" }))
            .collect();
        let kept = run_reservoir(5, 100, true, &arrivals);
        for interval in 0..3 {
            assert_eq!(kept[&(interval, "rare".to_owned())].len(), 5);
            assert_eq!(kept[&(interval, "common".to_owned())].len(), 5);
        }
    }

    #[test]
    fn uniform_sampling_is_seeded_and_within_its_band() {
        let mut s = seeded(SampleSpec::Uniform { p: 0.25 });
        let kept = (0..10_000)
            .filter(|&i| s.decide(i, "") == Decision::Keep)
            .count();
        // Binomial(10000, 0.25): sd 43.3; 4 sd either side.
        assert!((2327..=2673).contains(&kept), "{kept}");
        let mut again = seeded(SampleSpec::Uniform { p: 0.25 });
        let kept_again = (0..10_000)
            .filter(|&i| again.decide(i, "") == Decision::Keep)
            .count();
        assert_eq!(kept, kept_again);
    }

    #[test]
    fn late_arrivals_after_a_close_are_given_back() {
        let mut res = Reservoirs::new(2, 100);
        let slot = |interval, index, arrival| Slot {
            interval,
            index,
            arrival,
        };
        assert_eq!(res.offer(slot(0, 0, 1), "", "a"), Offer::Held);
        assert_eq!(res.offer(slot(0, 0, 3), "", "c"), Offer::Held);
        // An earlier arrival that reaches the writer after a later one loses its slot.
        assert_eq!(res.offer(slot(0, 0, 2), "", "b"), Offer::Held);
        assert_eq!(res.held(), 1);
        assert_eq!(res.close_through(0), vec!["c"]);
        assert_eq!(res.offer(slot(0, 1, 4), "", "d"), Offer::Late("d"));
        assert_eq!(res.offer(slot(1, 1, 1), "", "e"), Offer::Held);
        assert_eq!(res.oldest_open(), Some(1));
    }

    fn config() -> Config {
        Config {
            cases: 128,
            rng_seed: RngSeed::Fixed(0x5eed_0001),
            failure_persistence: None,
            ..Config::default()
        }
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn the_reservoir_never_exceeds_k_and_fills_when_it_can(
            k in 1u32..8,
            interval_us in 1u64..50,
            gaps in prop::collection::vec(0u64..20, 1..400),
            labels in prop::collection::vec(0usize..3, 1..400),
            per_endpoint in any::<bool>(),
        ) {
            let names = ["a", "b", "c"];
            let mut ts = 0;
            let arrivals: Vec<(u64, &str)> = gaps
                .iter()
                .zip(labels.iter().cycle())
                .map(|(gap, &l)| {
                    ts += gap;
                    (ts, names[l])
                })
                .collect();
            let kept = run_reservoir(k, interval_us, per_endpoint, &arrivals);
            let mut arrived: HashMap<(u64, String), usize> = HashMap::new();
            for &(ts, label) in &arrivals {
                let key = if per_endpoint { label.to_owned() } else { String::new() };
                *arrived.entry((ts / interval_us, key)).or_default() += 1;
            }
            for (key, n) in &arrived {
                let got = kept.get(key).map_or(0, Vec::len);
                prop_assert_eq!(got, (*n).min(k as usize), "{:?}", key);
            }
            prop_assert!(kept.keys().all(|key| arrived.contains_key(key)));
        }

        #[test]
        fn reservoir_text_never_panics(text in "\\PC{0,20}") {
            let _ = parse_reservoir(&text);
        }

        #[test]
        fn reservoir_specs_round_trip(k in 1u32..1_000_000, ms in 1u64..10_000_000) {
            prop_assert_eq!(parse_reservoir(&format!("{k}/{ms}ms")), Ok((k, ms * 1000)));
            prop_assert_eq!(parse_reservoir(&format!("{k}/{}s", ms as f64 / 1000.0)), Ok((k, ms * 1000)));
        }
    }
}
