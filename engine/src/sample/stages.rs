//! The named functions a sample-service request's CPU work runs through.
//!
//! A profiler sees functions, not work units: to check per-function profiling against known
//! truth (docs/profiling.md), a request's burned work is split over a few real functions
//! with fixed shares, each its own symbol (`#[inline(never)]`) whose loop is its own self
//! time. `render_json` calls `escape_strings`, so one function has a child and an
//! inclusive cost above its self cost. `--slow-function NAME=FRACTION` makes one of them
//! do that fraction more work, every other function unchanged: a change of
//! `share * FRACTION` of the service, and of `FRACTION` in that function.
//!
//! The shares sum to 1, so a request costs what `cost::burn` of its units costs.

use crate::sample::cost::{mix64, STEPS_PER_UNIT};

/// Every stage's name (as `--slow-function` takes it) and its share of a request's work.
/// `escape_strings` is called from `render_json`; the others from [`run`].
pub const STAGES: [(&str, f64); 7] = [
    ("parse_request", 0.06),
    ("check_auth", 0.04),
    ("load_profile", 0.20),
    ("rank_items", 0.545),
    ("render_json", 0.13),
    ("escape_strings", 0.01),
    ("write_audit_log", 0.015),
];

/// The hint of an unknown `--slow-function` name.
pub const STAGE_NAMES_HINT: &str = "write NAME=FRACTION with NAME one of parse_request, \
    check_auth, load_profile, rank_items, render_json, escape_strings, write_audit_log and \
    FRACTION in (-1, 100], e.g. escape_strings=0.2";

/// Extra work per stage, as a fraction of its own (index as in [`STAGES`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slowdowns([f64; STAGES.len()]);

impl Slowdowns {
    /// Parses `NAME=FRACTION` items (repeated flags); None names what is wrong.
    pub fn parse(items: &[String]) -> Option<Slowdowns> {
        let mut out = Slowdowns::default();
        for item in items {
            let (name, fraction) = item.split_once('=')?;
            let index = STAGES.iter().position(|(n, _)| *n == name.trim())?;
            let fraction: f64 = fraction.trim().parse().ok()?;
            if !(fraction.is_finite() && fraction > -1.0 && fraction <= 100.0) {
                return None;
            }
            out.0[index] = fraction;
        }
        Some(out)
    }

    /// The work of a whole request relative to none slowed: 1 + the sum of share x fraction
    /// (what `--work sleep` sleeps longer by).
    pub fn factor(&self) -> f64 {
        1.0 + STAGES
            .iter()
            .zip(self.0)
            .map(|((_, share), fraction)| share * fraction)
            .sum::<f64>()
    }

    fn steps(&self, index: usize, total_steps: u64) -> u64 {
        let share = STAGES[index].1 * (1.0 + self.0[index]);
        (total_steps as f64 * share).round() as u64
    }
}

/// A dependent hash chain of `steps` steps, inlined into each stage so that the stage's
/// own symbol holds the time. `SALT` differs per stage: with the same body the compiler
/// merged the stages into one function, and the profile charged all of them to one name.
#[inline(always)]
fn spin<const SALT: u64>(seed: u64, steps: u64) -> u64 {
    // Salted once, not at each step: a step costs what `cost::burn`'s does.
    let mut x = seed ^ SALT;
    for _ in 0..steps {
        x = mix64(x);
    }
    x
}

#[inline(never)]
fn parse_request(seed: u64, steps: u64) -> u64 {
    spin::<1>(seed, steps)
}

#[inline(never)]
fn check_auth(seed: u64, steps: u64) -> u64 {
    spin::<2>(seed, steps)
}

#[inline(never)]
fn load_profile(seed: u64, steps: u64) -> u64 {
    spin::<3>(seed, steps)
}

#[inline(never)]
fn rank_items(seed: u64, steps: u64) -> u64 {
    spin::<4>(seed, steps)
}

#[inline(never)]
fn escape_strings(seed: u64, steps: u64) -> u64 {
    spin::<5>(seed, steps)
}

#[inline(never)]
fn render_json(seed: u64, steps: u64, escape_steps: u64) -> u64 {
    let x = spin::<6>(seed, steps);
    escape_strings(x, escape_steps)
}

#[inline(never)]
fn write_audit_log(seed: u64, steps: u64) -> u64 {
    spin::<7>(seed, steps)
}

/// Burns `units` work units through the stages (what `cost::burn` burns in one
/// function), each stage slowed by its fraction in `slow`.
#[inline(never)]
pub fn run(seed: u64, units: u64, slow: &Slowdowns) -> u64 {
    let total = units.saturating_mul(STEPS_PER_UNIT);
    let x = parse_request(seed, slow.steps(0, total));
    let x = check_auth(x, slow.steps(1, total));
    let x = load_profile(x, slow.steps(2, total));
    let x = rank_items(x, slow.steps(3, total));
    let x = render_json(x, slow.steps(4, total), slow.steps(5, total));
    write_audit_log(x, slow.steps(6, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_sum_to_one_and_the_steps_to_the_units() {
        let sum: f64 = STAGES.iter().map(|(_, s)| s).sum();
        assert!((sum - 1.0).abs() < 1e-12, "{sum}");
        let none = Slowdowns::default();
        let steps: u64 = (0..STAGES.len()).map(|i| none.steps(i, 45 * 256)).sum();
        assert!(steps.abs_diff(45 * 256) <= STAGES.len() as u64);
    }

    #[test]
    fn a_slowdown_adds_its_fraction_to_one_stage_only() {
        let slow = Slowdowns::parse(&["escape_strings=0.2".to_string()]).unwrap();
        let none = Slowdowns::default();
        for (i, (name, _)) in STAGES.iter().enumerate() {
            let (a, b) = (none.steps(i, 100_000), slow.steps(i, 100_000));
            if *name == "escape_strings" {
                assert_eq!((a, b), (1_000, 1_200));
            } else {
                assert_eq!(a, b);
            }
        }
    }

    #[test]
    fn bad_items_are_refused() {
        for bad in [
            "nope=0.1",
            "escape_strings",
            "escape_strings=x",
            "rank_items=-1",
        ] {
            assert_eq!(Slowdowns::parse(&[bad.to_string()]), None, "{bad}");
        }
    }

    #[test]
    fn the_hint_names_every_stage() {
        for (name, _) in STAGES {
            assert!(STAGE_NAMES_HINT.contains(name), "{name}");
        }
    }

    #[test]
    fn run_depends_on_the_slowdown() {
        let slow = Slowdowns::parse(&["write_audit_log=1".to_string()]).unwrap();
        assert_ne!(run(7, 45, &Slowdowns::default()), run(7, 45, &slow));
    }
}
