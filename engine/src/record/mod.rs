//! `hairline-engine record`: a reverse proxy in front of a live service that forwards every
//! request and response unchanged and writes a sample of the requests as a hairline trace
//! (docs/trace-format.md), optionally mirroring them to a test instance (docs/recording.md).
//!
//! The rule everything here follows: recording may lose samples, never requests, and never
//! adds waiting to a request. Proxy threads (`proxy`) hand copies to the writer (`writer`)
//! and the mirror (`mirror`) through bounded queues with `try_send`; a full queue is a
//! counted drop. Sampling (`sample`) is decided at arrival in O(1).
//!
//! Exit codes: 0 stopped by SIGINT/SIGTERM with the trace flushed, 2 bad flags (before
//! listening) or a failure to start.

mod label;
mod mirror;
mod proxy;
mod sample;
mod writer;

use crate::net::http::parse_http_url;
pub use crate::net::http::{
    parse_request_head, BodyFraming, ChunkedDecoder, RequestHead, ResponseTracker,
};
use crate::net::sockets::wait_readable;
pub use label::{normalize_ids, parse_label_rule, LabelRule, Labeler};
pub use sample::{parse_probability, parse_reservoir, Decision, SampleSpec, Sampler};
pub use writer::KeySource;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, Sender, TrySendError};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::json;

use mirror::{MirrorJob, MirrorWorker};
use writer::{LineFormat, Sample, Writer};

/// How long requests in flight at a stop may take to finish before they are abandoned.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// How long the writer may take to write what is queued at a stop.
const DRAIN_BOUND: Duration = Duration::from_millis(1000);
/// Bytes of samples that may wait for the writer, whatever their count.
const MAX_QUEUED_BYTES: usize = 64 * 1024 * 1024;
/// Stack of a connection thread: its buffers are on the heap.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;
/// Longest wait for an upstream connection to be established.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Record production traffic: a reverse proxy that forwards every request unchanged and
/// writes a sample of them as a hairline trace.
#[derive(clap::Args, Debug, Clone)]
pub struct RecordArgs {
    /// Address to listen on, HOST:PORT; port 0 picks a free one. The first line of stdout is
    /// `listening on HOST:PORT`.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// The live service, http://host:port.
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// The trace to write (JSONL, docs/trace-format.md); truncated if it exists.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Record each request with probability P, in (0, 1].
    #[arg(long, value_name = "P", conflicts_with = "reservoir")]
    pub sample: Option<f64>,
    /// Record at most K requests per interval T, spread evenly over it: e.g. 100/1s, 10/500ms.
    #[arg(long, value_name = "K/T")]
    pub reservoir: Option<String>,
    /// Apply the reservoir's K to each endpoint label separately.
    #[arg(long, requires = "reservoir")]
    pub reservoir_per_endpoint: bool,
    /// Seed of the sampling decisions (default: from the OS).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Endpoint label rule REGEX=NAME (split at the last '='); repeat, first match wins.
    #[arg(long = "label", value_name = "REGEX=NAME")]
    pub labels: Vec<String>,
    /// Label a path no rule matches with its id-like segments (numbers, UUIDs, long hex)
    /// replaced by `:id`.
    #[arg(long)]
    pub normalize_ids: bool,
    /// Record this header's value as the request's ordering key.
    #[arg(long, value_name = "NAME", conflicts_with = "key_cookie")]
    pub key_header: Option<String>,
    /// Record this cookie's value as the request's ordering key.
    #[arg(long, value_name = "NAME")]
    pub key_cookie: Option<String>,
    /// Never record this header (e.g. authorization, cookie); repeat for several.
    #[arg(long = "drop-header", value_name = "NAME")]
    pub drop_headers: Vec<String>,
    /// Also send the sampled requests to this test instance (http://host:port); its
    /// responses are discarded.
    #[arg(long, value_name = "URL")]
    pub mirror: Option<String>,
    /// Mirror every request, not only the sampled ones.
    #[arg(long, requires = "mirror")]
    pub mirror_all: bool,
    /// Requests waiting for the mirror beyond which new ones are dropped.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub mirror_queue: usize,
    /// Connections (and threads) sending to the mirror.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub mirror_connections: usize,
    /// Connect and response timeout of a mirrored request.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub mirror_timeout_ms: u64,
    /// Path answered by the recorder itself with its counters (JSON); never forwarded.
    #[arg(long, value_name = "PATH", default_value = "/__hairline/stats")]
    pub stats_path: String,
    /// Samples waiting for the writer beyond which new ones are dropped.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub queue: usize,
    /// Bodies larger than this are forwarded but neither recorded nor mirrored.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Time the upstream has to answer a request before the client gets a 504.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub upstream_timeout_ms: u64,
    /// Client connections served at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: usize,
    /// Service name written in the trace header.
    #[arg(long, value_name = "NAME")]
    pub service: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("invalid arguments:\n  - {}", .0.join("\n  - "))]
    Invalid(Vec<String>),
    #[error("--listen {addr}: cannot listen ({source}); pick a free port, or 0 for any")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("cannot write the trace header to {path}: {source}")]
    Header { path: PathBuf, source: io::Error },
    #[error("cannot start the recorder: {0}")]
    Io(#[from] io::Error),
}

/// Validated settings of one recording.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    pub upstream_url: String,
    pub out: PathBuf,
    pub spec: SampleSpec,
    pub seed: Option<u64>,
    pub labels: Vec<String>,
    pub labeler: Labeler,
    pub normalize_ids: bool,
    pub key: KeySource,
    pub drop_headers: Vec<String>,
    pub mirror: Option<(SocketAddr, String)>,
    pub mirror_all: bool,
    pub mirror_queue: usize,
    pub mirror_connections: usize,
    pub mirror_timeout: Duration,
    pub stats_path: String,
    pub queue: usize,
    pub max_body_bytes: usize,
    pub upstream_timeout: Duration,
    pub max_connections: usize,
    pub service: Option<String>,
}

impl RecordArgs {
    /// Checks every flag and reports all problems at once, each naming its flag and the fix.
    pub fn validate(&self) -> Result<RecordConfig, RecordError> {
        let mut problems = Vec::new();
        let listen = resolve_listen(&self.listen)
            .map_err(|e| problems.push(e))
            .ok();
        let upstream = upstream_addr("--upstream", &self.upstream)
            .map_err(|e| problems.push(e))
            .ok();
        let mirror = self.mirror.as_ref().and_then(|m| {
            upstream_addr("--mirror", m)
                .map(|addr| (addr, m.clone()))
                .map_err(|e| problems.push(e))
                .ok()
        });
        let spec = match (&self.sample, &self.reservoir) {
            (Some(p), _) => match parse_probability(*p) {
                Ok(p) if p >= 1.0 => Some(SampleSpec::All),
                Ok(p) => Some(SampleSpec::Uniform { p }),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
            (None, Some(text)) => match parse_reservoir(text) {
                Ok((k, interval_us)) => Some(SampleSpec::Reservoir {
                    k,
                    interval_us,
                    per_endpoint: self.reservoir_per_endpoint,
                }),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
            (None, None) => Some(SampleSpec::All),
        };
        let mut rules = Vec::new();
        for text in &self.labels {
            match parse_label_rule(text) {
                Ok(rule) => rules.push(rule),
                Err(e) => problems.push(e),
            }
        }
        let token = |flag: &str, name: &str, problems: &mut Vec<String>| {
            if name.is_empty() || !name.bytes().all(crate::format::trace::is_token_byte) {
                problems.push(format!(
                    "--{flag} {name:?}: not a header or cookie name; {}, e.g. x-user-id",
                    crate::format::trace::TOKEN_RULE
                ));
            }
        };
        let key = match (&self.key_header, &self.key_cookie) {
            (Some(h), _) => {
                token("key-header", h, &mut problems);
                KeySource::Header(h.clone())
            }
            (None, Some(c)) => {
                token("key-cookie", c, &mut problems);
                KeySource::Cookie(c.clone())
            }
            (None, None) => KeySource::None,
        };
        for h in &self.drop_headers {
            token("drop-header", h, &mut problems);
        }
        if !self.stats_path.starts_with('/')
            || self.stats_path.contains('?')
            || !self.stats_path.bytes().all(|b| b > b' ' && b != 0x7f)
        {
            problems.push(format!(
                "--stats-path {:?}: write a path starting with '/' without a query or spaces, e.g. /__hairline/stats",
                self.stats_path
            ));
        }
        let positive = |flag: &str, value: u64, problems: &mut Vec<String>| {
            if value == 0 {
                problems.push(format!("--{flag} 0: write a positive number"));
            }
        };
        positive("queue", self.queue as u64, &mut problems);
        positive("mirror-queue", self.mirror_queue as u64, &mut problems);
        positive("mirror-timeout-ms", self.mirror_timeout_ms, &mut problems);
        positive(
            "upstream-timeout-ms",
            self.upstream_timeout_ms,
            &mut problems,
        );
        positive(
            "max-connections",
            self.max_connections as u64,
            &mut problems,
        );
        if !(1..=64).contains(&self.mirror_connections) {
            problems.push(format!(
                "--mirror-connections {}: write a number from 1 to 64",
                self.mirror_connections
            ));
        }
        if self.out.is_dir() {
            problems.push(format!(
                "--out {}: is a directory; write a file path such as trace.jsonl",
                self.out.display()
            ));
        } else if let Some(parent) = self.out.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                problems.push(format!(
                    "--out {}: the directory {} does not exist; create it or write elsewhere",
                    self.out.display(),
                    parent.display()
                ));
            }
        }
        match (listen, upstream, spec) {
            (Some(listen), Some(upstream), Some(spec)) if problems.is_empty() => Ok(RecordConfig {
                listen,
                upstream,
                upstream_url: self.upstream.clone(),
                out: self.out.clone(),
                spec,
                seed: self.seed,
                labels: self.labels.clone(),
                labeler: Labeler::new(rules, self.normalize_ids),
                normalize_ids: self.normalize_ids,
                key,
                drop_headers: self
                    .drop_headers
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
                mirror,
                mirror_all: self.mirror_all,
                mirror_queue: self.mirror_queue,
                mirror_connections: self.mirror_connections,
                mirror_timeout: Duration::from_millis(self.mirror_timeout_ms),
                stats_path: self.stats_path.clone(),
                queue: self.queue,
                max_body_bytes: self.max_body_bytes,
                upstream_timeout: Duration::from_millis(self.upstream_timeout_ms),
                max_connections: self.max_connections,
                service: self.service.clone(),
            }),
            _ => Err(RecordError::Invalid(problems)),
        }
    }
}

fn resolve_listen(text: &str) -> Result<SocketAddr, String> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            format!("--listen {text:?}: write HOST:PORT, e.g. 127.0.0.1:8080 or 0.0.0.0:80")
        })
}

/// `http://host:port` (no path beyond `/`, no query) to a socket address.
fn upstream_addr(flag: &str, text: &str) -> Result<SocketAddr, String> {
    let fail = |why: String| format!("{flag} {text:?}: {why}; write e.g. http://127.0.0.1:8080");
    let url = parse_http_url(text).map_err(fail)?;
    if url.path_and_query != "/" || url.has_fragment {
        return Err(fail(
            "requests are forwarded with their own path, so the URL has none".into(),
        ));
    }
    Ok(url.addr)
}

/// The recorder's counters; all monotonic.
#[derive(Debug, Default)]
pub struct Counters {
    pub proxied: AtomicU64,
    pub sampled: AtomicU64,
    pub written: AtomicU64,
    pub dropped: AtomicU64,
    pub mirrored: AtomicU64,
    pub mirror_dropped: AtomicU64,
    pub upstream_errors: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct CounterSnapshot {
    /// Client requests handled (forwarded, or answered 502/504), stats requests excluded.
    pub proxied: u64,
    /// Requests chosen for the trace (for a reservoir: those kept when their interval closed).
    pub sampled: u64,
    /// Trace lines written.
    pub written: u64,
    /// Chosen requests not written: queue full, body over --max-body-bytes, not
    /// representable in the trace format, a failed write, or still queued at exit.
    pub dropped: u64,
    pub mirrored: u64,
    pub mirror_dropped: u64,
    /// Requests the upstream failed (refused, closed, timed out).
    pub upstream_errors: u64,
}

impl Counters {
    pub fn snapshot(&self) -> CounterSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            proxied: get(&self.proxied),
            sampled: get(&self.sampled),
            written: get(&self.written),
            dropped: get(&self.dropped),
            mirrored: get(&self.mirrored),
            mirror_dropped: get(&self.mirror_dropped),
            upstream_errors: get(&self.upstream_errors),
        }
    }
}

impl CounterSnapshot {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Arrival times: Unix µs at start plus monotonic time since, so that `ts_us` never goes
/// backwards within a recording (a wall-clock step would otherwise break the intervals).
#[derive(Debug)]
pub struct Clock {
    wall0_us: u64,
    mono0: Instant,
}

impl Clock {
    pub fn new() -> Clock {
        let wall0_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        Clock {
            wall0_us,
            mono0: Instant::now(),
        }
    }

    pub fn now_us(&self) -> u64 {
        self.wall0_us + self.mono0.elapsed().as_micros() as u64
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// What every thread of a recording shares.
pub(crate) struct Shared {
    counters: Counters,
    stop: Arc<AtomicBool>,
    /// Set when the stop begins: requests still in flight after it are abandoned.
    abandon_at: OnceLock<Instant>,
    /// Set once the proxy threads are done: the writer writes what is left and ends, and
    /// the mirror threads send what is queued and end.
    draining: AtomicBool,
    writer_done: AtomicBool,
    /// Set when the stop's drain begins: mirror requests still queued after it are dropped
    /// (and counted) instead of sent.
    mirror_deadline: OnceLock<Instant>,
    /// Mirror threads still running.
    mirror_workers: AtomicUsize,
    /// Mirror requests taken from the queue and not counted yet (being sent).
    mirror_in_flight: AtomicU64,
    mirror_timeout: Duration,
    clock: Clock,
    sampler: Mutex<Sampler>,
    needs_label: bool,
    format: LineFormat,
    samples: Sender<Sample>,
    queued_bytes: AtomicUsize,
    mirror: Option<Sender<MirrorJob>>,
    mirror_all: bool,
    upstream: SocketAddr,
    upstream_url: String,
    connect_timeout: Duration,
    upstream_timeout: Duration,
    max_body_bytes: usize,
    stats_path: String,
    /// Whether every request is recorded: then the sampler is not consulted.
    record_all: bool,
    /// Client connections being served.
    active: AtomicUsize,
    /// A handle on each client socket, to wake its thread at a stop.
    clients: Mutex<HashMap<u64, TcpStream>>,
}

impl Shared {
    fn abandon_now(&self) -> bool {
        self.abandon_at.get().is_some_and(|t| Instant::now() >= *t)
    }

    /// Queues a sample for the writer unless the queue is full; never waits.
    fn offer_sample(&self, sample: Sample) -> bool {
        let size = sample.size();
        if self.queued_bytes.fetch_add(size, Ordering::Relaxed) + size > MAX_QUEUED_BYTES {
            self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        match self.samples.try_send(sample) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued_bytes.fetch_sub(size, Ordering::Relaxed);
                false
            }
        }
    }
}

/// A running recorder.
pub struct Recorder {
    shared: Arc<Shared>,
    local: SocketAddr,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Recorder {
    /// Opens the trace, writes its header, binds, and starts serving. `stop` ends the
    /// recording when set (e.g. by a signal handler); [`Recorder::shutdown`] completes it.
    pub fn start(config: RecordConfig, stop: Arc<AtomicBool>) -> Result<Recorder, RecordError> {
        let mut out = open_out(&config)?;
        let header = header_line(&config);
        out.write_all(header.as_bytes())
            .map_err(|source| RecordError::Header {
                path: config.out.clone(),
                source,
            })?;
        let listener = TcpListener::bind(config.listen).map_err(|source| RecordError::Listen {
            addr: config.listen,
            source,
        })?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;

        let rng = match config.seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_entropy(),
        };
        let sampler = Sampler::new(config.spec.clone(), rng);
        let needs_label = sampler.needs_label();
        let format = LineFormat {
            labeler: Arc::new(config.labeler.clone()),
            key: config.key.clone(),
            drop_headers: config.drop_headers.clone(),
        };
        let (samples_tx, samples_rx) = bounded(config.queue);
        let (mirror_tx, mirror_rx) = match config.mirror {
            Some(_) => {
                let (tx, rx) = bounded(config.mirror_queue);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            stop,
            abandon_at: OnceLock::new(),
            draining: AtomicBool::new(false),
            writer_done: AtomicBool::new(false),
            mirror_deadline: OnceLock::new(),
            mirror_workers: AtomicUsize::new(0),
            mirror_in_flight: AtomicU64::new(0),
            mirror_timeout: config.mirror_timeout,
            clock: Clock::new(),
            sampler: Mutex::new(sampler),
            needs_label,
            format: format.clone(),
            samples: samples_tx,
            queued_bytes: AtomicUsize::new(0),
            mirror: mirror_tx,
            mirror_all: config.mirror_all,
            upstream: config.upstream,
            upstream_url: config.upstream_url.clone(),
            connect_timeout: config.upstream_timeout.min(MAX_CONNECT_TIMEOUT),
            upstream_timeout: config.upstream_timeout,
            max_body_bytes: config.max_body_bytes,
            stats_path: config.stats_path.clone(),
            record_all: config.spec == SampleSpec::All,
            active: AtomicUsize::new(0),
            clients: Mutex::new(HashMap::new()),
        });

        let (reservoir, per_endpoint) = match config.spec {
            SampleSpec::Reservoir {
                k,
                interval_us,
                per_endpoint,
            } => (Some((k, interval_us)), per_endpoint),
            _ => (None, false),
        };
        let writer = Writer {
            shared: Arc::clone(&shared),
            rx: samples_rx,
            out,
            format,
            reservoir,
            per_endpoint,
            whole_bytes: header.len() as u64,
            labels: writer::LabelBudget::default(),
            labels_full_told: false,
        };
        thread::Builder::new()
            .name("record-writer".into())
            .spawn(move || writer.run())?;
        if let (Some((addr, _)), Some(rx)) = (config.mirror.clone(), mirror_rx) {
            for i in 0..config.mirror_connections {
                shared.mirror_workers.fetch_add(1, Ordering::AcqRel);
                let worker = MirrorWorker {
                    shared: Arc::clone(&shared),
                    rx: rx.clone(),
                    addr,
                    timeout: config.mirror_timeout,
                };
                thread::Builder::new()
                    .name(format!("record-mirror-{i}"))
                    .spawn(move || worker.run())?;
            }
        }
        let acceptor = {
            let shared = Arc::clone(&shared);
            let max = config.max_connections;
            thread::Builder::new()
                .name("record-accept".into())
                .spawn(move || accept_loop(listener, shared, max))?
        };
        Ok(Recorder {
            shared,
            local,
            acceptor: Some(acceptor),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn counters(&self) -> CounterSnapshot {
        self.shared.counters.snapshot()
    }

    /// Stops accepting, lets requests in flight finish (abandoning them after a short
    /// grace), writes what the writer can within a short bound, and returns the final
    /// counters. Samples still unwritten after the bound count as dropped.
    pub fn shutdown(mut self) -> CounterSnapshot {
        let shared = &self.shared;
        shared.stop.store(true, Ordering::SeqCst);
        let grace_end = Instant::now() + STOP_GRACE;
        let _ = shared.abandon_at.set(grace_end);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // Idle clients' threads are blocked in a read: end it. A thread in the middle of a
        // request finishes it (the response goes out on the write side) and then closes.
        if let Ok(clients) = shared.clients.lock() {
            for stream in clients.values() {
                let _ = stream.shutdown(Shutdown::Read);
            }
        }
        // Abandoned connection threads notice within one read timeout.
        let threads_end = grace_end + Duration::from_millis(200);
        while shared.active.load(Ordering::Acquire) > 0 && Instant::now() < threads_end {
            thread::sleep(Duration::from_millis(5));
        }
        let drain_end = Instant::now() + DRAIN_BOUND;
        let _ = shared.mirror_deadline.set(drain_end);
        shared.draining.store(true, Ordering::Release);
        while !shared.writer_done.load(Ordering::Acquire) && Instant::now() < drain_end {
            thread::sleep(Duration::from_millis(5));
        }
        // A mirror request sent just before the deadline may take its whole timeout; the
        // counters are final only once every mirror thread has counted what it took.
        let mirror_end = drain_end + shared.mirror_timeout + Duration::from_millis(100);
        while shared.mirror_workers.load(Ordering::Acquire) > 0 && Instant::now() < mirror_end {
            thread::sleep(Duration::from_millis(5));
        }
        let mut last = shared.counters.snapshot();
        if !shared.writer_done.load(Ordering::Acquire) {
            // The writer is stuck (a full pipe, a hung disk): what it holds is lost.
            last.dropped = last.sampled.saturating_sub(last.written).max(last.dropped);
        }
        if shared.mirror_workers.load(Ordering::Acquire) > 0 {
            // A mirror thread is stuck past its timeout: what it holds and what is still
            // queued will never be sent.
            let queued = shared.mirror.as_ref().map_or(0, |tx| tx.len() as u64);
            last.mirror_dropped += queued + shared.mirror_in_flight.load(Ordering::Acquire);
        }
        last
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // A recorder dropped without `shutdown` still stops serving.
        self.shared.stop.store(true, Ordering::SeqCst);
    }
}

fn open_out(config: &RecordConfig) -> Result<File, RecordError> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&config.out)
        .map_err(|e| {
            RecordError::Invalid(vec![format!(
                "--out {}: cannot open for writing ({e}); write a path in a writable directory",
                config.out.display()
            )])
        })
}

#[derive(serde::Serialize)]
struct Header<'a> {
    hairline_trace: u64,
    source: &'static str,
    created: String,
    recorder: String,
    upstream: &'a str,
    sampling: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    labels: &'a [String],
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    normalize_ids: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    service: Option<&'a str>,
}

/// The trace's first line; the format version comes first so a reader sees it at once.
fn header_line(config: &RecordConfig) -> String {
    let header = Header {
        hairline_trace: crate::format::trace::TRACE_VERSION,
        source: "record",
        created: iso8601_utc(SystemTime::now()),
        recorder: format!("hairline-engine {}", env!("CARGO_PKG_VERSION")),
        upstream: &config.upstream_url,
        sampling: config.spec.describe(),
        seed: config.seed,
        labels: &config.labels,
        normalize_ids: config.normalize_ids,
        key: match &config.key {
            KeySource::Header(h) => Some(json!({ "header": h })),
            KeySource::Cookie(c) => Some(json!({ "cookie": c })),
            KeySource::None => None,
        },
        service: config.service.as_deref(),
    };
    let mut line = serde_json::to_string(&header).unwrap_or_default();
    line.push('\n');
    line
}

/// `YYYY-MM-DDTHH:MM:SSZ` of a time (UTC), from the day count since 1970 by the proleptic
/// Gregorian calendar's 400-year cycle.
fn iso8601_utc(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Shift the epoch to 0000-03-01 so that leap days fall at the end of a year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, max_connections: usize) {
    let fd = listener.as_raw_fd();
    let mut next_id: u64 = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        if shared.active.load(Ordering::Acquire) >= max_connections {
            // Further clients wait in the listen backlog until a connection ends.
            thread::sleep(Duration::from_millis(1));
            continue;
        }
        if !wait_readable(fd, Duration::from_millis(100)) {
            continue;
        }
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(false).is_err() {
                    continue;
                }
                let id = next_id;
                next_id += 1;
                if let (Ok(handle), Ok(mut clients)) = (stream.try_clone(), shared.clients.lock()) {
                    clients.insert(id, handle);
                }
                shared.active.fetch_add(1, Ordering::AcqRel);
                let conn_shared = Arc::clone(&shared);
                let spawned = thread::Builder::new()
                    .name("record-conn".into())
                    .stack_size(CONNECTION_STACK_BYTES)
                    .spawn(move || {
                        proxy::serve(stream, &conn_shared);
                        if let Ok(mut clients) = conn_shared.clients.lock() {
                            clients.remove(&id);
                        }
                        conn_shared.active.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    if let Ok(mut clients) = shared.clients.lock() {
                        clients.remove(&id);
                    }
                    shared.active.fetch_sub(1, Ordering::AcqRel);
                    eprintln!("hairline-engine record: cannot start a connection thread; closing the connection");
                    thread::sleep(Duration::from_millis(10));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of descriptors and the like: say so, back off, keep serving.
                eprintln!("hairline-engine record: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RecordArgs,
    }

    fn problems(extra: &[&str]) -> String {
        let dir = std::env::temp_dir();
        let out = dir.join("hairline-record-args-test.jsonl");
        let mut argv = vec![
            "record",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
            "--out",
        ];
        let out_text = out.to_string_lossy().into_owned();
        argv.push(&out_text);
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli
                .args
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn good_flags_validate() {
        assert_eq!(problems(&[]), "");
        assert_eq!(
            problems(&[
                "--reservoir",
                "10/500ms",
                "--reservoir-per-endpoint",
                "--label",
                "^/a=a"
            ]),
            ""
        );
        assert_eq!(
            problems(&[
                "--sample",
                "0.5",
                "--mirror",
                "http://127.0.0.1:1",
                "--mirror-all"
            ]),
            ""
        );
    }

    #[test]
    fn bad_flags_name_the_flag() {
        for (args, flag) in [
            (vec!["--sample", "1.5"], "--sample"),
            (vec!["--sample", "0"], "--sample"),
            (vec!["--reservoir", "0/1s"], "--reservoir"),
            (vec!["--reservoir", "5/1x"], "--reservoir"),
            (vec!["--label", "(oops=x"], "--label"),
            (vec!["--upstream", "ftp://h:1"], "--upstream"),
            (
                vec!["--upstream", "http://127.0.0.1:1/prefix"],
                "--upstream",
            ),
            (vec!["--mirror", "not a url"], "--mirror"),
            (vec!["--listen", "nowhere"], "--listen"),
            (vec!["--out", "/no/such/dir/t.jsonl"], "--out"),
            (vec!["--key-header", "bad name"], "--key-header"),
            (vec!["--stats-path", "stats"], "--stats-path"),
            (vec!["--mirror-connections", "0"], "--mirror-connections"),
            (
                vec!["--sample", "0.5", "--reservoir", "1/1s"],
                "--reservoir",
            ),
            (vec!["--reservoir-per-endpoint"], "--reservoir"),
        ] {
            let message = problems(&args);
            assert!(message.contains(flag), "{args:?}: {message}");
        }
        // The rule a header name breaks is the trace format's own: a token, `_` included.
        let message = problems(&["--key-header", "x user"]);
        assert!(message.contains("a name is a token: letters, digits and !#$%&'*+-.^_`|~"));
        assert_eq!(
            problems(&["--key-header", "x_user", "--drop-header", "x_secret"]),
            ""
        );
        // Every problem is reported at once.
        let message = problems(&["--sample", "2", "--label", "x", "--stats-path", "s"]);
        assert!(
            message.contains("--sample")
                && message.contains("--label")
                && message.contains("--stats-path")
        );
    }

    #[test]
    fn dates_are_iso8601_utc() {
        let at = |s: u64| iso8601_utc(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}
