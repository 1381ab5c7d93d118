//! `hairline-engine load`: command-line arguments become a validated [`Plan`] here, once;
//! `replay` runs it; the summary, request records and HDR log are written from here.
//!
//! Exit codes: 0 done, 1 a validity gate failed and `--strict` was given, 2 an error
//! (returned as [`LoadError`]).

pub mod client;
pub mod histogram;
pub mod pace;
pub mod priority;
pub mod replay;
pub mod validity;

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::ValueEnum;

use crate::format::output::{self, Staged};
use crate::format::request_log;
use crate::format::trace::{
    is_header_value, is_token_byte, Trace, TraceError, TraceRequest, MAX_ENDPOINTS,
};
use crate::load::pace::{recorded_offsets, Arrival, MAX_RATE_PER_S};
use crate::net::http::parse_http_url;
use replay::{Plan, ReplayError, Sinks, TargetPlan, WarmProbe};

/// How a URL is written, for messages.
const URL_EXAMPLE: &str = "http://127.0.0.1:8080";

/// Longest phase (`--duration`, `--warmup-duration`, `--warm-timeout`): a week. Phases end at
/// nanosecond deadlines on the monotonic clock, which a longer one would overflow, and a
/// summary of every interval stays in memory until the run ends.
pub const MAX_PHASE_S: f64 = 604_800.0;
/// Longest `--timeout-ms`, `--interval-ms` and `--max-gap-ms`: an hour, the top of the
/// latency histograms.
pub const MAX_MS: u64 = 3_600_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ArrivalArg {
    Constant,
    Poisson,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PaceArg {
    /// Loop the trace at --rate.
    Rate,
    /// Recorded timestamps (ts_us), scaled by --speed, gaps clamped to --max-gap-ms.
    Recorded,
    /// Like rate, but requests sharing a key wait for the previous one on each target.
    Ordered,
}

/// Replay one open-loop request stream to every target in lockstep.
#[derive(clap::Args, Debug, Clone)]
// A negative number is a value for the range checks to name (`--duration -1`), not a flag.
#[command(allow_negative_numbers = true)]
pub struct LoadArgs {
    /// A target as NAME=URL (http://host:port[/prefix]); repeat for each arm, in order.
    #[arg(long = "target", value_name = "NAME=URL", required = true)]
    pub targets: Vec<String>,
    /// JSONL trace to replay (docs/trace-format.md).
    #[arg(long, value_name = "FILE", conflicts_with = "paths")]
    pub trace: Option<PathBuf>,
    /// Request path with query (GET); repeat to cycle through several.
    #[arg(long = "path", value_name = "PATH", required_unless_present = "trace")]
    pub paths: Vec<String>,
    /// Requests per second (not needed with --pace recorded).
    #[arg(long, value_name = "PER_S")]
    pub rate: Option<f64>,
    #[arg(long, value_enum, default_value = "constant")]
    pub arrival: ArrivalArg,
    /// Seed of the Poisson schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Length of the measurement phase in seconds (0 with --control: until stopped).
    #[arg(long, value_name = "SECS")]
    pub duration: f64,
    /// Rate of the warm-up phase (default: --rate).
    #[arg(long, value_name = "PER_S")]
    pub warmup_rate: Option<f64>,
    /// Length of the warm-up phase in seconds; nothing in it is measured.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub warmup_duration: f64,
    /// URL that answers 2xx once a target is warm: one per target in target order, or
    /// NAME=URL for the targets that have one.
    #[arg(long = "warm-url", value_name = "[NAME=]URL")]
    pub warm_urls: Vec<String>,
    /// Give up (exit 2) when a target is not warm after this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub warm_timeout: f64,
    /// Keep-alive connections per target.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Requests outstanding per target beyond which new ones are dropped (and counted).
    #[arg(long, default_value_t = 10_000)]
    pub max_in_flight: usize,
    /// Connect and request timeout in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000)]
    pub timeout_ms: u64,
    /// Length of a statistics interval in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub interval_ms: u64,
    /// Spin (poll without sleeping) this long before each due time instead of trusting the
    /// timer's wake-up; 0 sleeps on the timer alone. Use 0 when the engine shares a CPU with
    /// a service under test: spinning takes that CPU from it.
    #[arg(long, value_name = "US", default_value_t = 150)]
    pub spin_us: u64,
    /// The event loop's scheduling: `auto` asks for real-time priority when it sleeps
    /// between sends (it shares a CPU with a service) and nice -10 when it spins, keeping
    /// the default where refused; the summary's `scheduling` says what it got.
    #[arg(long, value_enum, default_value = "auto")]
    pub priority: crate::load::priority::PriorityMode,
    /// Write the summary JSON here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Write one binary record per request per target here (docs/engine.md).
    #[arg(long, value_name = "FILE")]
    pub requests: Option<PathBuf>,
    /// Write an HdrHistogram interval log (V2, compressed; one tag per target) here.
    #[arg(long, value_name = "FILE")]
    pub hdr_log: Option<PathBuf>,
    /// Read {"rate_per_s": R} / {"stop": true} lines from stdin; print interval lines.
    #[arg(long)]
    pub control: bool,
    /// Exit 1 when a validity gate fails.
    #[arg(long)]
    pub strict: bool,
    /// Check the arguments and the trace as a run would, print nothing and exit 0 (or 2
    /// with every problem); send nothing. Callers ask this instead of repeating the rules.
    #[arg(long)]
    pub check: bool,
    #[arg(long, value_enum, default_value = "rate")]
    pub pace: PaceArg,
    /// --pace recorded: replay speed factor (2 = twice as fast).
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// --pace recorded: longest gap between two requests, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000.0)]
    pub max_gap_ms: f64,
    /// Add or replace a header on one target: NAME:Header=Value.
    #[arg(long = "set-header", value_name = "NAME:HEADER=VALUE")]
    pub set_headers: Vec<String>,
    /// Override the Host header of one target: NAME=host.
    #[arg(long = "host", value_name = "NAME=HOST")]
    pub hosts: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid arguments:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("cannot create {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot install the signal handler: {0}")]
    Signal(std::io::Error),
    #[error(transparent)]
    Replay(#[from] ReplayError),
}

pub fn run(args: LoadArgs) -> Result<ExitCode, LoadError> {
    let plan = build_plan(&args)?;
    if args.check {
        return Ok(ExitCode::SUCCESS);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(LoadError::Signal)?;
    }
    // Every output is created before the run, so that a bad path fails in a second rather
    // than after the whole run, and is put in place only when the run has succeeded.
    let create = |path: &PathBuf| {
        Staged::create(path)
            .map(|(staged, f)| (staged, BufWriter::with_capacity(1 << 20, f)))
            .map_err(|source| LoadError::Create {
                path: path.clone(),
                source,
            })
    };
    let mut staged: Vec<Staged> = Vec::new();
    let mut sinks = Sinks::default();
    if let Some(path) = &args.requests {
        let (file, mut w) = create(path)?;
        staged.push(file);
        request_log::write_header(&mut w).map_err(|source| LoadError::Write {
            path: path.clone(),
            source,
        })?;
        sinks.requests = Some(w);
    }
    if let Some(path) = &args.hdr_log {
        let (file, w) = create(path)?;
        staged.push(file);
        sinks.hdr_log = Some(w);
    }
    let summary_file = match &args.summary {
        Some(path) => Some(create(path)?),
        None => None,
    };
    // The sinks are flushed and closed by the time the run returns.
    let summary = replay::run(&plan, sinks, stop)?;
    let valid = summary
        .get("valid")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    match (summary_file, &args.summary) {
        (Some((file, mut w)), Some(path)) => {
            serde_json::to_writer_pretty(&mut w, &summary)
                .map_err(std::io::Error::from)
                .and_then(|()| w.write_all(b"\n"))
                .and_then(|()| w.flush())
                .map_err(|source| LoadError::Write {
                    path: path.clone(),
                    source,
                })?;
            // Last, so that a summary in place means the other outputs are too.
            staged.push(file);
        }
        _ => {
            let mut out = std::io::stdout().lock();
            let text = if args.control {
                // Under --control stdout is a stream of JSON lines; the summary is the last.
                serde_json::to_string(&summary)
            } else {
                serde_json::to_string_pretty(&summary)
            };
            let text = text.map_err(|e| LoadError::Write {
                path: "<stdout>".into(),
                source: e.into(),
            })?;
            writeln!(out, "{text}")
                .and_then(|()| out.flush())
                .map_err(|source| LoadError::Write {
                    path: "<stdout>".into(),
                    source,
                })?;
        }
    }
    for file in staged {
        let path = file.path().to_owned();
        file.commit()
            .map_err(|source| LoadError::Write { path, source })?;
    }
    if args.strict && !valid {
        eprintln!("hairline-engine: the run failed a validity gate (see \"gates\" in the summary)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

struct ParsedTarget {
    name: String,
    url: String,
    addr: SocketAddr,
    authority: String,
    prefix: String,
}

/// Validates every argument, collecting all problems before failing.
pub fn build_plan(args: &LoadArgs) -> Result<Plan, LoadError> {
    let mut problems: Vec<String> = Vec::new();

    let mut targets: Vec<ParsedTarget> = Vec::new();
    for spec in &args.targets {
        match parse_target(spec) {
            Ok(t) => {
                if targets.iter().any(|o| o.name == t.name) {
                    problems.push(format!("--target {spec}: the name {:?} is used twice; give each target its own name", t.name));
                } else {
                    targets.push(t);
                }
            }
            Err(msg) => problems.push(format!("--target {spec}: {msg}")),
        }
    }
    if targets.len() > u16::MAX as usize {
        problems.push("too many --target (at most 65535)".into());
    }
    let index_of = |name: &str| targets.iter().position(|t| t.name == name);

    let mut host_override: HashMap<usize, String> = HashMap::new();
    for spec in &args.hosts {
        match spec.split_once('=') {
            Some((name, host))
                if !host.is_empty() && host.bytes().all(|b| b > b' ' && b != 0x7f) =>
            {
                match index_of(name) {
                    Some(i) => {
                        host_override.insert(i, host.to_owned());
                    }
                    None => problems.push(format!("--host {spec}: no target named {name:?}")),
                }
            }
            _ => problems.push(format!(
                "--host {spec}: expected NAME=host, e.g. --host b=api.example.com"
            )),
        }
    }
    let mut set_headers: HashMap<usize, Vec<(String, String)>> = HashMap::new();
    for spec in &args.set_headers {
        let parsed = spec.split_once(':').and_then(|(name, rest)| {
            let (header, value) = rest.split_once('=')?;
            Some((name, header, value))
        });
        match parsed {
            Some((name, header, value))
                if !header.is_empty()
                    && header.bytes().all(is_token_byte)
                    && is_header_value(value) =>
            {
                if let Some(why) = engine_header(header) {
                    let fix = if header.eq_ignore_ascii_case("host") {
                        format!("write --host {name}={value}")
                    } else {
                        "leave it out".to_owned()
                    };
                    problems.push(format!("--set-header {spec}: {why}; {fix}"));
                    continue;
                }
                match index_of(name) {
                    Some(i) => set_headers
                        .entry(i)
                        .or_default()
                        .push((header.to_owned(), value.to_owned())),
                    None => problems.push(format!("--set-header {spec}: no target named {name:?}")),
                }
            }
            Some((_, header, value)) if !header.is_empty() && !is_header_value(value) => problems
                .push(format!(
                    "--set-header {spec}: the value of {header} has a control character; \
                     a header value is text without line breaks"
                )),
            _ => problems.push(format!(
                "--set-header {spec}: expected NAME:Header=Value with Header a token (letters, \
                 digits and !#$%&'*+-.^_`|~), e.g. --set-header b:x-shard=3"
            )),
        }
    }

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

    // Either one plain URL per target, in target order, or NAME=URL for any subset.
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
                    Some((name, url)) => (index_of(name), url),
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

    if !problems.is_empty() {
        return Err(LoadError::Invalid(problems));
    }

    let head_request: Vec<bool> = trace.requests.iter().map(|r| r.method == "HEAD").collect();
    let bodies: Vec<Vec<u8>> = trace.requests.iter().map(|r| r.body.clone()).collect();
    let targets: Vec<TargetPlan> = targets
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            let host = host_override
                .get(&i)
                .cloned()
                .unwrap_or_else(|| t.authority.clone());
            let extra = set_headers.get(&i).map(Vec::as_slice).unwrap_or(&[]);
            let heads = trace
                .requests
                .iter()
                .map(|r| render_head(r, &t.prefix, &host, extra))
                .collect();
            TargetPlan {
                name: t.name,
                url: t.url,
                addr: t.addr,
                heads,
            }
        })
        .collect();
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
        priority: args.priority,
        control: args.control,
        seed: args.seed,
    })
}

fn parse_target(spec: &str) -> Result<ParsedTarget, String> {
    let Some((name, url)) = spec.split_once('=') else {
        return Err("expected NAME=URL, e.g. --target a=http://127.0.0.1:8080".into());
    };
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(format!(
            "target name {name:?} must be letters, digits, '_', '-' or '.'"
        ));
    }
    let parsed = parse_http_url(url).map_err(|why| format!("{why}; write e.g. {URL_EXAMPLE}"))?;
    if parsed.has_query {
        return Err("a target URL has no query; put queries in --path or the trace".into());
    }
    // The fragment is not sent, and url keeps only the path in `path_and_query`.
    let prefix = parsed.path_and_query.trim_end_matches('/').to_owned();
    Ok(ParsedTarget {
        name: name.to_owned(),
        url: url.to_owned(),
        addr: parsed.addr,
        authority: parsed.authority,
        prefix,
    })
}

/// Why a header is the engine's to write, for the headers it writes itself (None for the
/// others). A second copy from `--set-header` or a trace would make a malformed request:
/// two Hosts, or a framing that disagrees with the body sent.
pub fn engine_header(name: &str) -> Option<&'static str> {
    let why = [
        ("host", "the engine sends each target's Host itself"),
        (
            "content-length",
            "the engine frames each request's body itself (the trace's body_b64)",
        ),
        (
            "transfer-encoding",
            "the engine frames each request's body itself (the trace's body_b64)",
        ),
        (
            "connection",
            "the engine keeps its connections alive itself",
        ),
        (
            "x-hairline-request-id",
            "the engine numbers every request itself, the same on every target",
        ),
    ];
    why.iter()
        .find(|(header, _)| name.eq_ignore_ascii_case(header))
        .map(|(_, why)| *why)
}

/// The request head for one target up to the request-id header, which is added per send.
fn render_head(r: &TraceRequest, prefix: &str, host: &str, extra: &[(String, String)]) -> Vec<u8> {
    let mut head = format!(
        "{} {}{} HTTP/1.1\r\nhost: {}\r\n",
        r.method, prefix, r.path, host
    );
    // Framing and routing headers are the engine's, not the recording's.
    let ours = |name: &str| {
        engine_header(name).is_some() || extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    for (name, value) in &r.headers {
        if !ours(name) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !r.body.is_empty() || matches!(r.method.as_str(), "POST" | "PUT" | "PATCH") {
        head.push_str(&format!("content-length: {}\r\n", r.body.len()));
    }
    head.into_bytes()
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
        let Err(LoadError::Invalid(problems)) = build_plan(&a) else {
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
        let Err(LoadError::Invalid(problems)) = build_plan(&a) else {
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
        let Err(LoadError::Invalid(problems)) = outcome else {
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
                Err(LoadError::Invalid(problems)) => {
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
        let Err(LoadError::Invalid(problems)) = build_plan(&args(&mixed)) else {
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
        let Err(LoadError::Invalid(problems)) = build_plan(&a) else {
            panic!("expected invalid")
        };
        let text = problems.join("\n");
        assert!(text.contains("no target named \"zz\""), "{text}");
        assert!(text.contains("--host a: expected NAME=host"), "{text}");
    }
}
