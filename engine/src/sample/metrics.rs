//! The sample service's `/metrics`: request counters, latency histograms and process facts.
//!
//! Everything a worker updates is an atomic, so workers never contend on a lock; rendering
//! reads the atomics one by one (a scrape may see a request in a bucket before the count).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::sample::cost::Endpoint;

/// Upper bounds of the histograms' buckets in seconds (Prometheus `le`), without `+Inf`.
pub const BUCKET_BOUNDS_S: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0,
];
/// The same bounds in nanoseconds, as observations are made.
const BUCKET_BOUNDS_NS: [u64; 12] = [
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
];

/// A Prometheus histogram of durations: per-bucket counts (not cumulative; rendering sums
/// them) and the sum in nanoseconds, so an observation is two relaxed atomic adds.
#[derive(Default)]
pub struct SecondsHistogram {
    counts: [AtomicU64; BUCKET_BOUNDS_NS.len() + 1],
    sum_ns: AtomicU64,
}

impl SecondsHistogram {
    pub fn observe_ns(&self, ns: u64) {
        let bucket = BUCKET_BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Appends the `_bucket` (cumulative), `_sum` (seconds) and `_count` series.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let mut cumulative = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            match BUCKET_BOUNDS_S.get(i) {
                Some(le) => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cumulative}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {cumulative}");
                }
            }
        }
        let sum_s = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum {sum_s:.9}");
        let _ = writeln!(out, "{name}_count {cumulative}");
    }
}

/// Counters behind /metrics; atomics so workers never contend on a lock.
pub(crate) struct Metrics {
    /// [route][status] request counts.
    requests: [[AtomicU64; Status::COUNT]; Route::COUNT],
    pub(crate) reads: [AtomicU64; 3],
    pub(crate) work_units: AtomicU64,
    start_unix_s: f64,
    pub(crate) first_api_request: OnceLock<Instant>,
    /// Request counter used as the user source when a request names neither a user nor a
    /// request id.
    pub(crate) anonymous: AtomicU64,
    /// API requests the cache could not answer (they were answered 503).
    pub(crate) cache_errors: AtomicU64,
    /// Arrival (kernel receive time, else read time) to the start of the request's handling.
    pub(crate) queue: SecondsHistogram,
    /// Of `queue`'s observations, those whose arrival was the read's time because the kernel
    /// gave no receive timestamp: their wait in the socket's buffer was not seen.
    pub(crate) queue_unstamped: AtomicU64,
    /// The request's own work: CPU burn or sleep, and memory touching.
    pub(crate) work: SecondsHistogram,
    /// The round trip to `--cache`.
    pub(crate) cache_wait: SecondsHistogram,
    /// Requests that stalled their worker (`--stall-every`).
    pub(crate) stalls: AtomicU64,
    /// Functions the op endpoints looked up in a worker's `--code-cache`, and those missed.
    pub(crate) code_cache_lookups: AtomicU64,
    pub(crate) code_cache_misses: AtomicU64,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let start_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        Metrics {
            requests: Default::default(),
            reads: Default::default(),
            work_units: AtomicU64::new(0),
            start_unix_s,
            first_api_request: OnceLock::new(),
            anonymous: AtomicU64::new(0),
            cache_errors: AtomicU64::new(0),
            queue: SecondsHistogram::default(),
            queue_unstamped: AtomicU64::new(0),
            work: SecondsHistogram::default(),
            cache_wait: SecondsHistogram::default(),
            stalls: AtomicU64::new(0),
            code_cache_lookups: AtomicU64::new(0),
            code_cache_misses: AtomicU64::new(0),
        }
    }

    fn since_first_request_s(&self) -> Option<f64> {
        self.first_api_request
            .get()
            .map(|t| t.elapsed().as_secs_f64())
    }

    pub(crate) fn is_warm(&self, warmup_s: f64) -> bool {
        warmup_s <= 0.0 || self.since_first_request_s().is_some_and(|s| s >= warmup_s)
    }

    pub(crate) fn count(&self, route: Route, status: Status) {
        self.requests[route as usize][status as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition; `stall_seed` is the `--stall-seed` in force, exported so that a run's
    /// stalled requests can be chosen again.
    pub(crate) fn render(&self, warmup_s: f64, stall_seed: Option<u32>) -> String {
        let mut out = String::with_capacity(2048);
        out.push_str("# HELP sample_requests_total Requests answered, by endpoint and status.\n");
        out.push_str("# TYPE sample_requests_total counter\n");
        for route in Route::ALL {
            for status in Status::ALL {
                let n = self.requests[route as usize][status as usize].load(Ordering::Relaxed);
                // The API's 200 series always exist so a scraper sees them from the start.
                if n > 0 || (route.endpoint().is_some() && status == Status::Ok) {
                    let _ = writeln!(
                        out,
                        "sample_requests_total{{endpoint=\"{}\",status=\"{}\"}} {n}",
                        route.label(),
                        status.code()
                    );
                }
            }
        }
        out.push_str(
            "# HELP sample_downstream_reads_total Simulated downstream reads, by endpoint.\n",
        );
        out.push_str("# TYPE sample_downstream_reads_total counter\n");
        for e in Endpoint::ALL {
            let n = self.reads[e.index()].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "sample_downstream_reads_total{{endpoint=\"{}\"}} {n}",
                e.path()
            );
        }
        out.push_str("# HELP sample_cpu_work_units_total CPU work units done (~1 us each).\n");
        out.push_str("# TYPE sample_cpu_work_units_total counter\n");
        let _ = writeln!(
            out,
            "sample_cpu_work_units_total {}",
            self.work_units.load(Ordering::Relaxed)
        );
        out.push_str("# HELP sample_cache_errors_total API requests answered 503 because --cache could not be reached.\n");
        out.push_str("# TYPE sample_cache_errors_total counter\n");
        let _ = writeln!(
            out,
            "sample_cache_errors_total {}",
            self.cache_errors.load(Ordering::Relaxed)
        );
        for (name, help, counter) in [
            (
                "sample_stalls_total",
                "API requests that stalled their worker (--stall-every).",
                &self.stalls,
            ),
            (
                "sample_code_cache_lookups_total",
                "Functions the op endpoints looked up in a worker's --code-cache.",
                &self.code_cache_lookups,
            ),
            (
                "sample_code_cache_misses_total",
                "Code cache lookups that missed (each burns --miss-units of CPU).",
                &self.code_cache_misses,
            ),
            (
                "sample_queue_unstamped_total",
                "API requests in sample_queue_seconds timed from their read, not their arrival: the kernel gave no receive timestamp, so their queueing is under-measured.",
                &self.queue_unstamped,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            let _ = writeln!(out, "{name} {}", counter.load(Ordering::Relaxed));
        }
        self.queue.render(
            &mut out,
            "sample_queue_seconds",
            "API requests: arrival (kernel receive timestamp, else read) to the start of handling.",
        );
        self.work.render(
            &mut out,
            "sample_work_seconds",
            "API requests: their own work (CPU burn or sleep, memory touching).",
        );
        self.cache_wait.render(
            &mut out,
            "sample_cache_wait_seconds",
            "API requests: the round trip to the --cache.",
        );
        if let Some(seed) = stall_seed {
            out.push_str("# HELP sample_stall_seed The seed choosing which requests stall (--stall-seed repeats it).\n");
            out.push_str("# TYPE sample_stall_seed gauge\n");
            let _ = writeln!(out, "sample_stall_seed {seed}");
        }
        out.push_str("# HELP sample_warm 1 once the JIT-like warm-up is over.\n");
        out.push_str("# TYPE sample_warm gauge\n");
        let _ = writeln!(out, "sample_warm {}", u8::from(self.is_warm(warmup_s)));
        out.push_str(
            "# HELP process_start_time_seconds Start time of the process since the Unix epoch.\n",
        );
        out.push_str("# TYPE process_start_time_seconds gauge\n");
        let _ = writeln!(out, "process_start_time_seconds {:.3}", self.start_unix_s);
        if let Some(cpu_s) = process_cpu_s() {
            out.push_str("# HELP process_cpu_seconds_total User and system CPU time.\n");
            out.push_str("# TYPE process_cpu_seconds_total counter\n");
            let _ = writeln!(out, "process_cpu_seconds_total {cpu_s:.6}");
        }
        if let Some(rss) = resident_bytes() {
            out.push_str("# HELP process_resident_memory_bytes Resident memory size.\n");
            out.push_str("# TYPE process_resident_memory_bytes gauge\n");
            let _ = writeln!(out, "process_resident_memory_bytes {rss}");
        }
        out
    }
}

fn process_cpu_s() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage writes a full rusage into the pointer on success.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: rc == 0, so the struct was initialised.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(tv(usage.ru_utime) + tv(usage.ru_stime))
}

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// Every path the service answers, for counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    Feed,
    Profile,
    Search,
    Healthz,
    Warm,
    Metrics,
    /// Any `/api/op/...` path (`--ops`); one series for all ops keeps the count bounded.
    Op,
    DebugProfile,
    Other,
}

impl Route {
    const COUNT: usize = 9;
    const ALL: [Route; Route::COUNT] = [
        Route::Feed,
        Route::Profile,
        Route::Search,
        Route::Healthz,
        Route::Warm,
        Route::Metrics,
        Route::Op,
        Route::DebugProfile,
        Route::Other,
    ];

    pub(crate) fn from_path(path: &str) -> Route {
        match path {
            "/api/feed" => Route::Feed,
            "/api/profile" => Route::Profile,
            "/api/search" => Route::Search,
            "/healthz" => Route::Healthz,
            "/warm" => Route::Warm,
            "/metrics" => Route::Metrics,
            "/debug/profile" => Route::DebugProfile,
            _ if path.starts_with(crate::sample::ops::OP_PREFIX) => Route::Op,
            _ => Route::Other,
        }
    }

    pub(crate) fn endpoint(self) -> Option<Endpoint> {
        match self {
            Route::Feed => Some(Endpoint::Feed),
            Route::Profile => Some(Endpoint::Profile),
            Route::Search => Some(Endpoint::Search),
            _ => None,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Route::Feed => "/api/feed",
            Route::Profile => "/api/profile",
            Route::Search => "/api/search",
            Route::Healthz => "/healthz",
            Route::Warm => "/warm",
            Route::Metrics => "/metrics",
            Route::Op => "/api/op",
            Route::DebugProfile => "/debug/profile",
            // Unknown paths share one label so a scanner cannot blow up the series count.
            Route::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    HeaderTooLarge,
    Unavailable,
}

impl Status {
    const COUNT: usize = 7;
    const ALL: [Status; Status::COUNT] = [
        Status::Ok,
        Status::BadRequest,
        Status::NotFound,
        Status::MethodNotAllowed,
        Status::PayloadTooLarge,
        Status::HeaderTooLarge,
        Status::Unavailable,
    ];

    pub(crate) fn code(self) -> u16 {
        match self {
            Status::Ok => 200,
            Status::BadRequest => 400,
            Status::NotFound => 404,
            Status::MethodNotAllowed => 405,
            Status::PayloadTooLarge => 413,
            Status::HeaderTooLarge => 431,
            Status::Unavailable => 503,
        }
    }

    pub(crate) fn reason(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::BadRequest => "Bad Request",
            Status::NotFound => "Not Found",
            Status::MethodNotAllowed => "Method Not Allowed",
            Status::PayloadTooLarge => "Payload Too Large",
            Status::HeaderTooLarge => "Request Header Fields Too Large",
            Status::Unavailable => "Service Unavailable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_the_first_bucket_whose_bound_they_do_not_pass() {
        let h = SecondsHistogram::default();
        h.observe_ns(1_000); // 1 us
        h.observe_ns(500_000); // exactly 0.5 ms: le="0.0005" holds it
        h.observe_ns(3_000_000); // 3 ms
        h.observe_ns(5_000_000_000); // 5 s: only +Inf
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "help");
        assert!(out.contains("# TYPE x_seconds histogram\n"));
        assert!(out.contains("x_seconds_bucket{le=\"0.0005\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.002\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"0.005\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"2\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_count 4\n"), "{out}");
        assert!(out.contains("x_seconds_sum 5.003501000\n"), "{out}");
        assert_eq!(h.count(), 4);
    }

    #[test]
    fn the_bounds_in_seconds_and_nanoseconds_agree() {
        for (s, ns) in BUCKET_BOUNDS_S.iter().zip(BUCKET_BOUNDS_NS) {
            assert_eq!((s * 1e9).round() as u64, ns);
        }
    }

    #[test]
    fn the_histograms_are_exported_with_zero_counts_before_any_request() {
        let text = Metrics::new().render(0.0, None);
        for name in [
            "sample_queue_seconds",
            "sample_work_seconds",
            "sample_cache_wait_seconds",
        ] {
            assert!(text.contains(&format!("{name}_count 0\n")), "{name}");
            assert!(text.contains(&format!("{name}_bucket{{le=\"+Inf\"}} 0\n")));
        }
        assert!(text.contains("sample_cache_errors_total 0\n"));
        assert!(text.contains("# TYPE sample_code_cache_misses_total counter\n"));
        assert!(text.contains("sample_code_cache_lookups_total 0\n"));
        assert!(text.contains("sample_stalls_total 0\n"));
        assert!(text.contains("# TYPE sample_queue_unstamped_total counter\n"));
        assert!(text.contains("sample_queue_unstamped_total 0\n"));
        assert!(!text.contains("sample_stall_seed"));
        let stalling = Metrics::new().render(0.0, Some(42));
        assert!(stalling.contains("# TYPE sample_stall_seed gauge\nsample_stall_seed 42\n"));
    }
}
