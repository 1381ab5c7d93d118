//! `load`'s flags become a [`Plan`] here, once: every problem of them is found and reported
//! together, before anything is sent; a plan is what the replay runs.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::format::output;
use crate::format::trace::{Trace, TraceError, TraceRequest, MAX_ENDPOINTS};
use crate::load::args::{ArrivalArg, LoadArgs, PaceArg};
use crate::load::pace::{recorded_offsets, Arrival, MAX_RATE_PER_S};
use crate::load::priority::PriorityMode;
use crate::load::targets::{TargetPlan, Targets, URL_EXAMPLE};
use crate::net::http::parse_http_url;

/// Longest phase (`--duration`, `--warmup-duration`, `--warm-timeout`): a week. Phases end at
/// nanosecond deadlines on the monotonic clock, which a longer one would overflow, and a
/// summary of every interval stays in memory until the run ends.
pub const MAX_PHASE_S: f64 = 604_800.0;
/// Longest `--timeout-ms`, `--interval-ms` and `--max-gap-ms`: an hour, the top of the
/// latency histograms.
pub const MAX_MS: u64 = 3_600_000;

/// Longest `--coalesce-us`: a send this early is still within the late gate's 1 ms of its
/// due time, the other way.
pub const MAX_COALESCE_US: u64 = 1_000;

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    pub targets: Vec<TargetPlan>,
    pub bodies: Vec<Vec<u8>>,
    pub head_request: Vec<bool>,
    pub endpoints: Vec<String>,
    pub template_endpoint: Vec<u16>,
    /// `--pace ordered`: each template's key id and the number of keys.
    pub ordered_keys: Option<(Vec<u32>, usize)>,
    pub arrival: Arrival,
    pub arrival_name: &'static str,
    pub pace_name: &'static str,
    pub rate_per_s: f64,
    /// `None`: run until stopped (only with `--control`).
    pub duration_ns: Option<u64>,
    pub warmup_arrival: Arrival,
    pub warmup_rate_per_s: f64,
    pub warmup_ns: u64,
    pub warm_probes: Vec<WarmProbe>,
    pub warm_timeout_ns: u64,
    pub connections: usize,
    pub max_in_flight: usize,
    pub timeout_ns: u64,
    pub interval_ns: u64,
    /// The last stretch before a due time that is spun rather than slept (`--spin-us`).
    pub spin_ns: u64,
    /// How far ahead of its due time a request may go out to share a wake-up with those
    /// due before it (`--coalesce-us`).
    pub coalesce_ns: u64,
    /// The event loop thread's scheduling policy (`--priority`).
    pub priority: PriorityMode,
    pub control: bool,
    pub seed: u64,
}

/// A warm-up probe: GET `path` on `addr` until it answers 2xx.
#[derive(Debug, Clone)]
pub struct WarmProbe {
    pub target: usize,
    pub url: String,
    pub addr: SocketAddr,
    pub host: String,
    pub path: String,
}

/// Why flags make no plan: every problem of them at once, or the trace's.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("invalid arguments:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// Validates every argument, collecting all problems before failing.
pub fn build_plan(args: &LoadArgs) -> Result<Plan, PlanError> {
    let mut problems: Vec<String> = Vec::new();

    let targets = Targets::check(args, &mut problems);

    let trace = match &args.trace {
        Some(path) => Trace::load(path)?,
        None => {
            let mut requests = Vec::new();
            for p in &args.paths {
                if !p.starts_with('/') || p.bytes().any(|b| b <= b' ' || b == 0x7f) {
                    problems.push(format!("--path {p:?}: expected a path starting with '/' without spaces, e.g. /api/feed?user=1"));
                    continue;
                }
                requests.push(TraceRequest {
                    method: "GET".into(),
                    path: p.clone(),
                    headers: Vec::new(),
                    body: Vec::new(),
                    endpoint: p.split('?').next().unwrap_or(p).to_owned(),
                    ts_us: None,
                    key: None,
                });
            }
            Trace { requests }
        }
    };
    let (endpoints, template_endpoint) = trace.endpoints();
    if endpoints.len() > MAX_ENDPOINTS {
        problems.push(format!(
            "the trace has {} endpoint labels, more than the {MAX_ENDPOINTS} the engine keeps \
             statistics for; label it again with fewer (hairline trace import --normalize-ids \
             or --label rules)",
            endpoints.len()
        ));
    }

    let positive = |v: f64| v.is_finite() && v > 0.0;
    let rate_per_s;
    let arrival;
    let arrival_name;
    match args.pace {
        PaceArg::Recorded => {
            let ts: Vec<u64> = trace.requests.iter().filter_map(|r| r.ts_us).collect();
            if !trace.requests.is_empty() && ts.len() != trace.requests.len() {
                let first = trace
                    .requests
                    .iter()
                    .position(|r| r.ts_us.is_none())
                    .unwrap_or(0);
                problems.push(format!(
                    "--pace recorded needs ts_us on every trace request; request {} (line {} if there are no blank lines) has none",
                    first + 1,
                    first + 2
                ));
            }
            if !positive(args.speed) {
                problems.push(format!(
                    "--speed {}: expected a factor > 0, e.g. 1 or 2.5",
                    args.speed
                ));
            }
            if !positive(args.max_gap_ms) || args.max_gap_ms > MAX_MS as f64 {
                problems.push(format!(
                    "--max-gap-ms {}: expected a positive number of milliseconds, at most {MAX_MS}",
                    args.max_gap_ms
                ));
            }
            if args.arrival != ArrivalArg::Constant {
                problems.push("--arrival poisson does not apply to --pace recorded (the recording sets the gaps)".into());
            }
            let (offsets, loop_ns) = recorded_offsets(
                &ts,
                args.speed.max(1e-9),
                (args.max_gap_ms.max(0.0) * 1e6) as u64,
            );
            let recorded = Arrival::Recorded {
                offsets_ns: Arc::new(offsets),
                loop_ns,
            };
            let natural = recorded.natural_rate_per_s().unwrap_or(0.0);
            rate_per_s = match args.rate {
                Some(r) => r,
                None => {
                    if natural > MAX_RATE_PER_S {
                        problems.push(format!(
                            "--pace recorded: the trace's timestamps replay at {natural:.0} requests \
                             per second (--speed {}), more than the {MAX_RATE_PER_S:.0} per second \
                             per target the engine can schedule; lower --speed or give --rate",
                            args.speed
                        ));
                    }
                    natural
                }
            };
            arrival = recorded;
            arrival_name = "recorded";
        }
        PaceArg::Rate | PaceArg::Ordered => {
            rate_per_s = match args.rate {
                Some(r) => r,
                None => {
                    problems
                        .push("--rate is required (requests per second), e.g. --rate 1000".into());
                    0.0
                }
            };
            (arrival, arrival_name) = match args.arrival {
                ArrivalArg::Constant => (Arrival::Constant, "constant"),
                ArrivalArg::Poisson => (Arrival::Poisson { seed: args.seed }, "poisson"),
            };
        }
    }
    if args.rate.is_some() && !(rate_per_s.is_finite() && rate_per_s > 0.0) {
        problems.push(format!(
            "--rate {rate_per_s}: expected a positive number of requests per second"
        ));
    } else if args.rate.is_some() && rate_per_s > MAX_RATE_PER_S {
        problems.push(format!(
            "--rate {rate_per_s}: the engine schedules at most {MAX_RATE_PER_S:.0} requests per \
             second per target (one per microsecond)"
        ));
    }
    let warmup_rate_per_s = args.warmup_rate.unwrap_or(rate_per_s);
    if !(warmup_rate_per_s.is_finite() && warmup_rate_per_s >= 0.0) {
        problems.push(format!(
            "--warmup-rate {warmup_rate_per_s}: expected a number >= 0"
        ));
    } else if args.warmup_rate.is_some() && warmup_rate_per_s > MAX_RATE_PER_S {
        problems.push(format!(
            "--warmup-rate {warmup_rate_per_s}: the engine schedules at most \
             {MAX_RATE_PER_S:.0} requests per second per target (one per microsecond)"
        ));
    }
    let warmup_arrival = match args.arrival {
        ArrivalArg::Poisson => Arrival::Poisson {
            seed: args.seed ^ 0x5741_524D,
        },
        ArrivalArg::Constant => Arrival::Constant,
    };
    let duration_ns = if args.duration.is_finite() && args.duration > MAX_PHASE_S {
        problems.push(format!(
            "--duration {}: at most {MAX_PHASE_S:.0} seconds (a week); for a run without an \
             end, use --control with --duration 0 and stop it",
            args.duration
        ));
        None
    } else if args.duration.is_finite() && args.duration > 0.0 {
        Some((args.duration * 1e9) as u64)
    } else if args.duration == 0.0 && args.control {
        None
    } else {
        problems.push(format!(
            "--duration {}: expected a positive number of seconds (0 is allowed only with --control)",
            args.duration
        ));
        None
    };
    if !(args.warmup_duration.is_finite()
        && args.warmup_duration >= 0.0
        && args.warmup_duration <= MAX_PHASE_S)
    {
        problems.push(format!(
            "--warmup-duration {}: expected seconds >= 0, at most {MAX_PHASE_S:.0} (a week)",
            args.warmup_duration
        ));
    }
    if !positive(args.warm_timeout) || args.warm_timeout > MAX_PHASE_S {
        problems.push(format!(
            "--warm-timeout {}: expected a positive number of seconds, at most {MAX_PHASE_S:.0} \
             (a week)",
            args.warm_timeout
        ));
    }
    if args.connections == 0 || args.connections > 100_000 {
        problems.push(format!(
            "--connections {}: expected 1 to 100000",
            args.connections
        ));
    }
    if args.max_in_flight == 0 {
        problems.push("--max-in-flight 0: expected at least 1".into());
    }
    if args.timeout_ms == 0 || args.timeout_ms > MAX_MS {
        problems.push(format!(
            "--timeout-ms {}: expected a positive number of milliseconds, at most {MAX_MS} (an hour)",
            args.timeout_ms
        ));
    }
    if args.interval_ms == 0 || args.interval_ms > MAX_MS {
        problems.push(format!(
            "--interval-ms {}: expected a positive number of milliseconds, at most {MAX_MS} (an hour)",
            args.interval_ms
        ));
    }
    if args.spin_us > 1_000_000 {
        problems.push(format!(
            "--spin-us {}: expected 0 to 1000000 microseconds (150 is the default)",
            args.spin_us
        ));
    }

    if args.coalesce_us > MAX_COALESCE_US {
        problems.push(format!(
            "--coalesce-us {}: expected 0 to {MAX_COALESCE_US} microseconds (0, the default, \
             sends each request on its own wake-up)",
            args.coalesce_us
        ));
    }

    let warm_probes = warm_probes(args, &targets, &mut problems);

    check_outputs(args, &mut problems);

    if !problems.is_empty() {
        return Err(PlanError::Invalid(problems));
    }

    let head_request: Vec<bool> = trace.requests.iter().map(|r| r.method == "HEAD").collect();
    let bodies: Vec<Vec<u8>> = trace.requests.iter().map(|r| r.body.clone()).collect();
    let targets = targets.into_plans(&trace);
    let ordered_keys = (args.pace == PaceArg::Ordered).then(|| trace.key_ids());

    Ok(Plan {
        targets,
        bodies,
        head_request,
        endpoints,
        template_endpoint,
        ordered_keys,
        arrival,
        arrival_name,
        pace_name: match args.pace {
            PaceArg::Rate => "rate",
            PaceArg::Recorded => "recorded",
            PaceArg::Ordered => "ordered",
        },
        rate_per_s,
        duration_ns,
        warmup_arrival,
        warmup_rate_per_s,
        warmup_ns: (args.warmup_duration * 1e9) as u64,
        warm_probes,
        warm_timeout_ns: (args.warm_timeout * 1e9) as u64,
        connections: args.connections,
        max_in_flight: args.max_in_flight,
        timeout_ns: args.timeout_ms * 1_000_000,
        interval_ns: args.interval_ms * 1_000_000,
        spin_ns: args.spin_us * 1_000,
        coalesce_ns: args.coalesce_us * 1_000,
        priority: args.priority,
        control: args.control,
        seed: args.seed,
    })
}

/// `--warm-url`: either one plain URL per target, in target order, or NAME=URL for any
/// subset of them.
fn warm_probes(args: &LoadArgs, targets: &Targets, problems: &mut Vec<String>) -> Vec<WarmProbe> {
    let mut warm_probes: Vec<WarmProbe> = Vec::new();
    let named = args
        .warm_urls
        .iter()
        .filter(|u| !u.starts_with("http"))
        .count();
    if named > 0 && named < args.warm_urls.len() {
        problems.push("--warm-url: use either plain URLs (one per target, in order) or NAME=URL for each, not both".into());
    } else if named == 0 && !args.warm_urls.is_empty() && args.warm_urls.len() != targets.len() {
        problems.push(format!(
            "--warm-url given {} times for {} targets; give one per target in target order, \
             or NAME=URL for the targets that have one",
            args.warm_urls.len(),
            targets.len()
        ));
    } else {
        for (i, spec) in args.warm_urls.iter().enumerate() {
            let (target, url) = if named == 0 {
                (Some(i), spec.as_str())
            } else {
                match spec.split_once('=') {
                    Some((name, url)) => (targets.index_of(name), url),
                    None => (None, spec.as_str()),
                }
            };
            let Some(target) = target else {
                problems.push(format!(
                    "--warm-url {spec}: expected NAME=URL with NAME one of the targets"
                ));
                continue;
            };
            if warm_probes.iter().any(|p| p.target == target) {
                problems.push(format!(
                    "--warm-url {spec}: a second warm URL for the same target"
                ));
                continue;
            }
            match parse_http_url(url) {
                Ok(parsed) => warm_probes.push(WarmProbe {
                    target,
                    url: url.to_owned(),
                    addr: parsed.addr,
                    host: parsed.authority,
                    path: parsed.path_and_query,
                }),
                Err(why) => problems.push(format!(
                    "--warm-url {spec}: {why}; write e.g. {URL_EXAMPLE}/warm"
                )),
            }
        }
    }
    warm_probes
}

/// `--summary`, `--requests` and `--hdr-log`: writable, and each its own file.
fn check_outputs(args: &LoadArgs, problems: &mut Vec<String>) {
    let outputs = [
        ("--summary", &args.summary),
        ("--requests", &args.requests),
        ("--hdr-log", &args.hdr_log),
    ];
    for (i, (flag, path)) in outputs.iter().enumerate() {
        let Some(path) = path else { continue };
        if let Some(why) = output::path_problem(path) {
            problems.push(format!("{flag} {}: {why}", path.display()));
        }
        if let Some((other, _)) = outputs[..i].iter().find(|(_, p)| p.as_ref() == Some(path)) {
            problems.push(format!(
                "{flag} {}: the same file as {other}; give each output its own file",
                path.display()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: LoadArgs,
    }

    fn args(extra: &[&str]) -> LoadArgs {
        let mut argv = vec!["load"];
        argv.extend_from_slice(extra);
        Cli::parse_from(argv).args
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let a = args(&[
            "--target",
            "nourl",
            "--path",
            "/x",
            "--rate=-1",
            "--duration",
            "0",
            "--connections",
            "0",
        ]);
        let Err(PlanError::Invalid(problems)) = build_plan(&a) else {
            panic!("expected invalid")
        };
        let text = problems.join("\n");
        assert!(text.contains("--target nourl: expected NAME=URL"), "{text}");
        assert!(text.contains("--rate -1"), "{text}");
        assert!(text.contains("--duration 0"), "{text}");
        assert!(text.contains("--connections 0"), "{text}");
    }

    #[test]
    fn what_cannot_be_scheduled_is_refused_naming_the_flag_and_the_limit() {
        let a = args(&[
            "--target",
            "a=http://127.0.0.1:1",
            "--path",
            "/",
            "--rate",
            "1e12",
            "--duration",
            "1e12",
            "--warmup-duration",
            "1e9",
            "--timeout-ms",
            "18446744073709551615",
            "--interval-ms",
            "3600001",
        ]);
        let Err(PlanError::Invalid(problems)) = build_plan(&a) else {
            panic!("expected invalid")
        };
        let text = problems.join("\n");
        for expected in [
            "--rate 1000000000000: the engine schedules at most 1000000 requests per second",
            "--duration 1000000000000: at most 604800 seconds",
            "--warmup-duration 1000000000: expected seconds >= 0, at most 604800",
            "--timeout-ms 18446744073709551615: expected a positive number of milliseconds, at most 3600000",
            "--interval-ms 3600001",
        ] {
            assert!(text.contains(expected), "{expected}\n{text}");
        }

        // A recording whose requests all share one instant replays at an infinite rate.
        let trace =
            std::env::temp_dir().join(format!("hairline-burst-{}.jsonl", std::process::id()));
        let mut text = String::from("{\"hairline_trace\": 1}\n");
        for _ in 0..3 {
            text.push_str("{\"path\": \"/\", \"ts_us\": 5}\n");
        }
        std::fs::write(&trace, text).expect("temp dir is writable");
        let trace_arg = trace.to_string_lossy().into_owned();
        let a = args(&[
            "--target",
            "a=http://127.0.0.1:1",
            "--trace",
            &trace_arg,
            "--pace",
            "recorded",
            "--duration",
            "1",
        ]);
        let outcome = build_plan(&a);
        let _ = std::fs::remove_file(&trace);
        let Err(PlanError::Invalid(problems)) = outcome else {
            panic!("expected invalid")
        };
        assert!(
            problems[0].contains("lower --speed or give --rate"),
            "{problems:?}"
        );
    }

    #[test]
    fn rewrites_apply_to_one_target_only() {
        let a = args(&[
            "--target",
            "a=http://127.0.0.1:1/base/",
            "--target",
            "b=http://127.0.0.1:2",
            "--path",
            "/api/feed?user=1",
            "--rate",
            "10",
            "--duration",
            "1",
            "--set-header",
            "b:x-shard=3",
            "--host",
            "b=api.example",
        ]);
        let plan = build_plan(&a).expect("valid");
        let head_a = String::from_utf8(plan.targets[0].heads[0].clone()).expect("ascii");
        let head_b = String::from_utf8(plan.targets[1].heads[0].clone()).expect("ascii");
        assert_eq!(
            head_a,
            "GET /base/api/feed?user=1 HTTP/1.1\r\nhost: 127.0.0.1:1\r\n"
        );
        assert_eq!(
            head_b,
            "GET /api/feed?user=1 HTTP/1.1\r\nhost: api.example\r\nx-shard: 3\r\n"
        );
        assert_eq!(plan.endpoints, vec!["/api/feed"]);
    }

    #[test]
    fn set_header_leaves_the_engines_own_headers_alone() {
        let base = [
            "--target",
            "b=http://127.0.0.1:2",
            "--path",
            "/",
            "--rate",
            "10",
            "--duration",
            "1",
        ];
        for (spec, expected) in [
            (
                "b:HOST=api.example",
                "Host itself; write --host b=api.example",
            ),
            ("b:content-length=0", "(the trace's body_b64); leave it out"),
            (
                "b:Transfer-Encoding=chunked",
                "frames each request's body itself",
            ),
            ("b:connection=close", "keeps its connections alive itself"),
            ("b:x-hairline-request-id=7", "numbers every request itself"),
            ("b:x-a=1\u{1}2", "the value of x-a has a control character"),
            ("b:x_under=1", ""),
            ("b:x-tab=a\tb", ""),
        ] {
            let mut argv = base.to_vec();
            argv.extend(["--set-header", spec]);
            match build_plan(&args(&argv)) {
                Ok(_) => assert!(expected.is_empty(), "{spec} was accepted"),
                Err(PlanError::Invalid(problems)) => {
                    assert!(!expected.is_empty(), "{spec}: {problems:?}");
                    assert!(
                        problems[0].starts_with(&format!("--set-header {spec}: "))
                            && problems[0].contains(expected),
                        "{problems:?}"
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn warm_urls_are_positional_or_named() {
        let base = [
            "--target",
            "a=http://127.0.0.1:1",
            "--target",
            "b=http://127.0.0.1:2",
            "--path",
            "/",
            "--rate",
            "10",
            "--duration",
            "1",
        ];
        let mut named = base.to_vec();
        named.extend(["--warm-url", "b=http://127.0.0.1:2/warm"]);
        let plan = build_plan(&args(&named)).expect("valid");
        assert_eq!(plan.warm_probes.len(), 1);
        assert_eq!(plan.warm_probes[0].target, 1);
        assert_eq!(plan.warm_probes[0].path, "/warm");
        let mut mixed = base.to_vec();
        mixed.extend([
            "--warm-url",
            "b=http://127.0.0.1:2/warm",
            "--warm-url",
            "http://127.0.0.1:1/warm",
        ]);
        let Err(PlanError::Invalid(problems)) = build_plan(&args(&mixed)) else {
            panic!("expected invalid")
        };
        assert!(problems[0].contains("not both"), "{problems:?}");
    }

    #[test]
    fn rewrites_must_name_a_known_target() {
        let a = args(&[
            "--target",
            "a=http://127.0.0.1:1",
            "--path",
            "/",
            "--rate",
            "10",
            "--duration",
            "1",
            "--set-header",
            "zz:x=1",
            "--host",
            "a",
            "--warm-url",
            "http://127.0.0.1:1/w",
            "--warm-url",
            "http://127.0.0.1:1/w",
        ]);
        let Err(PlanError::Invalid(problems)) = build_plan(&a) else {
            panic!("expected invalid")
        };
        let text = problems.join("\n");
        assert!(text.contains("no target named \"zz\""), "{text}");
        assert!(text.contains("--host a: expected NAME=host"), "{text}");
    }
}
