//! `hairline-engine record`: a reverse proxy in front of a live service that forwards every
//! request and response unchanged and writes a sample of the requests as a hairline trace
//! (docs/trace-format.md), optionally mirroring them to a test instance (docs/recording.md).
//!
//! The rule everything here follows: recording may lose samples, never requests, and never
//! adds waiting to a request. Proxy threads (`proxy`, the copies taken by `capture`) hand
//! copies to the writer (`writer`, lines made by `line`) and the mirror (`mirror`) through
//! bounded queues with `try_send`; a full queue is a counted drop. Sampling (`sample`) is
//! decided at arrival in O(1). `config` checks the flags, `recorder` starts and stops the
//! threads, which share `shared`.
//!
//! Exit codes: 0 stopped by SIGINT/SIGTERM with the trace flushed, 2 bad flags (before
//! listening) or a failure to start.

mod capture;
mod config;
mod error;
mod header;
mod label;
mod line;
mod mirror;
mod proxy;
mod recorder;
mod sample;
mod shared;
mod writer;

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

pub use crate::net::http::{
    parse_request_head, BodyFraming, ChunkedDecoder, RequestHead, ResponseTracker,
};
pub use config::{RecordArgs, RecordConfig};
pub use error::RecordError;
pub use label::{normalize_ids, parse_label_rule, LabelRule, Labeler};
pub use line::KeySource;
pub use recorder::Recorder;
pub use sample::{parse_probability, parse_reservoir, Decision, SampleSpec, Sampler};
pub use shared::{Clock, CounterSnapshot, Counters};

/// `hairline-engine record`: validates, starts, records until SIGINT/SIGTERM, prints the
/// counters as one JSON line on stderr.
pub fn run(args: RecordArgs) -> Result<(), RecordError> {
    let config = args.validate()?;
    let stop = Arc::new(AtomicBool::new(false));
    // Installed before listening, so a signal at any point after `listening on` is a clean
    // stop rather than the default kill.
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let recorder = Recorder::start(config.clone(), stop.clone())?;
    {
        let mut stdout = io::stdout().lock();
        writeln!(stdout, "listening on {}", recorder.local_addr())?;
        stdout.flush()?;
    }
    eprintln!(
        "hairline-engine record: {} -> {}, sampling {}, writing {}{}",
        recorder.local_addr(),
        config.upstream_url,
        config.spec.describe(),
        config.out.display(),
        config
            .mirror
            .as_ref()
            .map(|(_, url)| format!(", mirroring to {url}"))
            .unwrap_or_default()
    );
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(20));
    }
    let last = recorder.shutdown();
    eprintln!("{}", last.to_json());
    Ok(())
}
