//! The sample service's pause knob: `--stall-every N --stall-ms M`.
//!
//! One request in about `N` stalls its worker thread for `M` ms before its work, as a
//! stop-the-world garbage collection would: the worker holds the request and serves nothing
//! else, so the requests queued behind it on that worker wait too. The stalled requests are
//! chosen by a hash of the request id (else of the path and query) mixed with a seed:
//! `--stall-seed S`, or one drawn when the service starts. A replayed trace has the same
//! request ids every run, so with a fixed seed every run would stall the same requests and
//! runs would agree on the tail more than real pauses let them (attribution's intervals,
//! which resample runs, came out too narrow). Drawn per start, the stalled requests vary by
//! run; the seed is printed and exported (`sample_stall_seed`), and the same seed stalls the
//! same requests again (lockstep targets given one seed stall on the same requests). With
//! `N` in the hundreds it moves p99.9 and leaves the median alone: the knob whose effect
//! lives only in the tail, for quantile attribution (Treadmill, ISCA '16).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sample::cost::{hash_bytes, mix64};
use crate::sample::flag::BadFlag;

/// Largest `--stall-ms`: longer pauses would only test the load engine's timeouts.
pub const MAX_STALL_MS: f64 = 10_000.0;

/// Keeps the stall selection independent of the user a request id stands for.
const STALL_SALT: u64 = 0x7374_616c_6c5f_6763;

/// A checked `--stall-every N --stall-ms M [--stall-seed S]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stall {
    pub every: u64,
    pub pause: Duration,
    /// Which requests stall: `--stall-seed`, else drawn at the service's start.
    pub seed: u32,
}

/// A seed for a service started without `--stall-seed`: the clock's nanoseconds and the
/// process id, so two services started together (the arms of one batch) differ too.
pub fn drawn_seed() -> u32 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (mix64(nanos ^ (u64::from(std::process::id()) << 32)) >> 32) as u32
}

impl Stall {
    /// Checks `--stall-every` and `--stall-ms`, which go together; `None` without them.
    /// `seed` is `--stall-seed`; without it one is drawn ([`drawn_seed`]).
    pub fn from_flags(
        every: Option<u64>,
        ms: Option<f64>,
        seed: Option<u32>,
    ) -> Result<Option<Stall>, BadFlag> {
        let bad =
            |flag: &'static str, value: String, hint: &'static str| BadFlag { flag, value, hint };
        match (every, ms) {
            (None, None) if seed.is_some() => Err(bad(
                "stall-seed",
                seed.unwrap_or_default().to_string(),
                "a seed chooses which requests stall: pass --stall-every N --stall-ms M too",
            )),
            (None, None) => Ok(None),
            (Some(n), None) => Err(bad(
                "stall-every",
                n.to_string(),
                "a stall needs its length: pass --stall-ms M too",
            )),
            (None, Some(m)) => Err(bad(
                "stall-ms",
                m.to_string(),
                "say how often to stall: pass --stall-every N too",
            )),
            (Some(n), Some(_)) if n < 2 => Err(bad(
                "stall-every",
                n.to_string(),
                "write N >= 2 (one request in N stalls)",
            )),
            (Some(_), Some(m)) if !(m.is_finite() && m > 0.0 && m <= MAX_STALL_MS) => Err(bad(
                "stall-ms",
                m.to_string(),
                "write a number of milliseconds in (0, 10000]",
            )),
            (Some(n), Some(m)) => Ok(Some(Stall {
                every: n,
                pause: Duration::from_secs_f64(m / 1e3),
                seed: seed.unwrap_or_else(drawn_seed),
            })),
        }
    }

    /// Whether the request keyed by `key` (its request id, else its path and query) stalls.
    pub fn hits(&self, key: &[u8]) -> bool {
        let salt = mix64(STALL_SALT ^ u64::from(self.seed));
        mix64(hash_bytes(key) ^ salt).is_multiple_of(self.every)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stall(every: u64) -> Stall {
        seeded(every, 1)
    }

    fn seeded(every: u64, seed: u32) -> Stall {
        Stall {
            every,
            pause: Duration::from_millis(5),
            seed,
        }
    }

    #[test]
    fn bad_stall_flags_name_the_flag() {
        let err = |every, ms| {
            Stall::from_flags(every, ms, None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(Some(300), None).contains("--stall-every 300"));
        assert!(err(None, Some(20.0)).contains("--stall-ms 20"));
        assert!(err(Some(1), Some(20.0)).contains("--stall-every 1"));
        assert!(err(Some(300), Some(0.0)).contains("--stall-ms 0"));
        assert!(err(Some(300), Some(20_000.0)).contains("--stall-ms 20000"));
        assert!(err(Some(300), Some(f64::NAN)).contains("--stall-ms"));
        assert!(Stall::from_flags(None, None, Some(3))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
            .contains("--stall-seed 3"));
        assert_eq!(Stall::from_flags(None, None, None).unwrap(), None);
        assert_eq!(
            Stall::from_flags(Some(300), Some(2.5), Some(7)).unwrap(),
            Some(Stall {
                every: 300,
                pause: Duration::from_micros(2500),
                seed: 7,
            })
        );
    }

    #[test]
    fn about_one_request_in_n_stalls() {
        for every in [2u64, 10, 400] {
            let n = 200_000u64;
            let hits = (0..n)
                .filter(|i| stall(every).hits(i.to_string().as_bytes()))
                .count() as f64;
            let expected = n as f64 / every as f64;
            // Five binomial standard deviations.
            let band = 5.0 * (expected * (1.0 - 1.0 / every as f64)).sqrt();
            assert!(
                (hits - expected).abs() < band,
                "{every}: {hits} vs {expected}"
            );
        }
    }

    #[test]
    fn the_same_request_id_stalls_every_time() {
        let s = stall(7);
        let chosen: Vec<bool> = (0..1000u64)
            .map(|i| s.hits(i.to_string().as_bytes()))
            .collect();
        let again: Vec<bool> = (0..1000u64)
            .map(|i| s.hits(i.to_string().as_bytes()))
            .collect();
        assert_eq!(chosen, again);
        assert!(chosen.iter().any(|&c| c) && !chosen.iter().all(|&c| c));
    }

    #[test]
    fn another_seed_stalls_other_requests() {
        // A replayed trace repeats its request ids; the seed is what makes runs differ.
        // With 1 in 10 stalling, two seeds share about a tenth of their stalled requests.
        let ids: Vec<String> = (0..20_000u64).map(|i| i.to_string()).collect();
        let chosen = |seed| -> Vec<bool> {
            ids.iter()
                .map(|id| seeded(10, seed).hits(id.as_bytes()))
                .collect()
        };
        let (a, b) = (chosen(1), chosen(2));
        let stalled_a = a.iter().filter(|&&x| x).count() as f64;
        let both = a.iter().zip(&b).filter(|(x, y)| **x && **y).count() as f64;
        assert!(
            (0.05..0.15).contains(&(both / stalled_a)),
            "shared share {}",
            both / stalled_a
        );
        assert_eq!(a, chosen(1));
    }

    #[test]
    fn drawn_seeds_differ_between_starts() {
        // Drawn from the clock's nanoseconds: a run of equal draws would mean a clock that
        // does not move, which is the only way this fails.
        let seeds: std::collections::HashSet<u32> = (0..5)
            .map(|_| {
                std::thread::sleep(Duration::from_micros(50));
                drawn_seed()
            })
            .collect();
        assert!(seeds.len() >= 4, "{seeds:?}");
    }

    #[test]
    fn stalled_requests_are_not_the_heavy_users() {
        // The user of a request id and its stall come from the same hash; the salt keeps
        // them apart, so stalls fall on users of every cost alike.
        let s = stall(10);
        let users: Vec<u64> = (0..100_000u64)
            .map(|i| i.to_string())
            .filter(|id| s.hits(id.as_bytes()))
            .map(|id| crate::sample::cost::user_for_request_id(id.as_bytes()))
            .collect();
        let top = users.iter().filter(|&&u| u <= 10).count() as f64 / users.len() as f64;
        assert!(
            (0.2..0.5).contains(&top),
            "share of users 1..=10 among stalls: {top}"
        );
    }
}
