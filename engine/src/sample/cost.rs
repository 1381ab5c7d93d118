//! The sample service's cost model: pure functions from a request to the work it costs.
//!
//! Everything here is deterministic so that the same request costs the same on every target
//! of a lockstep run, on every machine, in every run. The server (`service`) applies
//! the time-dependent parts (warm-up) and the regression knobs on top.

/// Users are drawn from this many ids, as in the trace generator.
pub const USERS: u64 = 100_000;
/// Zipf exponent of user popularity.
pub const ZIPF_S: f64 = 1.1;

/// Hash-chain steps in one work unit. One step is a dependent multiply-xorshift chain of
/// roughly 4 ns on a current x86 core, so a unit is about one microsecond of CPU.
pub const STEPS_PER_UNIT: u64 = 256;
/// Median work units of the light endpoint; the mix of endpoints then averages ~200 us.
pub const MEDIAN_UNITS: f64 = 45.0;
/// Log-normal shape: p99/median = exp(2.326 * sigma) = 10.
pub const COST_SIGMA: f64 = 0.99;
/// The heaviest user costs at most this multiple of the median, so one request can never
/// take seconds.
pub const MAX_COST_FACTOR: f64 = 60.0;
/// Work units of one simulated downstream read (a lookup in a remote store).
pub const READ_UNITS: u64 = 2;
/// Bytes allocated and touched per work unit.
pub const BYTES_PER_UNIT: u64 = 256;
/// Page size used when touching buffers: one write per page makes the page resident.
pub const PAGE_BYTES: usize = 4096;

/// The three API endpoints of the sample service, with their cost profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// Heavy: ranks many items.
    Feed,
    /// Light: one lookup.
    Profile,
    /// Medium CPU, but allocates the most memory per unit.
    Search,
}

impl Endpoint {
    pub const ALL: [Endpoint; 3] = [Endpoint::Feed, Endpoint::Profile, Endpoint::Search];

    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Feed => "/api/feed",
            Endpoint::Profile => "/api/profile",
            Endpoint::Search => "/api/search",
        }
    }

    pub fn from_path(path: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.path() == path)
    }

    /// CPU multiple over the light endpoint.
    pub fn cpu_factor(self) -> f64 {
        match self {
            Endpoint::Feed => 5.0,
            Endpoint::Profile => 1.0,
            Endpoint::Search => 2.0,
        }
    }

    /// Memory multiple over `BYTES_PER_UNIT`.
    pub fn memory_factor(self) -> u64 {
        match self {
            Endpoint::Feed => 1,
            Endpoint::Profile => 1,
            Endpoint::Search => 4,
        }
    }

    /// Simulated downstream reads per request, before `--extra-reads`.
    pub fn downstream_reads(self) -> u64 {
        match self {
            Endpoint::Feed => 8,
            Endpoint::Profile => 2,
            Endpoint::Search => 4,
        }
    }

    /// Index into per-endpoint counter arrays.
    pub fn index(self) -> usize {
        match self {
            Endpoint::Feed => 0,
            Endpoint::Profile => 1,
            Endpoint::Search => 2,
        }
    }
}

/// A 64-bit finalizer (SplitMix64): a bijection with full avalanche, cheap enough to be
/// the unit of CPU work as well as the hash.
#[inline]
pub fn mix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// FNV-1a over the bytes, then mixed: a stable hash that does not depend on the Rust
/// version (unlike `DefaultHasher`).
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// Maps a hash to [0, 1) using its top 53 bits.
#[inline]
pub fn unit_interval(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A Zipf-like user id in 1..=users from a hash, by inverting the continuous power law on
/// [1, users + 1). Close to a discrete Zipf(s) and needs no table.
pub fn zipf_user(h: u64, users: u64, s: f64) -> u64 {
    let u = unit_interval(h);
    let n = users as f64 + 1.0;
    let x = if (s - 1.0).abs() < 1e-9 {
        n.powf(u)
    } else {
        let a = 1.0 - s;
        (1.0 + u * (n.powf(a) - 1.0)).powf(1.0 / a)
    };
    (x.floor() as u64).clamp(1, users)
}

/// The user a request id stands for, when the request names no user.
pub fn user_for_request_id(request_id: &[u8]) -> u64 {
    zipf_user(hash_bytes(request_id), USERS, ZIPF_S)
}

/// Base work units of one request: log-normal in the user (p99/median = 10 over users),
/// scaled by the endpoint. Deterministic; no clock, no state.
pub fn base_units(endpoint: Endpoint, user: u64) -> f64 {
    // Two independent uniforms from the user and endpoint; Box-Muller gives a standard normal.
    let h1 = mix64(user ^ 0x5a5a_0000_0000_0000 ^ ((endpoint.index() as u64) << 40));
    let h2 = mix64(h1);
    let u1 = 1.0 - unit_interval(h1); // (0, 1]: ln is finite
    let u2 = unit_interval(h2);
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    let factor = (COST_SIGMA * z).exp().min(MAX_COST_FACTOR);
    MEDIAN_UNITS * factor * endpoint.cpu_factor()
}

/// Multiplier of a JIT-like warm-up: 3x at the first request, falling linearly to 1x at
/// `warmup_s`.
pub fn warmup_factor(since_first_request_s: f64, warmup_s: f64) -> f64 {
    if warmup_s <= 0.0 || since_first_request_s >= warmup_s {
        1.0
    } else {
        1.0 + 2.0 * (1.0 - since_first_request_s.max(0.0) / warmup_s)
    }
}

/// Work units actually done for a request: its base cost with the warm-up and the
/// `--regress-cpu` fraction applied, plus the downstream reads.
pub fn effective_units(base_units: f64, warm_factor: f64, regress_cpu: f64, reads: u64) -> u64 {
    let compute = (base_units * warm_factor * (1.0 + regress_cpu))
        .round()
        .max(1.0) as u64;
    compute + reads * READ_UNITS
}

/// Burns `units` work units of real CPU: a dependent hash chain the compiler cannot skip,
/// because the result is returned (and the server puts it in the response body).
#[inline(never)]
pub fn burn(seed: u64, units: u64) -> u64 {
    let mut x = seed;
    for _ in 0..units.saturating_mul(STEPS_PER_UNIT) {
        x = mix64(x);
    }
    x
}

/// Writes one byte per page so the whole buffer is resident, and folds the buffer into a
/// value so the writes cannot be elided.
pub fn touch(buffer: &mut [u8], seed: u64) -> u64 {
    let mut acc = seed;
    let mut i = 0;
    while i < buffer.len() {
        buffer[i] = (acc as u8) | 1;
        acc = acc.rotate_left(5) ^ u64::from(buffer[i]) ^ i as u64;
        i += PAGE_BYTES;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantile(sorted: &[f64], q: f64) -> f64 {
        sorted[((sorted.len() - 1) as f64 * q).round() as usize]
    }

    #[test]
    fn the_same_user_always_costs_the_same() {
        assert_eq!(
            base_units(Endpoint::Feed, 42),
            base_units(Endpoint::Feed, 42)
        );
        assert_ne!(
            base_units(Endpoint::Feed, 42),
            base_units(Endpoint::Feed, 43)
        );
    }

    #[test]
    fn the_same_request_id_is_the_same_user() {
        let a = user_for_request_id(b"req-000017");
        assert_eq!(a, user_for_request_id(b"req-000017"));
        assert!((1..=USERS).contains(&a));
    }

    #[test]
    fn costs_over_users_are_heavy_tailed_with_p99_about_ten_times_the_median() {
        let mut costs: Vec<f64> = (1..=20_000)
            .map(|u| base_units(Endpoint::Profile, u))
            .collect();
        costs.sort_by(|a, b| a.total_cmp(b));
        let median = quantile(&costs, 0.5);
        let ratio = quantile(&costs, 0.99) / median;
        assert!(
            (median / MEDIAN_UNITS - 1.0).abs() < 0.05,
            "median {median}"
        );
        assert!((8.0..12.5).contains(&ratio), "p99/median {ratio}");
    }

    #[test]
    fn heavy_endpoints_cost_more_than_light_ones_for_the_same_users() {
        let total =
            |e: Endpoint| -> f64 { (1..=5_000).map(|u| base_units(e, u)).sum::<f64>() / 5_000.0 };
        let (feed, search, profile) = (
            total(Endpoint::Feed),
            total(Endpoint::Search),
            total(Endpoint::Profile),
        );
        assert!(
            feed > 3.0 * profile && search > 1.5 * profile,
            "{feed} {search} {profile}"
        );
    }

    #[test]
    fn zipf_users_favour_low_ids_and_stay_in_range() {
        let users: Vec<u64> = (0..50_000u64)
            .map(|i| zipf_user(mix64(i), USERS, ZIPF_S))
            .collect();
        assert!(users.iter().all(|&u| (1..=USERS).contains(&u)));
        let top_ten = users.iter().filter(|&&u| u <= 10).count() as f64 / users.len() as f64;
        // Zipf(1.1) over 100k ids puts roughly a third of the mass on the first ten ids.
        assert!(
            (0.2..0.5).contains(&top_ten),
            "share of ids 1..=10: {top_ten}"
        );
    }

    #[test]
    fn warmup_decays_from_three_to_one() {
        assert_eq!(warmup_factor(0.0, 10.0), 3.0);
        assert!((warmup_factor(5.0, 10.0) - 2.0).abs() < 1e-12);
        assert_eq!(warmup_factor(10.0, 10.0), 1.0);
        assert_eq!(warmup_factor(0.0, 0.0), 1.0);
    }

    #[test]
    fn regress_cpu_adds_the_fraction_of_work() {
        let base = effective_units(1000.0, 1.0, 0.0, 0);
        let slower = effective_units(1000.0, 1.0, 0.03, 0);
        assert_eq!((base, slower), (1000, 1030));
        assert_eq!(effective_units(1000.0, 1.0, 0.0, 3), 1000 + 3 * READ_UNITS);
    }

    #[test]
    fn burn_depends_on_every_step() {
        assert_ne!(burn(1, 1), burn(1, 2));
        assert_eq!(burn(7, 3), burn(7, 3));
    }

    #[test]
    fn touch_writes_every_page() {
        let mut buf = vec![0u8; PAGE_BYTES * 3 + 1];
        touch(&mut buf, 0x0101_0101_0101_0101);
        assert!(
            buf.iter().step_by(PAGE_BYTES).all(|&b| b != 0),
            "one byte per page"
        );
    }
}
