//! `hairline-engine load`'s flags, as clap reads them; `plan` checks them.

use std::path::PathBuf;

use clap::ValueEnum;

use crate::load::priority::PriorityMode;

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
    /// Send every request due within this many microseconds of a wake-up on it, early, so
    /// that sends close together share one wake-up of the loop (0: each on its own). Worth
    /// it with --spin-us 0 on a VM, where a wake-up costs tens of microseconds of CPU
    /// (docs/precision.md); latency of an early send is measured from its write.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub coalesce_us: u64,
    /// The event loop's scheduling: `auto` asks for real-time priority when it sleeps
    /// between sends (it shares a CPU with a service) and nice -10 when it spins, keeping
    /// the default where refused; the summary's `scheduling` says what it got.
    #[arg(long, value_enum, default_value = "auto")]
    pub priority: PriorityMode,
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
